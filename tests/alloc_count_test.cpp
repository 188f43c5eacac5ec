// Steps that must not allocate: the binary's operator new counts its calls while a test arms it.
// (Skipped in sanitizer builds, whose runtimes own operator new.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "api/tensor_impl.hpp"
#include "synoros/tiny_mlp.hpp"
#include "test_util.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define SYNOROS_COUNT_ALLOCATIONS 0
#else
#define SYNOROS_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> g_armed{false};
std::atomic<long> g_count{0};
}  // namespace

#if SYNOROS_COUNT_ALLOCATIONS
namespace {
void* counted(std::size_t n, std::size_t align) {
  if (g_armed.load(std::memory_order_relaxed)) g_count.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else if (posix_memalign(&p, align, n) != 0) {
    p = nullptr;
  }
  return p;
}
void* counted_or_throw(std::size_t n, std::size_t align) {
  void* p = counted(n, align);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_or_throw(n, 0); }
void* operator new[](std::size_t n) { return counted_or_throw(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_or_throw(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_or_throw(n, std::size_t(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return counted(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted(n, std::size_t(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
#endif

namespace synoros {
namespace {

// Allocations made by `fn` (operator new calls on any thread).
template <class F>
long allocations_in(F&& fn) {
  g_count = 0;
  g_armed = true;
  fn();
  g_armed = false;
  return g_count.load();
}

TEST(Allocation, TheCounterSeesAnAllocation) {
  if (!SYNOROS_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer builds own operator new";
  long n = allocations_in([] {
    auto* v = new std::vector<int>(1000);
    delete v;
  });
  EXPECT_GE(n, 2);
}

TEST(Allocation, DecodingAllocatesNothingPerToken) {
  if (!SYNOROS_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer builds own operator new";
  nn::GptConfig c{40, 24, 16, 2, 2};
  nn::Gpt m(c, 5);
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    nn::GptGenerator gen(m, 2);
    gen.prefill({{1, 2, 3}, {4, 5, 6}});
    std::vector<int64_t> next = {7, 8};
    gen.decode(next);  // compiles the decode plan
    gen.decode(next);  // its second run recompiles hot groups (when generated kernels are on)
    long n = allocations_in([&] {
      for (int i = 0; i < 8; ++i) {
        const float* logits = gen.decode(next);
        next = {int64_t(logits[0] > logits[1]), int64_t(logits[2] > logits[3])};  // no reallocation: same size
      }
    });
    EXPECT_EQ(n, 0) << "at " << threads << " threads";
    EXPECT_EQ(gen.position(), 3 + 10);
  }
  set_num_threads(saved);
}

// An eager training step records its forward every iteration, so it allocates: the tensors'
// shapes and input lists, the results' shapes (counted here: operator new; their aligned data is
// not). The tensors' blocks, the results' host tensors and buffer objects, the backward's, the
// update's and the shape rules' scratch are reused: 28 per step (8 recorded ops) when this was
// written (48 before the host tensors, buffer objects and the update's arguments were reused),
// so the bound catches one more allocation in every other recorded op.
TEST(Allocation, AnEagerTrainingStepAllocatesAFewTimesPerOp) {
  if (!SYNOROS_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer builds own operator new";
  std::shared_ptr<nn::Sequential> mlp = nn::tiny_mlp_modules();
  nn::Sequential& model = *mlp;
  optim::SGD opt(model.parameters(), 1e-3);
  Tensor x = Tensor::randn({8, 16}, 1), t = Tensor::randn({8, 8}, 2);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = mse_loss(model(x), t);
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step();  // records, then replays
  const size_t replays = backward_replays();
  long n = allocations_in([&] {
    for (int i = 0; i < 10; ++i) step();
  });
  EXPECT_EQ(backward_replays(), replays + 10);
  EXPECT_LE(n, 10 * 32) << n / 10 << " per step";
}

}  // namespace
}  // namespace synoros
