// Weights kept in a GEMM provider's packed layout between calls, one copy per weight and layout
// for the whole process: every launch of every plan that reads the same weight the same way (the
// prefill plans of each prompt length and the decoding plans of a generator, an evaluation plan
// beside a training step, a frozen base under LoRA) shares it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "kernels/cpu/gemm.hpp"
#include "synoros/core.hpp"

namespace synoros::kernels {

class GemmProvider;

// One packed copy of a weight, shared by the launches that read it (see packed_weight_for).
// Readers use it after the lock is released: a change of the weight (or of the instruction set)
// while another thread runs a plan that reads it is a race, as it is for the weight itself.
struct PackedCopy {
  std::mutex mu;                   // held while the copy is checked and (re)packed
  uint64_t packed = ~uint64_t(0);  // the weight's version `data` holds
  int isa = -1;
  std::unique_ptr<Buffer> data;
};

// What one launch keeps: the weight's buffer, the version its last call saw, and the shared copy.
// A copy is made by the second call of a launch that sees the same version of the weight (a weight
// that changes every step, as in training, never gets one); a launch whose copy another plan
// already packed at the current version reads it from its first call. The copy is repacked when
// the version or the instruction set moves, and its memory counts against the engine's limit:
// when that refuses it, the launch packs per call as it would without the copy, until the weight's
// next version (other launches still try). The packed panels hold the weight's floats, so the
// bits do not change. A write the engine is not told of (Buffer::mark_modified) is not seen by a
// launch that reads a copy, whichever plan packed it.
struct PackedWeight {
  const Buffer* src = nullptr;
  uint64_t seen = ~uint64_t(0);     // the version the launch's last call saw
  uint64_t refused = ~uint64_t(0);  // the version the memory limit refused this launch a copy of
  std::shared_ptr<PackedCopy> copy;
};

// Whether a launch may keep a copy derived from the weight in `src` (packed panels, a transformed
// convolution weight) and reuse it while src's version stays: not for borrowed memory (a NumPy
// array, a PyTorch tensor), whose owner can change it in place without moving the version, nor
// when SYNOROS_NO_WEIGHT_PACKS=1 asks every call to derive it again.
bool may_keep_derived_copy(const Buffer* src);

// The launch's record for weight B (which lies in `src`, read with shape's N, K and B strides)
// packed by `provider`, sharing the copy of every other live launch with the same key. A
// provider's packed layout may depend only on its class, those of the shape and the instruction
// set (not on M, nor on which instance of the class packs it).
PackedWeight packed_weight_for(const GemmProvider& provider, const Buffer* src, const void* B, const GemmShape& shape);

// The packed B for this call (null: pack per call, or the provider reads B as given).
const float* packed_weight(PackedWeight& w, const GemmProvider& provider, const GemmShape& shape, const void* B,
                           ThreadPool& pool);

// The live shared records: one per weight and layout that a live launch may pack (for tests).
size_t packed_copies();

}  // namespace synoros::kernels
