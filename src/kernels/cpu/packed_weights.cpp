#include "kernels/cpu/packed_weights.hpp"

#include <map>
#include <tuple>
#include <typeindex>

#include "kernels/kernel_api.hpp"
#include "kernels/providers.hpp"
#include "synoros/config.hpp"

namespace synoros::kernels {

namespace {
using Key = std::tuple<std::type_index, const void*, int64_t, int64_t, int64_t, int64_t>;
struct Registry {
  std::mutex mu;
  std::map<Key, std::weak_ptr<PackedCopy>> copies;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: plans may outlive static destruction
  return *r;
}
}  // namespace

bool may_keep_derived_copy(const Buffer* src) {
  return src && !src->borrowed() && !config::flag("SYNOROS_NO_WEIGHT_PACKS");
}

PackedWeight packed_weight_for(const GemmProvider& provider, const Buffer* src, const void* B, const GemmShape& s) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  // B lies in `src`, which every launch holding the record keeps alive (a plan's graph holds its
  // parameters), so no other weight can be at that address while the record lives.
  const Key key{std::type_index(typeid(provider)), B, s.N, s.K, s.b_rs, s.b_cs};
  PackedWeight w;
  w.src = src;
  w.copy = r.copies[key].lock();
  if (!w.copy) {
    // The copies of plans that are gone leave expired entries; drop them as new ones come.
    for (auto it = r.copies.begin(); it != r.copies.end();) it = it->second.expired() ? r.copies.erase(it) : std::next(it);
    w.copy = std::make_shared<PackedCopy>();
    r.copies[key] = w.copy;
  }
  return w;
}

const float* packed_weight(PackedWeight& w, const GemmProvider& provider, const GemmShape& shape, const void* B,
                           ThreadPool& pool) {
  const size_t floats = provider.packed_b_floats(shape);
  if (floats == 0) return nullptr;
  const uint64_t v = w.src->version();
  const int isa = int(active_isa());
  PackedCopy& c = *w.copy;
  std::lock_guard<std::mutex> lk(c.mu);
  if (c.data && c.packed == v && c.isa == isa && c.data->bytes() >= floats * 4)
    return static_cast<const float*>(c.data->data());
  const bool again = w.seen == v;
  w.seen = v;
  if (!again || w.refused == v) return nullptr;
  c.packed = ~uint64_t(0);  // until the packing below is done
  if (!c.data || c.data->bytes() < floats * 4) {
    c.data.reset();
    try {
      c.data = std::make_unique<Buffer>(floats * 4);
    } catch (const Error&) {  // over the memory limit: pack per call (tried again at the next version)
      w.refused = v;
      return nullptr;
    }
  }
  provider.pack_b(shape, static_cast<const float*>(B), static_cast<float*>(c.data->data()), pool);
  c.packed = v;
  c.isa = isa;
  return static_cast<const float*>(c.data->data());
}

size_t packed_copies() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  size_t n = 0;
  for (auto& [key, copy] : r.copies) n += !copy.expired();
  return n;
}

}  // namespace synoros::kernels
