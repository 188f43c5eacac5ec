// Small counter-based random numbers for the data pipeline. Every draw is a pure function of
// its key (seed, epoch, index, ...), so results never depend on thread count, batch order or
// the standard library (std::mt19937 distributions differ between implementations).
#pragma once

#include <cstdint>
#include <initializer_list>

namespace synoros::data::detail {

// SplitMix64's finaliser: a bijective 64-bit mixer with good avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Hashes a tuple of words into one key; order matters.
constexpr uint64_t hash_key(std::initializer_list<uint64_t> words) {
  uint64_t h = 0x243F6A8885A308D3ull;  // pi's fraction bits: an arbitrary nonzero start
  for (uint64_t w : words) h = mix64(h ^ mix64(w));
  return h;
}

// Stream tags keep the draws of different purposes apart.
enum Stream : uint64_t { kShuffle = 1, kCrop = 2, kFlip = 3, kWindow = 4 };

// A SplitMix64 stream started from a key.
class SplitMix {
 public:
  explicit constexpr SplitMix(uint64_t key) : state_(key) {}
  constexpr uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n >= 1, without modulo bias (rejects the short top range).
  constexpr uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      uint64_t x = next();
      if (x >= threshold) return x % n;
    }
  }

 private:
  uint64_t state_;
};

// Uniform in [0, n) drawn from one key (a fresh stream per key).
constexpr uint64_t uniform_below(uint64_t key, uint64_t n) { return SplitMix(key).below(n); }

}  // namespace synoros::data::detail
