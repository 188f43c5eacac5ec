// Checkpoints in the safetensors format, so that PyTorch (and anything else speaking the format)
// reads what we write and we read what it writes:
//   8 bytes  little-endian u64 N, the header length
//   N bytes  JSON {name: {"dtype": "F32"|"F64"|"I32"|"I64", "shape": [...],
//                  "data_offsets": [begin, end]}, "__metadata__": {string: string}},
//            padded with spaces so the data starts 8-byte aligned
//   data     raw little-endian tensor bytes, tensors ordered by name, offsets relative to here.
// Saves are atomic (temporary file, fsync, rename, fsync of the directory): a failed save
// leaves an existing checkpoint untouched. Loads check every bound; a truncated or corrupt file
// raises synoros::Error naming the file and the cause.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "synoros/core.hpp"
#include "synoros/tensor.hpp"

namespace synoros::io {

using Metadata = std::map<std::string, std::string>;

// The format version we write under "synoros.format"; load_into refuses any other value.
inline constexpr const char* kFormatKey = "synoros.format";
inline constexpr const char* kFormatVersion = "1";

struct Checkpoint {
  std::map<std::string, HostTensor> tensors;
  Metadata metadata;
};

// Writes `tensors` (names unique, non-empty, not "__metadata__"; each tensor's buffer holding
// its bytes) with `metadata` plus "synoros.format" = "1".
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, const HostTensor*>>& tensors,
                      const Metadata& metadata = {});
void save_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors,
                      const Metadata& metadata = {});

// Reads every tensor and the metadata. Accepts files written by other tools (no version key).
Checkpoint load_safetensors(const std::string& path);

// Copies the file's tensors into `targets` in place (their buffers are kept and marked
// modified). Every target must be in the file with the same dtype and shape, and the file may
// hold no other tensor; a "synoros.format" other than "1" is refused. Nothing is written
// unless every check passes. Returns the file's metadata.
Metadata load_into(const std::string& path, const std::vector<std::pair<std::string, HostTensor*>>& targets);

// The same for front-end Tensors (model parameters). save realizes each tensor; load_into
// needs realized leaf tensors and overwrites their storage in place (plans holding them see
// the new values).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata = {});
Metadata load_into(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& targets);

// Typed reads of a checkpoint's metadata: a missing key or a value that is not an integer in
// [lo, hi] is an Error naming the file, the key and the value.
const std::string& metadata_text(const Metadata& md, const std::string& key, const std::string& path);
int64_t metadata_int(const Metadata& md, const std::string& key, const std::string& path, int64_t lo, int64_t hi);
// A real written so that it reads back exactly (17 significant digits).
std::string metadata_real(double v);
// Resuming: every key of `expected` that the checkpoint's metadata also has must hold the same
// value (older checkpoints lack some keys); otherwise an Error naming the field and both values.
void check_same_run(const Metadata& have, const Metadata& expected, const std::string& path);

// safetensors' dtype names: "F32", "F64", "I32", "I64".
const char* safetensors_dtype(DType t);

}  // namespace synoros::io
