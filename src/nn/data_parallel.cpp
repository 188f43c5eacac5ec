// Data-parallel steps: the chain fold over micro-shards and the step that uses it (see
// synoros/distributed.hpp).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "synoros/distributed.hpp"

namespace synoros::dist {

namespace {
class SingleProcess final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void send(int dst, const void*, size_t) override { no_peer(dst); }
  void recv(int src, void*, size_t) override { no_peer(src); }
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

void fold(ProcessGroup& group, const std::vector<const float*>& local, size_t count, float* out, size_t bucket) {
  if (local.empty()) throw Error("data-parallel: a rank without micro-shards cannot take part in the fold");
  const int r = group.rank(), n = group.size();
  bucket = std::max<size_t>(bucket, 1);
  for (size_t o = 0; o < count; o += bucket) {
    const size_t len = std::min(bucket, count - o);
    float* dst = out + o;
    size_t j = 0;
    if (r == 0) std::memcpy(dst, local[j++] + o, len * sizeof(float));
    else group.recv(r - 1, dst, len * sizeof(float));
    for (; j < local.size(); ++j) add_into(dst, local[j] + o, len);
    if (r + 1 < n) group.send(r + 1, dst, len * sizeof(float));
  }
  if (n > 1)
    for (size_t o = 0; o < count; o += bucket) group.broadcast(n - 1, out + o, std::min(bucket, count - o) * sizeof(float));
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

void broadcast_values(ProcessGroup& group, int root, const std::vector<Tensor>& tensors) {
  if (group.size() == 1) return;
  for (const Tensor& t : tensors) {
    HostTensor h = t.value();
    group.broadcast(root, h.buffer->data(), h.bytes());
    h.buffer->mark_modified();
  }
}

DataParallelStep::DataParallelStep(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& loss_fn,
                                   const std::vector<std::pair<DType, Shape>>& arg_specs, optim::Optimizer& opt,
                                   std::vector<Tensor> buffers, int64_t shards, std::shared_ptr<ProcessGroup> group)
    : opt_(opt), buffers_(std::move(buffers)), shards_(shards), group_(group ? std::move(group) : single_process()) {
  if (shards_ < 1) throw Error("data-parallel: the step needs at least 1 micro-shard");
  local_ = shard_range(shards_, group_->rank(), group_->size());
  const double scale = 1.0 / double(shards_);
  grads_ = std::make_unique<CompiledStep>(compile(
      [&](const std::vector<Tensor>& a) {
        std::vector<Tensor> out = loss_fn(a);
        if (out.empty()) throw Error("data-parallel: the loss function returned nothing");
        out[0].backward();
        extra_outputs_ = out.size() - 1;
        with_grad_.clear();
        for (size_t i = 0; i < opt_.params().size(); ++i) {
          Tensor g = opt_.params()[i].grad();
          if (!g.defined()) continue;
          with_grad_.push_back(i);
          out.push_back(scale == 1.0 ? g : g * scale);
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
  for (size_t i : with_grad_) count += size_t(numel(opt_.params()[i].shape()));
  local_grads_.assign(size_t(local_.second - local_.first), std::vector<float>(count));
  sum_.resize(count);
}

DataParallelStep::~DataParallelStep() = default;

std::vector<double> DataParallelStep::run(
    const std::function<std::vector<HostTensor>(int64_t)>& inputs,
    const std::function<std::vector<double>(int64_t, const std::vector<HostTensor>&)>& stats, size_t values_per_shard) {
  auto t0 = Clock::now();
  std::vector<double> values;
  std::vector<std::vector<char>> after_first;  // the buffers as micro-shard 0 left them
  for (int64_t i = local_.first; i < local_.second; ++i) {
    std::vector<HostTensor> out = (*grads_)(inputs(i));
    float* flat = local_grads_[size_t(i - local_.first)].data();
    for (size_t j = 0; j < with_grad_.size(); ++j) {
      const HostTensor& g = out[1 + extra_outputs_ + j];
      std::memcpy(flat, g.buffer->data(), g.bytes());
      flat += g.numel();
    }
    out.resize(1 + extra_outputs_);
    std::vector<double> v = stats(i, out);
    if (v.size() != values_per_shard) throw Error("data-parallel: the statistics of a micro-shard have the wrong size");
    values.insert(values.end(), v.begin(), v.end());
    if (i == 0 && shards_ > 1) after_first = copy_values(buffers_);
  }
  times_.compute += since(t0);
  auto t1 = Clock::now();
  std::vector<const float*> local;
  for (const auto& g : local_grads_) local.push_back(g.data());
  fold(*group_, local, sum_.size(), sum_.data());
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
  const float* src = sum_.data();
  for (size_t j = 0; j < with_grad_.size(); ++j) {
    size_t n = size_t(numel(opt_.params()[with_grad_[j]].shape()));
    if (apply_->uses_input(j)) std::memcpy(apply_->input_ptr(j), src, n * sizeof(float));
    src += n;
  }
  apply_->run();
  times_.update += since(t2);
  ++times_.steps;
  return all;
}

}  // namespace synoros::dist
