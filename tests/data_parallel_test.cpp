// Data-parallel training's pieces: the micro-shard layout, the chain fold (the same bits as one
// process's left fold, for every group size; ranks are threads here, processes under mpirun in
// tests/cli/mpi_train_test.sh) and the classifier trainer's micro-shards.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

#include "synoros/synoros.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

// Ranks as threads of one process: a mailbox per (sender, receiver), in order.
struct Mailboxes {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> box;
};

class ThreadRank final : public dist::ProcessGroup {
 public:
  ThreadRank(std::shared_ptr<Mailboxes> m, int rank, int size) : m_(std::move(m)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // A send is delivered at once; a receive completes when its message is there (receives from
  // one rank complete in the order they were posted).
  Request isend(int dst, const void* data, size_t bytes) override {
    const char* p = static_cast<const char*>(data);
    std::lock_guard<std::mutex> lock(m_->mu);
    m_->box[{rank_, dst}].emplace_back(p, p + bytes);
    m_->cv.notify_all();
    return kDone;
  }
  Request irecv(int src, void* data, size_t bytes) override {
    posted_.push_back({next_, src, data, bytes});
    return next_++;
  }
  bool test(Request r) override { return complete(r, false); }
  void wait(Request r) override { complete(r, true); }
  void broadcast(int root, void* data, size_t bytes) override {
    if (rank_ != root) return recv(root, data, bytes);
    for (int r = 0; r < size_; ++r)
      if (r != root) send(r, data, bytes);
  }

 private:
  static constexpr Request kDone = -1;
  struct Posted {
    Request id;
    int src;
    void* data;
    size_t bytes;
  };
  // Delivers posted receives in order until `r` is done (or, without `block`, nothing is there).
  bool complete(Request r, bool block) {
    if (r == kDone) return true;
    std::unique_lock<std::mutex> lock(m_->mu);
    for (;;) {
      auto it = std::find_if(posted_.begin(), posted_.end(), [&](const Posted& p) { return p.id == r; });
      if (it == posted_.end()) return true;
      auto first = std::find_if(posted_.begin(), it + 1, [&](const Posted& p) { return p.src == it->src; });
      auto& q = m_->box[{first->src, rank_}];
      if (q.empty()) {
        if (!block) return false;
        m_->cv.wait(lock);
        continue;
      }
      if (q.front().size() != first->bytes) throw Error("ThreadRank: message of the wrong size");
      std::memcpy(first->data, q.front().data(), first->bytes);
      q.pop_front();
      posted_.erase(first);
    }
  }
  std::shared_ptr<Mailboxes> m_;
  int rank_, size_;
  std::vector<Posted> posted_;
  Request next_ = 0;
};

// Runs body(group) on `n` thread ranks.
void on_ranks(int n, const std::function<void(dist::ProcessGroup&)>& body) {
  auto m = std::make_shared<Mailboxes>();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ThreadRank g(m, r, n);
      body(g);
    });
  for (auto& t : threads) t.join();
}

TEST(DataParallel, MicroShardsAreContiguousAndBalanced) {
  EXPECT_EQ(dist::shard_range(12, 0, 4), std::make_pair(int64_t(0), int64_t(3)));
  EXPECT_EQ(dist::shard_range(12, 3, 4), std::make_pair(int64_t(9), int64_t(12)));
  // 10 over 4: 3, 3, 2, 2.
  EXPECT_EQ(dist::shard_range(10, 1, 4), std::make_pair(int64_t(3), int64_t(6)));
  EXPECT_EQ(dist::shard_range(10, 2, 4), std::make_pair(int64_t(6), int64_t(8)));
  EXPECT_EQ(dist::shard_range(10, 3, 4), std::make_pair(int64_t(8), int64_t(10)));
  testing::expect_error([] { dist::shard_range(2, 0, 3); }, {"3 ranks need at least as many micro-shards", "has 2"});
}

