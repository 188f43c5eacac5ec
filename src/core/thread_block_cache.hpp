// Blocks of memory a thread freed, kept for that thread's next allocations of the same size. An
// eager loop allocates and frees the same few small values and tensors every step, more of one
// size at a time than the C library's per-thread cache holds (and an aligned allocation cannot
// use that cache at all).
//
// Plain thread-local storage that no destructor touches, so a block freed late in a thread's
// exit is safe: the first block kept arms a release that frees what is held when the thread
// exits, and blocks freed after it go to `Free`. Off under AddressSanitizer, which must see every
// block freed.
#pragma once

#include <cstddef>

#include "core/thread_scratch.hpp"

namespace synoros {

// Tag tells apart caches of the same size and release (each kind of block its own slots).
template <size_t Slots, void (*Free)(void*), class Tag = void>
class ThreadBlockCache {
 public:
  // A kept block of exactly `bytes`, the newest first, or null.
  static void* take(size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
    (void)bytes;
    return nullptr;
#else
    State& s = state();
    for (size_t i = s.count; i-- > 0;)
      if (s.held[i].bytes == bytes) {
        void* p = s.held[i].p;
        s.held[i] = s.held[--s.count];
        return p;
      }
    return nullptr;
#endif
  }
  // Keeps p (a block of `bytes`) for this thread's next take; when every slot is used, the
  // oldest block is freed. False where p is not kept (the caller frees it).
  static bool keep(size_t bytes, void* p) {
#if defined(__SANITIZE_ADDRESS__)
    (void)bytes, (void)p;
    return false;
#else
    State& s = state();
    if (s.closed) return false;
    if (!s.armed) {
      thread_local Release release;  // constructed once, so that the thread's exit frees what is held
      (void)release;
      s.armed = true;
    }
    if (s.count == Slots) {
      Free(s.held[0].p);
      for (size_t i = 1; i < Slots; ++i) s.held[i - 1] = s.held[i];
      --s.count;
    }
    s.held[s.count++] = {bytes, p};
    return true;
#endif
  }

 private:
  struct Held {
    size_t bytes;
    void* p;
  };
  struct State {
    Held held[Slots];
    size_t count;
    bool armed, closed;
  };
  // Zero-initialised and trivially destructible: no guard, no destructor.
  static State& state() { return thread_scratch<State>(); }
  struct Release {
    ~Release() {
      State& s = state();
      for (size_t i = 0; i < s.count; ++i) Free(s.held[i].p);
      s.count = 0;
      s.closed = true;
    }
  };
};

// An allocator for std::allocate_shared whose blocks (the object with its control block) come
// from, and go back to, a ThreadBlockCache of blocks from ::operator new: a thread that frees and
// makes such objects every step reuses the same few blocks.
inline void delete_block(void* p) { ::operator delete(p); }
template <class T, class Cache>
struct RecyclingAllocator {
  using value_type = T;
  RecyclingAllocator() = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U, Cache>&) {}
  T* allocate(size_t n) {
    if (void* p = n == 1 ? Cache::take(sizeof(T)) : nullptr) return static_cast<T*>(p);
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (!Cache::keep(n * sizeof(T), p)) ::operator delete(p);
  }
  template <class U>
  bool operator==(const RecyclingAllocator<U, Cache>&) const {
    return true;
  }
};

}  // namespace synoros
