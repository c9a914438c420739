// The canonical state of a replayed execution (EngineRun::state_hash): what the engine's next
// events can depend on, with sequences named by (request, sample) instead of SeqId so that two
// event orders that reach the same state meet. Hidden state that is not canonical is included
// as it is: the free list's and the LRU's order (they decide the next physical blocks) and, in
// the verified mode, the step count (parked windows wait a number of steps).
#include "verify/model_check/engine_run.h"

namespace detllm::model_check {

namespace {
struct Digest {
  uint64_t h = 0x5eed;
  void add(uint64_t v) { h = hash_mix(h, v); }
  template <typename Range>
  void add_all(const Range& r) {
    add(static_cast<uint64_t>(r.size()));
    for (auto v : r) add(static_cast<uint64_t>(v));
  }
};
}  // namespace

uint64_t EngineRun::state_hash() const {
  Digest d;
  for (size_t k = 0; k < ids_.size(); ++k) {
    d.add(ids_[k] >= 0);
    d.add(aborted_[k]);
    for (size_t s = 0; s < out_[k].size(); ++s) {
      d.add_all(out_[k][s]);
      d.add(static_cast<uint64_t>(done_[k][s]));
    }
  }
  d.add(static_cast<uint64_t>(n_aborts_));
  const engine::Scheduler& sch = engine_->scheduler();
  const engine::KvCacheManager& kv = sch.kv_cache();
  auto add_seq = [&](engine::SeqId id) {
    const auto [request, rank] = owner(id);
    const engine::Sequence& s = sch.sequence(id);
    d.add(static_cast<uint64_t>(request));
    d.add(static_cast<uint64_t>(rank));
    d.add_all(s.tokens);
    d.add(static_cast<uint64_t>(s.status));
    d.add(static_cast<uint64_t>(s.n_computed));
    d.add(static_cast<uint64_t>(s.n_committed));
    d.add(static_cast<uint64_t>(s.n_trusted));
    d.add(s.held);
    if (kv.has_sequence(id)) d.add_all(kv.block_table(id));
  };
  d.add(static_cast<uint64_t>(sch.running().size()));
  for (engine::SeqId id : sch.running()) add_seq(id);
  d.add(static_cast<uint64_t>(sch.waiting().size()));
  for (engine::SeqId id : sch.waiting()) add_seq(id);
  for (int32_t b = 0; b < kv.config().n_blocks; ++b) {
    d.add(static_cast<uint64_t>(kv.ref_count(b)));
    if (kv.is_cached(b)) {
      const engine::KvCacheManager::CachedBlock c = kv.cached_block(b);
      d.add(c.key.lo);
      d.add(c.key.hi);
    }
  }
  d.add_all(kv.free_list());
  d.add_all(kv.lru_order());
  if (shape_.mode == DeterminismMode::kVerified) d.add(static_cast<uint64_t>(sch.stats().n_steps));
  return d.h;
}

}  // namespace detllm::model_check