TEST(DataParallel, TheFoldGivesOneProcessBitsOnEveryGroupSize) {
  const int64_t M = 12;
  const size_t count = 1000 + 7;
  // Terms of very different magnitudes, so that the order of the additions shows in the bits.
  std::vector<std::vector<float>> h(M, std::vector<float>(count));
  for (int64_t i = 0; i < M; ++i)
    for (size_t j = 0; j < count; ++j)
      h[size_t(i)][j] = float(std::sin(double(i * 7919 + int64_t(j) * 104729)) * std::pow(10.0, double((i + int64_t(j)) % 7) - 3));
  std::vector<float> left = h[0];
  for (int64_t i = 1; i < M; ++i)
    for (size_t j = 0; j < count; ++j) left[j] += h[size_t(i)][j];
  // Another order gives other bits: the test could tell an order-changing reduction.
  std::vector<float> pairs(count);
  for (size_t j = 0; j < count; ++j) {
    float s[6];
    for (int k = 0; k < 6; ++k) s[k] = h[size_t(2 * k)][j] + h[size_t(2 * k + 1)][j];
    pairs[j] = ((s[0] + s[1]) + (s[2] + s[3])) + (s[4] + s[5]);
  }
  EXPECT_NE(std::memcmp(pairs.data(), left.data(), count * sizeof(float)), 0);

  for (int n = 1; n <= 5; ++n) {
    std::vector<std::vector<float>> out(size_t(n), std::vector<float>(count, -1.0f));
    on_ranks(n, [&](dist::ProcessGroup& g) {
      auto [first, last] = dist::shard_range(M, g.rank(), n);
      std::vector<const float*> local;
      for (int64_t i = first; i < last; ++i) local.push_back(h[size_t(i)].data());
      dist::fold(g, local, count, out[size_t(g.rank())].data(), 100);  // several buckets, the last short
    });
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(std::memcmp(out[size_t(r)].data(), left.data(), count * sizeof(float)), 0)
          << "rank " << r << " of " << n;
    // Step by step, as during a backward pass: ranges become final back to front, in pieces that
    // straddle the buckets, and each rank folds what it can as they come.
    std::vector<std::vector<float>> piecewise(size_t(n), std::vector<float>(count, -1.0f));
    on_ranks(n, [&](dist::ProcessGroup& g) {
      auto [first, last] = dist::shard_range(M, g.rank(), n);
      std::vector<const float*> local;
      for (int64_t i = first; i < last; ++i) local.push_back(h[size_t(i)].data());
      dist::ChainFold chain(g, local, count, piecewise[size_t(g.rank())].data(), 100);
      for (size_t end = count; end > 0;) {
        size_t n_ready = std::min<size_t>(end, 37 + end % 50);
        chain.mark_ready(end - n_ready, n_ready);
        end -= n_ready;
      }
      chain.finish();
    });
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(std::memcmp(piecewise[size_t(r)].data(), left.data(), count * sizeof(float)), 0)
          << "rank " << r << " of " << n << ", step by step";
  }
}

