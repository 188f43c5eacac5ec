// The per-thread cache of freed blocks behind small buffers and recorded tensors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "core/thread_block_cache.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaching = false;
#else
constexpr bool kCaching = true;
#endif

// The blocks the cache under test frees itself (its evictions and its thread's exit). Each test
// touches it before keeping anything, so that it is destroyed after the cache's release.
thread_local std::vector<void*> t_freed;
void record_free(void* p) {
  t_freed.push_back(p);
  std::free(p);
}
using Cache = ThreadBlockCache<3, record_free>;

TEST(ThreadBlockCache, GivesBackABlockOfTheSameSizeOnly) {
  if (!kCaching) GTEST_SKIP() << "AddressSanitizer builds keep no blocks";
  t_freed.clear();
  void* a = std::malloc(64);
  ASSERT_TRUE(Cache::keep(64, a));
  EXPECT_EQ(Cache::take(128), nullptr);
  EXPECT_EQ(Cache::take(64), a);
  EXPECT_EQ(Cache::take(64), nullptr);  // given once
  std::free(a);
}

TEST(ThreadBlockCache, AFullCacheFreesItsOldestBlock) {
  if (!kCaching) GTEST_SKIP() << "AddressSanitizer builds keep no blocks";
  t_freed.clear();
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(std::malloc(32));
  for (void* b : blocks) ASSERT_TRUE(Cache::keep(32, b));
  ASSERT_EQ(t_freed.size(), 1u);
  EXPECT_EQ(t_freed[0], blocks[0]);
  std::set<void*> taken;
  for (int i = 0; i < 3; ++i) taken.insert(Cache::take(32));
  EXPECT_EQ(taken, (std::set<void*>{blocks[1], blocks[2], blocks[3]}));
  EXPECT_EQ(Cache::take(32), nullptr);
  for (void* b : taken) std::free(b);
}

TEST(ThreadBlockCache, AThreadsExitFreesWhatItKept) {
  if (!kCaching) GTEST_SKIP() << "AddressSanitizer builds keep no blocks";
  std::vector<void*> kept, freed;
  std::thread([&] {
    // Thread-local destructors run in the reverse order of construction: the record first, then
    // the report (which reads the record), then the cache's release (armed by the first keep),
    // which therefore runs first.
    t_freed.clear();
    struct Report {
      std::vector<void*>* out;
      ~Report() { *out = t_freed; }
    };
    thread_local Report report{&freed};
    (void)report;
    for (int i = 0; i < 2; ++i) {
      kept.push_back(std::malloc(16));
      ASSERT_TRUE(Cache::keep(16, kept.back()));
    }
  }).join();
  EXPECT_EQ(std::set<void*>(freed.begin(), freed.end()), std::set<void*>(kept.begin(), kept.end()));
}

// Tensors recorded on one thread and freed on another: their blocks go to the freeing thread's
// cache and serve its next tensors, which hold the right values.
TEST(ThreadBlockCache, TensorsFreedOnAnotherThreadServeItsNextOnes) {
  std::vector<Tensor> made;
  std::thread([&] {
    Tensor x = Tensor::from({1, 2, 3, 4}, {4});
    for (int i = 0; i < 50; ++i) made.push_back(x * double(i));
  }).join();
  std::set<const void*> blocks;
  for (const Tensor& t : made) blocks.insert(t.impl());
  Tensor y = Tensor::from({1, 1, 1, 1}, {4});
  for (int round = 0; round < 3; ++round) {
    made.clear();  // freed here
    for (int i = 0; i < 50; ++i) made.push_back(y + double(i));
    for (int i = 0; i < 50; i += 7) EXPECT_EQ(made[size_t(i)].value().get(2), 1.0 + i) << "round " << round;
    if (round == 0 && kCaching) {
      size_t reused = 0;
      for (const Tensor& t : made) reused += blocks.count(t.impl());
      EXPECT_GE(reused, 40u) << "the other thread's tensors' blocks serve this thread's next ones";
    }
  }
}

// allocate_shared through RecyclingAllocator: a freed object's block (with its control block)
// serves the next object of its cache, and only its cache's.
struct TagA;
struct TagB;
using CacheA = ThreadBlockCache<4, delete_block, TagA>;
using CacheB = ThreadBlockCache<4, delete_block, TagB>;
TEST(ThreadBlockCache, RecyclingAllocatorsReuseTheirOwnCachesBlocks) {
  if (!kCaching) GTEST_SKIP() << "AddressSanitizer builds keep no blocks";
  auto a = std::allocate_shared<std::vector<int>>(RecyclingAllocator<std::vector<int>, CacheA>(), 3, 7);
  // The block starts at the control block, which allocate_shared places before the object:
  // compare the objects' addresses, which sit at the same offset in equal blocks.
  const void* first = a.get();
  a.reset();
  auto b = std::allocate_shared<std::vector<int>>(RecyclingAllocator<std::vector<int>, CacheB>(), 2, 5);
  EXPECT_NE(static_cast<const void*>(b.get()), first) << "another cache's block";
  auto c = std::allocate_shared<std::vector<int>>(RecyclingAllocator<std::vector<int>, CacheA>(), 2, 5);
  EXPECT_EQ(static_cast<const void*>(c.get()), first) << "the freed block, from its own cache";
  EXPECT_EQ(*c, std::vector<int>({5, 5}));
}

// Host tensors made after others were freed hold their own values (their buffer objects come
// from the freed ones).
TEST(ThreadBlockCache, HostTensorsReusingBufferBlocksHoldTheirValues) {
  std::vector<HostTensor> hs;
  for (int round = 0; round < 3; ++round) {
    hs.clear();
    for (int i = 0; i < 40; ++i) {
      hs.emplace_back(DType::F32, Shape{3});
      for (int k = 0; k < 3; ++k) hs.back().set(k, 10.0 * round + i + 0.25 * k);
    }
    for (int i = 0; i < 40; ++i)
      for (int k = 0; k < 3; ++k) ASSERT_EQ(hs[size_t(i)].get(k), 10.0 * round + i + 0.25 * k);
  }
}

}  // namespace
}  // namespace synoros
