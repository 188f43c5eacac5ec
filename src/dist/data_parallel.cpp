// Data-parallel steps: the chain fold over micro-shards and the step that uses it (see
// synoros/distributed.hpp).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "synoros/distributed.hpp"
#include "synoros/runtime.hpp"

namespace synoros::dist {

namespace {
class SingleProcess final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Request isend(int dst, const void*, size_t) override { no_peer(dst); }
  Request irecv(int src, void*, size_t) override { no_peer(src); }
  bool test(Request) override { no_peer(-1); }
  void wait(Request) override { no_peer(-1); }
  void broadcast(int root, void*, size_t) override {
    if (root != 0) no_peer(root);
  }

 private:
  [[noreturn]] static void no_peer(int r) {
    throw Error("data-parallel: rank " + std::to_string(r) + " does not exist in a single process");
  }
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void add_into(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// A deep copy of each tensor's value bytes.
std::vector<std::vector<char>> copy_values(const std::vector<Tensor>& ts) {
  std::vector<std::vector<char>> out;
  for (const Tensor& t : ts) {
    HostTensor h = t.value();
    const char* p = static_cast<const char*>(h.buffer->data());
    out.emplace_back(p, p + h.bytes());
  }
  return out;
}
}  // namespace

std::shared_ptr<ProcessGroup> single_process() { return std::make_shared<SingleProcess>(); }

std::pair<int64_t, int64_t> shard_range(int64_t shards, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) throw Error("data-parallel: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  if (shards < ranks)
    throw Error("data-parallel: " + std::to_string(ranks) + " ranks need at least as many micro-shards, the step has " +
                std::to_string(shards) + " (the micro-shard count fixes the bits; choose it once, at least the largest rank count)");
  int64_t base = shards / ranks, extra = shards % ranks, r = rank;
  int64_t first = r * base + std::min(r, extra);
  return {first, first + base + (r < extra ? 1 : 0)};
}

ChainFold::ChainFold(ProcessGroup& group, std::vector<const float*> local, size_t count, float* out, size_t bucket)
    : group_(group), local_(std::move(local)), count_(count), bucket_(std::max<size_t>(bucket, 1)), out_(out) {
  if (local_.empty()) throw Error("data-parallel: a rank without micro-shards cannot take part in the fold");
  const size_t buckets = (count_ + bucket_ - 1) / bucket_;
  for (size_t b = 0; b < buckets; ++b) missing_.push_back(std::min(bucket_, count_ - b * bucket_));
  if (group_.rank() > 0)  // the previous rank's partial sums, bucket by bucket
    for (size_t b = 0; b < buckets; ++b)
      recv_.push_back(group_.irecv(group_.rank() - 1, out_ + b * bucket_, missing_[b] * sizeof(float)));
}

void ChainFold::mark_ready(size_t offset, size_t n) {
  if (offset + n > count_) throw Error("data-parallel: a ready range past the end of the gradients");
  for (size_t o = offset; o < offset + n;) {
    size_t b = o / bucket_, end = std::min(offset + n, (b + 1) * bucket_);
    missing_[b] -= end - o;
    o = end;
  }
  advance(false);
}

void ChainFold::advance(bool block) {
  const int r = group_.rank(), n = group_.size();
  for (; next_ < missing_.size() && missing_[next_] == 0; ++next_) {
    if (r > 0) {
      if (block) group_.wait(recv_[next_]);
      else if (!group_.test(recv_[next_])) return;
    }
    const size_t o = next_ * bucket_, len = std::min(bucket_, count_ - o);
    float* dst = out_ + o;
    size_t j = 0;
    if (r == 0) std::memcpy(dst, local_[j++] + o, len * sizeof(float));
    for (; j < local_.size(); ++j) add_into(dst, local_[j] + o, len);
    if (r + 1 < n) send_.push_back(group_.isend(r + 1, dst, len * sizeof(float)));
  }
}

void ChainFold::finish() {
  if (std::any_of(missing_.begin(), missing_.end(), [](size_t m) { return m > 0; }))
    throw Error("data-parallel: the fold was finished before every local value was ready");
  advance(true);
  for (ProcessGroup::Request r : send_) group_.wait(r);
  send_.clear();
  const int n = group_.size();
  if (n > 1)
    for (size_t o = 0; o < count_; o += bucket_)
      group_.broadcast(n - 1, out_ + o, std::min(bucket_, count_ - o) * sizeof(float));
}

void fold(ProcessGroup& group, const std::vector<const float*>& local, size_t count, float* out, size_t bucket) {
  ChainFold f(group, local, count, out, bucket);
  f.mark_ready(0, count);
  f.finish();
}

std::vector<double> gather_shard_values(ProcessGroup& group, const std::vector<double>& local, int64_t shards, size_t k) {
  const int n = group.size();
  std::vector<double> all(size_t(shards) * k);
  auto [first, last] = shard_range(shards, group.rank(), n);
  if (local.size() != size_t(last - first) * k) throw Error("data-parallel: wrong number of per-shard values");
  std::copy(local.begin(), local.end(), all.begin() + long(size_t(first) * k));
  if (n == 1) return all;
  if (group.rank() == 0) {
    for (int r = 1; r < n; ++r) {
      auto [f, l] = shard_range(shards, r, n);
      group.recv(r, all.data() + size_t(f) * k, size_t(l - f) * k * sizeof(double));
    }
  } else {
    group.send(0, local.data(), local.size() * sizeof(double));
  }
  group.broadcast(0, all.data(), all.size() * sizeof(double));
  return all;
}

bool needs_data_parallel(int64_t shards, const ProcessGroup* group) {
  const int ranks = group ? group->size() : 1;
  if (ranks > 1 && fast_mode())
    throw Error("train: data-parallel training runs in default mode (in fast mode the ranks could choose kernels that "
                "round differently)");
  return shards > 1 || ranks > 1;
}

void broadcast_values(ProcessGroup& group, int root, const std::vector<Tensor>& tensors) {
  if (group.size() == 1 || tensors.empty()) return;
  // One message for all of them: each transfer costs a round of waiting.
  std::vector<HostTensor> values;
  size_t total = 0;
  for (const Tensor& t : tensors) values.push_back(t.value()), total += values.back().bytes();
  std::vector<char> packed(total);
  char* p = packed.data();
  if (group.rank() == root)
    for (const HostTensor& h : values) std::memcpy(p, h.buffer->data(), h.bytes()), p += h.bytes();
  group.broadcast(root, packed.data(), total);
  if (group.rank() == root) return;
  p = packed.data();
  for (HostTensor& h : values) {
    std::memcpy(h.buffer->data(), p, h.bytes()), p += h.bytes();
    h.buffer->mark_modified();
  }
}

DataParallelStep::DataParallelStep(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& loss_fn,
                                   const std::vector<std::pair<DType, Shape>>& arg_specs, optim::Optimizer& opt,
                                   std::vector<Tensor> buffers, int64_t shards, std::shared_ptr<ProcessGroup> group,
                                   size_t bucket_floats)
    : opt_(opt),
      buffers_(std::move(buffers)),
      shards_(shards),
      group_(group ? std::move(group) : single_process()),
      bucket_(bucket_floats) {
  if (shards_ < 1) throw Error("data-parallel: the step needs at least 1 micro-shard");
  local_ = shard_range(shards_, group_->rank(), group_->size());
  const double scale = 1.0 / double(shards_);
  grads_ = std::make_unique<CompiledStep>(compile(
      [&](const std::vector<Tensor>& a) {
        std::vector<Tensor> out = loss_fn(a);
        if (out.empty()) throw Error("data-parallel: the loss function returned nothing");
        // The mean over micro-shards through the backward pass's seed: each gradient is then
        // final where the backward pass computes it (not in a scaling pass after all of them),
        // so it can be folded while the rest of the backward pass runs.
        (scale == 1.0 ? out[0] : out[0] * scale).backward();
        extra_outputs_ = out.size() - 1;
        with_grad_.clear();
        for (size_t i = 0; i < opt_.params().size(); ++i) {
          Tensor g = opt_.params()[i].grad();
          if (!g.defined()) continue;
          with_grad_.push_back(i);
          out.push_back(g);
        }
        return out;
      },
      arg_specs));
  std::vector<std::pair<DType, Shape>> grad_specs;
  for (size_t i : with_grad_) grad_specs.push_back({DType::F32, opt_.params()[i].shape()});
  std::vector<size_t> with_grad = with_grad_;
  apply_ = std::make_unique<CompiledStep>(compile(
      [&opt, with_grad](const std::vector<Tensor>& a) {
        std::vector<Tensor> grads(opt.params().size());
        for (size_t j = 0; j < with_grad.size(); ++j) grads[with_grad[j]] = a[j];
        opt.step(grads);
        return std::vector<Tensor>{};
      },
      grad_specs));
  size_t count = 0;
  offset_.assign(with_grad_.size(), 0);
  for (size_t j = with_grad_.size(); j-- > 0;)
    offset_[j] = count, count += size_t(numel(opt_.params()[with_grad_[j]].shape()));
  // Rank 0 starts the chain, so its partial sum h_0 + ... + h_{k-2} can be added up as the
  // micro-shards finish (the same additions in the same order as the fold's): it holds two flat
  // vectors whatever k. A later rank must add its micro-shards one by one onto the previous
  // rank's partial sum, which arrives at the end, so it holds all k.
  const size_t k = size_t(local_.second - local_.first);
  local_grads_.assign(group_->rank() == 0 ? std::min<size_t>(k, 2) : k, std::vector<float>(count));
  sum_.resize(count);
}

DataParallelStep::~DataParallelStep() = default;

std::vector<double> DataParallelStep::run(
    const std::function<std::vector<HostTensor>(int64_t)>& inputs,
    const std::function<std::vector<double>(int64_t, const std::vector<HostTensor>&)>& stats, size_t values_per_shard) {
  auto t0 = Clock::now();
  std::vector<double> values;
  std::vector<std::vector<char>> after_first;  // the buffers as micro-shard 0 left them
  std::vector<const float*> local;
  for (const auto& g : local_grads_) local.push_back(g.data());
  ChainFold chain(*group_, local, sum_.size(), sum_.data(), bucket_);
  size_t early = 0;  // buckets passed on before the last micro-shard's last gradient was final
  const bool starts_chain = group_->rank() == 0;
  for (int64_t i = local_.first; i < local_.second; ++i) {
    const bool last = i + 1 == local_.second;
    // Rank 0 adds micro-shards 1..k-2 onto micro-shard 0's gradients in local_grads_[0]; every
    // other vector holds one micro-shard's.
    const size_t slot = starts_chain ? (last && i > 0 ? 1 : 0) : size_t(i - local_.first);
    const bool accumulate = starts_chain && i > 0 && !last;
    float* flat = local_grads_[slot].data();
    // Each gradient into its place; those of the last micro-shard go on to the fold as soon as
    // its backward pass has finished them.
    auto take = [&](size_t o, const void* data) {
      if (o <= extra_outputs_) return;
      size_t j = o - 1 - extra_outputs_, n = size_t(numel(opt_.params()[with_grad_[j]].shape()));
      if (accumulate) add_into(flat + offset_[j], static_cast<const float*>(data), n);
      else std::memcpy(flat + offset_[j], data, n * sizeof(float));
      if (!last) return;
      early = chain.folded();
      chain.mark_ready(offset_[j], n);
    };
    std::vector<HostTensor> out;
    if (overlap_) {
      grads_->run(inputs(i), take);
      for (size_t o = 0; o <= extra_outputs_; ++o) out.push_back(grads_->output(o));
    } else {
      out = (*grads_)(inputs(i));
      for (size_t o = 1 + extra_outputs_; o < out.size(); ++o) take(o, out[o].buffer->data());
      out.resize(1 + extra_outputs_);
    }
    std::vector<double> v = stats(i, out);
    if (v.size() != values_per_shard) throw Error("data-parallel: the statistics of a micro-shard have the wrong size");
    values.insert(values.end(), v.begin(), v.end());
    if (i == 0 && shards_ > 1) after_first = copy_values(buffers_);
  }
  times_.compute += since(t0);
  times_.buckets += int64_t(chain.buckets());
  times_.early_buckets += int64_t(early);
  auto t1 = Clock::now();
  chain.finish();
  std::vector<double> all = gather_shard_values(*group_, values, shards_, values_per_shard);
  if (shards_ > 1 && !buffers_.empty()) {
    if (group_->rank() == 0)
      for (size_t b = 0; b < buffers_.size(); ++b) {
        HostTensor h = buffers_[b].value();
        std::memcpy(h.buffer->data(), after_first[b].data(), after_first[b].size());
        h.buffer->mark_modified();
      }
    broadcast_values(*group_, 0, buffers_);
  }
  times_.communication += since(t1);
  auto t2 = Clock::now();
  for (size_t j = 0; j < with_grad_.size(); ++j) {
    size_t n = size_t(numel(opt_.params()[with_grad_[j]].shape()));
    if (apply_->uses_input(j)) std::memcpy(apply_->input_ptr(j), sum_.data() + offset_[j], n * sizeof(float));
  }
  apply_->run();
  times_.update += since(t2);
  ++times_.steps;
  return all;
}

}  // namespace synoros::dist
