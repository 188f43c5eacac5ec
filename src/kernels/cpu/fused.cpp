// Fused elementwise groups: one pass over the output, block by block; each member op runs as a
// line kernel over an L1-resident block, reading externals in place (with broadcast strides).
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/line_fn.hpp"
#include "kernels/jit/loop_ir.hpp"
#include "kernels/cpu/odometer.hpp"

namespace synoros::kernels {

namespace {
constexpr int kMaxRank = 8;
constexpr int64_t kChunk = 1 << 14;  // elements per work chunk; fixed, independent of threads
constexpr int64_t kBlock = 256;      // elements per block: every slot of a block stays in L1

struct Instr {
  LineFn fn;
  const void* gather;  // a folded view: gather args, filling the slot from its input
  int nsrc;
  int src[3];  // >= 0: the slot of member src; < 0: external -(src + 1)
  StagedLineFn sfn = nullptr;  // run instead of fn (kept set) when members were folded into operands
  Stages st;
};

struct GroupArgs {
  int rank, n_ext, n_instr;
  int64_t total, esize;
  int64_t shape[kMaxRank];
  int64_t stride[kFuseMaxExternals][kMaxRank];
  const char* ext[kFuseMaxExternals];
  char* out;
  Instr instr[kFuseMaxMembers];
  // > 0: a rank-2 group with rows shorter than a block whose externals are contiguous, scalars
  // or one row broadcast down the rows (a bias): blocks then cover whole runs of rows, the
  // broadcast rows tiled once per chunk, instead of one short run per row.
  int64_t tile_n, tile_step;  // tile_step: kBlock rounded down to whole rows
  bool row_bcast[kFuseMaxExternals];
  // The tiled copies, owned by the plan and rebuilt by the launch only when the row's bytes
  // change (a bias changes once per optimizer step, not once per launch or chunk): tile[k] holds
  // enough rows for a block starting anywhere in a row, tile_src[k] the row it was built from.
  char* tile[kFuseMaxExternals];
  char* tile_src[kFuseMaxExternals];
  int64_t tile_bytes;
  mutable bool tile_valid[kFuseMaxExternals];
  // The group as a loop kernel (null where it reads through a folded view or is not float32),
  // and the generated run that replaces the instructions once Recompile chose it (else null).
  const jit::LoopKernel* loop;
  jit::RunFn jit;
};
static_assert(std::is_trivially_destructible_v<GroupArgs>, "plan storage never runs destructors");

// Runs the group's instructions over one run [pos, pos + len) whose externals start at ext.
// The last instruction writes to `dst` (the block's place in the output, or a caller's buffer).
inline void run_block(const GroupArgs& a, char (*slots)[kBlock * 8], const char* const* ext,
                      const int64_t* s_inner, int64_t pos, int64_t len, char* dst_at) {
  if (a.jit) return a.jit(ext, dst_at, len);  // the whole group in one generated loop
  static constexpr int64_t one[3] = {1, 1, 1};
  for (int i = 0; i < a.n_instr; ++i) {
    const Instr& in = a.instr[i];
    if (!in.fn && !in.gather && !in.sfn) continue;  // a broadcast read in place, or folded away
    if (in.gather) {
      gather_range(in.gather, pos, pos + len, slots[i]);
      continue;
    }
    const void* src[3];
    int64_t st[3];
    for (int j = 0; j < in.nsrc; ++j) {
      if (in.src[j] >= 0) {
        src[j] = slots[in.src[j]];
        st[j] = one[j];
      } else {
        src[j] = ext[-in.src[j] - 1];
        st[j] = s_inner[-in.src[j] - 1];
      }
    }
    void* dst = i == a.n_instr - 1 ? static_cast<void*>(dst_at) : slots[i];
    if (in.sfn) in.sfn(dst, src, st, len, in.st);
    else in.fn(dst, src, st, len);
  }
}

// The group over output elements [begin, end), written to the output, or to dst[0, end - begin)
// when dst is given.
void group_range(const GroupArgs& a, int64_t begin, int64_t end, char* dst = nullptr) {
  auto at = [&](int64_t pos) { return dst ? dst + (pos - begin) * a.esize : a.out + pos * a.esize; };
  // Per-thread block scratch: chunks of one launch run on several threads at once.
  alignas(64) static thread_local char slots[kFuseMaxMembers - 1][kBlock * 8];
  if (a.rank == 1) {  // every external contiguous or a broadcast scalar: no index walking
    int64_t s_inner[kFuseMaxExternals];
    const char* ext[kFuseMaxExternals];
    for (int k = 0; k < a.n_ext; ++k) s_inner[k] = a.stride[k][0];
    for (int64_t pos = begin; pos < end; pos += kBlock) {
      int64_t len = std::min(end - pos, kBlock);
      for (int k = 0; k < a.n_ext; ++k) ext[k] = a.ext[k] + pos * s_inner[k] * a.esize;
      run_block(a, slots, ext, s_inner, pos, len, at(pos));
    }
    return;
  }
  if (a.tile_n > 0) {
    // Steps are whole rows, so every block starts at the same column as the first (computed
    // once: a 64-bit division per block cost as much as a short block's arithmetic).
    int64_t step = a.tile_step, col = begin == 0 ? 0 : begin % a.tile_n;
    int64_t s_inner[kFuseMaxExternals];
    for (int k = 0; k < a.n_ext; ++k) s_inner[k] = a.stride[k][1];
    const char* ext[kFuseMaxExternals];
    for (int64_t pos = begin; pos < end; pos += step) {
      int64_t len = std::min(end - pos, step);
      for (int k = 0; k < a.n_ext; ++k)
        ext[k] = a.row_bcast[k] ? a.tile[k] + col * a.esize : a.ext[k] + pos * s_inner[k] * a.esize;
      run_block(a, slots, ext, s_inner, pos, len, at(pos));
    }
    return;
  }
  int r = a.rank;
  int64_t idx[kMaxRank];
  unravel_index(begin, r, a.shape, idx);
  int64_t inner = a.shape[r - 1];
  int64_t s_inner[kFuseMaxExternals];
  for (int k = 0; k < a.n_ext; ++k) s_inner[k] = a.stride[k][r - 1];
  for (int64_t pos = begin; pos < end;) {
    int64_t len = std::min({inner - idx[r - 1], end - pos, kBlock});
    const char* ext[kFuseMaxExternals];
    for (int k = 0; k < a.n_ext; ++k) {
      int64_t off = 0;
      for (int d = 0; d < r; ++d) off += idx[d] * a.stride[k][d];
      ext[k] = a.ext[k] + off * a.esize;
    }
    run_block(a, slots, ext, s_inner, pos, len, at(pos));
    pos += len;
    advance_index(len, r, a.shape, idx);
  }
}

void group_chunk(const void* p, int64_t chunk) {
  const GroupArgs& a = *static_cast<const GroupArgs*>(p);
  group_range(a, chunk * kChunk, std::min(a.total, (chunk + 1) * kChunk));
}

// Rebuilds the tiled copies of broadcast rows whose bytes changed since the last launch.
void refresh_tiles(const GroupArgs& a) {
  if (a.tile_n > 0) {
    size_t row_bytes = size_t(a.tile_n * a.esize), tile_bytes = size_t(a.tile_bytes);
    for (int k = 0; k < a.n_ext; ++k) {
      if (!a.row_bcast[k] || (a.tile_valid[k] && std::memcmp(a.tile_src[k], a.ext[k], row_bytes) == 0)) continue;
      std::memcpy(a.tile_src[k], a.ext[k], row_bytes);
      std::memcpy(a.tile[k], a.ext[k], row_bytes);
      for (size_t filled = row_bytes; filled < tile_bytes;) {  // doubling copies: few calls
        size_t c = std::min(filled, tile_bytes - filled);
        std::memcpy(a.tile[k] + filled, a.tile[k], c);
        filled += c;
      }
      a.tile_valid[k] = true;
    }
  }
}

void group_launch(const void* p, ThreadPool& pool) {
  const GroupArgs& a = *static_cast<const GroupArgs*>(p);
  refresh_tiles(a);
  pool.run((a.total + kChunk - 1) / kChunk, group_chunk, p);
}

struct Streamed {
  OutputChunks producer;
  const GroupArgs* group;
};

void streamed_chunk(const void* p, int64_t chunk) {
  const Streamed& s = *static_cast<const Streamed*>(p);
  s.producer.run(s.producer.args, chunk);
  int64_t begin = chunk * s.producer.chunk_elems;
  group_range(*s.group, begin, std::min(s.group->total, begin + s.producer.chunk_elems));
}

void streamed_launch(const void* p, ThreadPool& pool) {
  const Streamed& s = *static_cast<const Streamed*>(p);
  refresh_tiles(*s.group);
  pool.run(s.producer.chunks, streamed_chunk, p);
}
}  // namespace

void group_eval(const void* group_args, int64_t begin, int64_t end, void* dst) {
  group_range(*static_cast<const GroupArgs*>(group_args), begin, end, static_cast<char*>(dst));
}
void group_prepare(const void* group_args) { refresh_tiles(*static_cast<const GroupArgs*>(group_args)); }

namespace {
const JitSite::Ops kGroupSite = {
    group_prepare,
    group_eval,
    [](void* p, jit::RunFn run) { static_cast<GroupArgs*>(p)->jit = run; },
    [](const void* p) { return static_cast<const GroupArgs*>(p)->jit; },
};
}  // namespace

Launch stream_epilogue(PlanStorage& storage, const OutputChunks& producer, Launch group, ValueId node) {
  if (group.fn != group_launch || !producer.run || producer.chunk_elems < 1)
    throw Error("stream_epilogue: needs a chunked producer and a fused group launch");
  auto* s = storage.make<Streamed>();
  s->producer = producer;
  s->group = static_cast<const GroupArgs*>(group.args);
  return {streamed_launch, s, node};
}

// The stage a member becomes when folded into its reader: a float mul, add or sub with a scalar
// (one-element) external, or a relu. `base` is the operand that stays.
bool as_stage(const Graph& g, const Node& n, const Instr& in, const std::vector<ValueId>& externals,
              const GroupArgs& a, Stage& st, int& base) {
  if (n.dtype != DType::F32 || !in.fn) return false;
  if (n.op == Op::Relu) {
    st = {StageKind::Relu, nullptr};
    base = 0;
    return true;
  }
  if (n.op != Op::Mul && n.op != Op::Add && n.op != Op::Sub) return false;
  auto scalar_ext = [&](int src) { return src < 0 && numel(g.shape(externals[size_t(-src - 1)])) == 1; };
  int c = scalar_ext(in.src[1]) ? 1 : scalar_ext(in.src[0]) ? 0 : -1;
  if (c < 0) return false;
  base = 1 - c;
  static constexpr StageKind kinds[3][2] = {{StageKind::CMul, StageKind::MulC},
                                            {StageKind::CAdd, StageKind::AddC},
                                            {StageKind::CSub, StageKind::SubC}};
  int k = n.op == Op::Mul ? 0 : n.op == Op::Add ? 1 : 2;
  st = {kinds[k][c], reinterpret_cast<const float*>(a.ext[-in.src[c] - 1])};
  return true;
}

// Folds each cheap member (as_stage) that one operand of one later member reads into that
// operand's stages, when the reader has a staged kernel: a chain of scalar muls, adds and relus
// then costs no pass over the block of its own. Same operations in the same order, so the same
// bits as the unfolded group.
void fold_stages(const Graph& g, const std::vector<ValueId>& members, const std::vector<ValueId>& externals,
                 GroupArgs& a) {
  int n = a.n_instr;
  for (int i = 0; i + 1 < n; ++i) {
    Instr& in = a.instr[i];
    Stage stage;
    int base = 0;
    if (!as_stage(g, g.node(members[size_t(i)]), in, externals, a, stage, base)) continue;
    int reader = -1, op = -1, reads = 0;
    for (int j = i + 1; j < n; ++j)
      for (int k = 0; k < a.instr[j].nsrc; ++k)
        if (a.instr[j].fn && a.instr[j].src[k] == i) reader = j, op = k, ++reads;
    if (reads != 1 || op > 1) continue;
    Instr& r = a.instr[reader];
    StagedLineFn sfn = pick_staged(g.node(members[size_t(reader)]).op, g.dtype(members[size_t(reader)]));
    int have = in.sfn ? in.st.n[base] : 0;
    if (!sfn || r.st.n[op] != 0 || have + 1 > kMaxStages || (in.sfn && in.st.n[1 - base] != 0)) continue;
    for (int k = 0; k < have; ++k) r.st.s[op][k] = in.st.s[base][k];
    r.st.s[op][have] = stage;
    r.st.n[op] = have + 1;
    r.src[op] = in.src[base];
    r.sfn = sfn;
    in = Instr{nullptr, nullptr, 0, {0, 0, 0}, nullptr, {}};
  }
}

namespace {
// The group's instructions as a loop kernel over the innermost run (before stages are folded:
// the kernel computes each member itself), or null where a generated loop cannot replace them: a
// member read through a folded view's gather, or a value other than float32.
const jit::LoopKernel* loop_kernel(const Graph& g, const std::vector<ValueId>& members, const GroupArgs& a,
                                   const std::vector<bool>& read_direct, PlanStorage& storage) {
  auto k = std::make_unique<jit::LoopKernel>();
  k->dtype = DType::F32;
  for (int e = 0; e < a.n_ext; ++e) k->inputs.push_back({read_direct[size_t(e)] ? a.stride[e][a.rank - 1] : 0});
  std::vector<int> stmt_of(members.size(), -1);
  for (int i = 0; i < a.n_instr; ++i) {
    const Instr& in = a.instr[i];
    if (in.gather) return nullptr;
    if (!in.fn) continue;  // a broadcast its readers read in place
    const Node& n = g.node(members[size_t(i)]);
    if (n.dtype != DType::F32 || !op_info(n.op).has(kMap)) return nullptr;
    for (ValueId x : n.in)
      if (g.dtype(x) != DType::F32) return nullptr;
    jit::LoopStmt st{n.op, in.nsrc, {0, 0, 0}};
    for (int j = 0; j < in.nsrc; ++j) {
      if (in.src[j] >= 0 && stmt_of[size_t(in.src[j])] < 0) return nullptr;
      st.arg[j] = in.src[j] >= 0 ? stmt_of[size_t(in.src[j])] : in.src[j];
    }
    stmt_of[size_t(i)] = int(k->body.size());
    k->body.push_back(st);
  }
  if (stmt_of.back() < 0) return nullptr;
  return storage.own(std::move(k));
}
}  // namespace

Launch lower_group(const Graph& g, const std::vector<ValueId>& members,
                   const std::vector<ValueId>& externals, const std::vector<void*>& ext_ptrs,
                   void* out, PlanStorage& storage) {
  const Node& root = g.node(members.back());
  if (members.size() > size_t(kFuseMaxMembers) || externals.size() > size_t(kFuseMaxExternals))
    throw Error("fusion: group too large for the fused kernel");
  auto* a = storage.make<GroupArgs>();
  a->n_ext = int(externals.size());
  a->n_instr = int(members.size());
  a->total = numel(root.shape);
  a->esize = int64_t(dtype_size(root.dtype));
  a->out = static_cast<char*>(out);
  std::vector<bool> read_direct(externals.size(), false);  // by a line op, with broadcast strides
  // An expand of an external is a broadcast: its readers read the external in place with zero
  // strides (below) rather than through a gathered block.
  auto broadcast_of = [&](ValueId v) -> int {
    const Node& n = g.node(v);
    if (n.op != Op::Expand) return -1;
    auto e = std::find(externals.begin(), externals.end(), n.in[0]);
    if (e == externals.end()) return -1;
    const Shape& is = g.shape(n.in[0]);
    if (is.size() > n.shape.size()) return -1;
    size_t lead = n.shape.size() - is.size();
    for (size_t d = 0; d < is.size(); ++d)
      if (is[d] != 1 && is[d] != n.shape[lead + d]) return -1;
    // Broadcast along the innermost dimensions, the runs read in place are that block's size:
    // short ones (a 2x2 pooling window's) cost a line call each, so those stay gathered.
    int64_t run = 1;
    for (size_t d = n.shape.size(); d-- > 0 && (d < lead || is[d - lead] == 1);) run *= n.shape[d];
    if (run > 1 && run < 16) return -1;
    return int(e - externals.begin());
  };
  for (size_t i = 0; i < members.size(); ++i) {
    const Node& n = g.node(members[i]);
    Instr& ins = a->instr[i];
    if (i + 1 < members.size() && broadcast_of(members[i]) >= 0) {
      ins = {nullptr, nullptr, 0, {0, 0, 0}, nullptr, {}};
      continue;
    }
    if (op_info(n.op).kind == OpKind::View) {
      if (i + 1 == members.size()) throw Error("fusion: a view cannot be a group's output");
      auto e = std::find(externals.begin(), externals.end(), n.in[0]);
      if (e == externals.end()) throw Error("fusion: a folded view must read an external");
      LowerCtx vc{g, members[i], n, {ext_ptrs[size_t(e - externals.begin())]}, nullptr, storage};
      ins = {nullptr, lower_view(vc).args, 0, {0, 0, 0}, nullptr, {}};
      continue;
    }
    DType t = g.dtype(n.in.back());
    LineFn fn = pick_line(n.op, t);
    if (!fn) throw Error(std::string(op_name(n.op)) + ": no CPU kernel for dtype " + dtype_name(t));
    ins.fn = fn;
    ins.gather = nullptr;
    ins.nsrc = int(n.in.size());
    for (size_t j = 0; j < n.in.size(); ++j) {
      auto m = std::find(members.begin(), members.end(), n.in[j]);
      if (m != members.end() && broadcast_of(*m) >= 0) {
        int e = broadcast_of(*m);
        ins.src[j] = -e - 1;
        read_direct[size_t(e)] = true;
      } else if (m != members.end()) {
        ins.src[j] = int(m - members.begin());
      } else {
        auto e = std::find(externals.begin(), externals.end(), n.in[j]);
        if (e == externals.end()) throw Error("fusion: operand missing from the group's externals");
        ins.src[j] = -int(e - externals.begin()) - 1;
        read_direct[size_t(e - externals.begin())] = true;
      }
    }
  }
  // Strides of every external against the output shape (0 along broadcast dims), then merge dims
  // that are contiguous for every external so the inner run is as long as possible.
  size_t R = root.shape.size(), E = externals.size();
  std::vector<std::vector<int64_t>> st(E, std::vector<int64_t>(R, 0));
  for (size_t k = 0; k < E; ++k) {
    a->ext[k] = static_cast<const char*>(ext_ptrs[k]);
    if (!read_direct[k]) continue;  // only read through a view's gather: no strides needed
    const Shape& is = g.shape(externals[k]);
    auto cs = contiguous_strides(is);
    size_t lead = R - is.size();
    for (size_t d = 0; d < is.size(); ++d) st[k][lead + d] = is[d] == 1 ? 0 : cs[d];
  }
  std::vector<int64_t> ms;
  std::vector<std::vector<int64_t>> mst(E);
  for (size_t d = 0; d < R; ++d) {
    if (root.shape[d] == 1) continue;
    bool merge = !ms.empty();
    for (size_t k = 0; k < E && merge; ++k)
      merge = !read_direct[k] || mst[k].back() == st[k][d] * root.shape[d];
    if (merge) {
      ms.back() *= root.shape[d];
      for (size_t k = 0; k < E; ++k) mst[k].back() = st[k][d];
    } else {
      ms.push_back(root.shape[d]);
      for (size_t k = 0; k < E; ++k) mst[k].push_back(st[k][d]);
    }
  }
  if (ms.empty()) {
    ms.push_back(1);
    for (auto& v : mst) v.push_back(0);
  }
  if (ms.size() > size_t(kMaxRank))
    throw Error(std::string(op_name(root.op)) + ": broadcast of rank " + std::to_string(ms.size()) +
                " exceeds the kernel's limit of " + std::to_string(kMaxRank));
  a->rank = int(ms.size());
  for (size_t d = 0; d < ms.size(); ++d) {
    a->shape[d] = ms[d];
    for (size_t k = 0; k < E; ++k) a->stride[k][d] = mst[k][d];
  }
  a->tile_n = 0;
  if (a->rank == 2 && ms[1] < kBlock) {
    bool ok = true;
    for (size_t k = 0; k < E; ++k) {
      bool contiguous = mst[k][0] == ms[1] && mst[k][1] == 1, scalar = mst[k][0] == 0 && mst[k][1] == 0;
      a->row_bcast[k] = read_direct[k] && mst[k][0] == 0 && mst[k][1] == 1;
      ok = ok && (!read_direct[k] || contiguous || scalar || a->row_bcast[k]);
    }
    if (ok) {
      // Rows a block can touch: up to one block's elements starting anywhere in a row.
      int64_t n = ms[1];
      a->tile_n = n;
      a->tile_step = kBlock / n * n;
      int64_t step = std::min(a->tile_step, a->total);
      a->tile_bytes = (step + 2 * n - 2) / n * n * a->esize;
      for (size_t k = 0; k < E; ++k) {
        a->tile_valid[k] = false;
        if (!a->row_bcast[k]) continue;
        a->tile[k] = static_cast<char*>(storage.persistent(size_t(a->tile_bytes)));
        a->tile_src[k] = static_cast<char*>(storage.persistent(size_t(n * a->esize)));
      }
    }
  }
  a->loop = loop_kernel(g, members, *a, read_direct, storage);
  a->jit = nullptr;
  const std::string walk = "r" + std::to_string(a->rank) + (a->tile_n > 0 ? "t" + std::to_string(a->tile_n) : "") +
                           "i" + std::to_string(a->shape[a->rank - 1]);
  storage.register_jit_site({members.back(), a, a->loop, a->total, 1, walk, &kGroupSite});
  fold_stages(g, members, externals, *a);
  return {group_launch, a, members.back()};
}

}  // namespace synoros::kernels
