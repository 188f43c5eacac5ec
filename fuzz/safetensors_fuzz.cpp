// Fuzz target: safetensors checkpoints. The input is a whole file. It is parsed from memory,
// then loaded again through the path-based readers, which must agree with the in-memory parse.
#include <cstring>

#include "fuzz_util.hpp"
#include "io/safetensors.hpp"
#include "synoros/checkpoint.hpp"

using namespace synoros;

namespace {

void check_same(const io::Checkpoint& a, const io::Checkpoint& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) fuzz::fail("file and memory loads differ");
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.dtype != t.dtype || it->second.shape != t.shape ||
        std::memcmp(it->second.buffer->data(), t.buffer->data(), t.bytes()) != 0)
      fuzz::fail("file and memory loads differ in tensor " + name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = fuzz::text_of(data, size);
  fuzz::MemFile file(bytes);
  std::string memory_error;
  io::Checkpoint c;
  try {
    c = io::parse_safetensors(file.path(), bytes);
  } catch (const Error& e) {
    memory_error = e.what();
  }
  try {
    io::Checkpoint from_file = io::load_safetensors(file.path());
    if (!memory_error.empty()) fuzz::fail("the file loads but the memory parse failed: " + memory_error);
    check_same(c, from_file);
  } catch (const Error& e) {
    if (memory_error != e.what()) fuzz::fail(std::string("the loads fail differently: ") + e.what());
    return 0;
  }

  // Everything accepted is consistent: the tensors fit in the file and describe their bytes.
  size_t total = 0;
  for (const auto& [name, t] : c.tensors) {
    if (t.buffer->bytes() < t.bytes()) fuzz::fail("tensor " + name + " has a short buffer");
    total += t.bytes();
  }
  if (total > size) fuzz::fail("the tensors hold more bytes than the file");

  // load_into targets of the same dtypes and shapes receive the same bytes.
  std::map<std::string, HostTensor> copies;
  std::vector<std::pair<std::string, HostTensor*>> targets;
  for (const auto& [name, t] : c.tensors) {
    auto it = copies.emplace(name, HostTensor(t.dtype, t.shape)).first;
    targets.emplace_back(name, &it->second);
  }
  try {
    io::load_into(file.path(), targets);
  } catch (const Error&) {
    // Refused for a foreign format version; anything else is a bug.
    auto ver = c.metadata.find(io::kFormatKey);
    if (ver == c.metadata.end() || ver->second == io::kFormatVersion) fuzz::fail("load_into refused a valid file");
    return 0;
  }
  for (const auto& [name, t] : c.tensors)
    if (std::memcmp(copies.at(name).buffer->data(), t.buffer->data(), t.bytes()) != 0)
      fuzz::fail("load_into wrote other bytes into " + name);
  return 0;
}