TEST(DataParallel, EveryRankGetsEveryMicroShardsValues) {
  const int64_t M = 7;
  for (int n : {1, 3}) {
    std::vector<std::vector<double>> got(static_cast<size_t>(n));
    on_ranks(n, [&](dist::ProcessGroup& g) {
      auto [first, last] = dist::shard_range(M, g.rank(), n);
      std::vector<double> local;
      for (int64_t i = first; i < last; ++i) local.insert(local.end(), {double(i), 100.0 + double(i)});
      got[size_t(g.rank())] = dist::gather_shard_values(g, local, M, 2);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(got[size_t(r)].size(), size_t(2 * M));
      for (int64_t i = 0; i < M; ++i) {
        EXPECT_EQ(got[size_t(r)][size_t(2 * i)], double(i));
        EXPECT_EQ(got[size_t(r)][size_t(2 * i + 1)], 100.0 + double(i));
      }
    }
  }
}

TEST(DataParallel, TheLastMicroShardIsFoldedDuringItsBackwardPassToTheSameBits) {
  nn::GptConfig c{40, 8, 16, 2, 2};
  auto steps_with = [&](size_t bucket, dist::StepTimes& times, bool overlap = true) {
    nn::Gpt model(c, 1);
    optim::AdamW opt(model.parameters(), 1e-2);
    model.train();
    dist::DataParallelStep step(
        [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{train::lm_loss(model, a[0], a[1])}; },
        {{DType::I64, {2, 8}}, {DType::I64, {2, 8}}}, opt, {}, 2, nullptr, bucket);
    step.set_overlap(overlap);
    for (uint64_t s = 0; s < 4; ++s) {
      opt.tick();
      step.run(
          [&](int64_t i) {
            return std::vector<HostTensor>{testing::random_tensor({DType::I64, {2, 8}, 0, 40.0}, 10 * s + uint64_t(i)),
                                           testing::random_tensor({DType::I64, {2, 8}, 0, 40.0}, 99 + 10 * s + uint64_t(i))};
          },
          [](int64_t, const std::vector<HostTensor>& out) { return std::vector<double>{out[0].get(0)}; }, 1);
    }
    times = step.times();
    std::vector<float> out;
    for (auto& [n, p] : model.named_parameters()) {
      std::vector<float> v = p.to_vector();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  };
  dist::StepTimes small{}, whole{}, after{};
  std::vector<float> a = steps_with(64, small), b = steps_with(size_t(1) << 20, whole);
  // Gradients copied as each launch finishes are the final ones: the same bits as copying them
  // after the whole backward pass; and neither the bucket size nor the fold's timing matter.
  std::vector<float> late = steps_with(64, after, false);
  EXPECT_EQ(a, late);
  EXPECT_EQ(a, b);
  EXPECT_EQ(after.early_buckets, 0);
  EXPECT_EQ(whole.buckets, 4);
  EXPECT_EQ(whole.early_buckets, 0);  // one bucket: final only with the last gradient
  // The plan reports its launches from its third run on (the first two time and recompile it):
  // then the buckets of the last layers are folded before the embedding's gradient is done.
  EXPECT_GT(small.early_buckets, 0);
  EXPECT_LT(small.early_buckets, small.buckets);
}

train::ClassifierConfig small_mlp(int64_t shards) {
  train::ClassifierConfig c;
  c.model = "mlp";
  c.batch = 32;
  c.steps = 2;
  c.train_limit = 128;
  c.test_limit = 64;
  c.momentum = 0;
  c.weight_decay = 0;
  c.shards = shards;
  return c;
}

std::vector<float> parameters_of(train::ClassifierTrainer& t) {
  std::vector<float> out;
  for (auto& [n, p] : t.model().named_parameters()) {
    std::vector<float> v = p.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(DataParallel, MicroShardsGiveTheWholeBatchGradientAndRerunBitForBit) {
  train::ClassifierTrainer whole(small_mlp(1)), sharded(small_mlp(4)), again(small_mlp(4));
  std::vector<float> before = parameters_of(whole);
  double loss_whole = 0, loss_sharded = 0;
  whole.train_steps(2, [&](int64_t, double l) { loss_whole = l; });
  sharded.train_steps(2, [&](int64_t, double l) { loss_sharded = l; });
  again.train_steps(2);
  ASSERT_NE(sharded.data_parallel(), nullptr);
  EXPECT_EQ(whole.data_parallel(), nullptr);
  EXPECT_NEAR(loss_sharded, loss_whole, 1e-5 * std::fabs(loss_whole));
  std::vector<float> a = parameters_of(whole), b = parameters_of(sharded);
  double worst = 0, moved = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    moved = std::max(moved, double(std::fabs(a[i] - before[i])));
  }
  EXPECT_GT(moved, 1e-4);
  EXPECT_LT(worst, 1e-4 * moved);
  EXPECT_EQ(parameters_of(again), b);
  EXPECT_EQ(sharded.run_metadata().at("shards"), "4");
}

TEST(DataParallel, BadLayoutsAreErrors) {
  testing::expect_error([] { train::ClassifierTrainer t(small_mlp(5)); }, {"5 micro-shards do not divide the batch of 32"});
  train::ClassifierConfig c = small_mlp(2);
  c.group = std::make_shared<ThreadRank>(std::make_shared<Mailboxes>(), 0, 3);
  testing::expect_error([&] { train::ClassifierTrainer t(c); }, {"3 ranks need at least as many micro-shards"});
}

}  // namespace
}  // namespace synoros
