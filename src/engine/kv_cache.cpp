// Paged KV block manager with prefix caching (see kv_cache.h for the states of a block and the
// block-table layout). Every decision is a pure function of the calls made, so two runs with the
// same calls (and shuffle seed) give the same physical layout.
#include "engine/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace detllm::engine {

void KvCacheConfig::validate() const {
  check(block_size >= 1, "kv cache: block_size must be >= 1 (got {})", block_size);
  check(n_blocks >= 1, "kv cache: n_blocks must be >= 1 (got {}); give the KV pool some memory",
        n_blocks);
  check(capacity_tokens() <= INT32_MAX,
        "kv cache: n_blocks * block_size = {} token slots exceeds the int32 slot range; use fewer "
        "blocks",
        capacity_tokens());
}

KvCacheManager::KvCacheManager(const KvCacheConfig& config) : config_(config) {
  config_.validate();
  const int32_t n = config_.n_blocks;
  blocks_.resize(n);
  block_tokens_.assign(static_cast<size_t>(n) * config_.block_size, 0);
  // Taken from the back: block 0 first when not shuffled.
  free_.reserve(n);
  for (int32_t b = n - 1; b >= 0; --b) {
    free_.push_back(b);
    blocks_[b].in_free = true;
  }
  rng_state_ = config_.shuffle_seed;
}

// splitmix64: a tiny seeded generator for the shuffled allocation order.
uint64_t KvCacheManager::next_random() {
  uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

KvCacheManager::SeqBlocks& KvCacheManager::table(SeqId id) {
  auto it = tables_.find(id);
  check(it != tables_.end(), "kv cache: sequence {} has no block table", id);
  return it->second;
}

const KvCacheManager::SeqBlocks& KvCacheManager::table(SeqId id) const {
  auto it = tables_.find(id);
  check(it != tables_.end(), "kv cache: sequence {} has no block table", id);
  return it->second;
}

std::span<const int32_t> KvCacheManager::block_table(SeqId id) const {
  return table(id).blocks;
}

std::span<const BlockHash> KvCacheManager::block_hashes(SeqId id) const {
  return table(id).hashes;
}

int32_t KvCacheManager::slot(SeqId id, int32_t pos) const {
  const SeqBlocks& t = table(id);
  const int32_t bs = config_.block_size;
  check(pos >= 0 && pos / bs < static_cast<int32_t>(t.blocks.size()),
        "kv cache: position {} of sequence {} has no block", pos, id);
  return t.blocks[pos / bs] * bs + pos % bs;
}

int32_t KvCacheManager::ref_count(int32_t block) const {
  check(block >= 0 && block < config_.n_blocks, "kv cache: no block {}", block);
  return blocks_[block].ref_count;
}

bool KvCacheManager::is_cached(int32_t block) const {
  check(block >= 0 && block < config_.n_blocks, "kv cache: no block {}", block);
  return blocks_[block].cached;
}

// ---- LRU list of cached-idle blocks (head = least recently released) ----

void KvCacheManager::lru_push_back(int32_t b) {
  BlockInfo& info = blocks_[b];
  info.lru_prev = lru_tail_;
  info.lru_next = -1;
  if (lru_tail_ >= 0) {
    blocks_[lru_tail_].lru_next = b;
  } else {
    lru_head_ = b;
  }
  lru_tail_ = b;
  info.in_lru = true;
  ++n_lru_;
}

void KvCacheManager::lru_remove(int32_t b) {
  BlockInfo& info = blocks_[b];
  if (info.lru_prev >= 0) {
    blocks_[info.lru_prev].lru_next = info.lru_next;
  } else {
    lru_head_ = info.lru_next;
  }
  if (info.lru_next >= 0) {
    blocks_[info.lru_next].lru_prev = info.lru_prev;
  } else {
    lru_tail_ = info.lru_prev;
  }
  info.lru_prev = info.lru_next = -1;
  info.in_lru = false;
  --n_lru_;
}

void KvCacheManager::uncache(int32_t b) {
  BlockInfo& info = blocks_[b];
  index_.erase(info.key);
  info.cached = false;
  info.key = info.parent = BlockHash{};
  info.numerics_class = 0;
}

int32_t KvCacheManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    size_t i = free_.size() - 1;
    if (config_.shuffle_blocks) i = static_cast<size_t>(next_random() % free_.size());
    b = free_[i];
    free_[i] = free_.back();
    free_.pop_back();
    blocks_[b].in_free = false;
  } else {
    check(lru_head_ >= 0, "kv cache: internal error: no block left to allocate");
    b = lru_head_;
    lru_remove(b);
    uncache(b);
    ++n_evictions_;
  }
  blocks_[b].ref_count = 1;
  return b;
}

void KvCacheManager::release(int32_t b) {
  BlockInfo& info = blocks_[b];
  check(info.ref_count > 0, "kv cache: internal error: double free of block {}", b);
  if (--info.ref_count > 0) return;
  if (info.cached) {
    lru_push_back(b);
  } else {
    free_.push_back(b);
    info.in_free = true;
  }
}

// ---- prefix cache ----

int32_t KvCacheManager::drop_idle_cached() {
  int32_t n = 0;
  while (lru_head_ >= 0) {
    const int32_t b = lru_head_;
    lru_remove(b);
    uncache(b);
    free_.push_back(b);
    blocks_[b].in_free = true;
    ++n;
  }
  return n;
}

bool KvCacheManager::block_matches(int32_t b, const BlockHash& parent, uint64_t numerics_class,
                                   std::span<const int32_t> tokens) const {
  const BlockInfo& info = blocks_[b];
  if (!info.cached || !(info.parent == parent) || info.numerics_class != numerics_class) {
    return false;
  }
  const int32_t* stored = block_tokens_.data() + static_cast<size_t>(b) * config_.block_size;
  return std::equal(tokens.begin(), tokens.end(), stored);
}

PrefixMatch KvCacheManager::match_prefix(std::span<const int32_t> tokens,
                                         uint64_t numerics_class) const {
  PrefixMatch m;
  if (!config_.enable_prefix_cache || tokens.empty()) return m;
  const int32_t bs = config_.block_size;
  const int32_t n_tokens = static_cast<int32_t>(tokens.size());
  const int32_t n_full = n_tokens / bs;
  const int32_t max_hit_blocks = (n_tokens - 1) / bs;  // leave >= 1 token to compute
  m.n_query_tokens = n_tokens;
  m.hashes.reserve(n_full);
  BlockHash parent = kRootBlockHash;
  bool hitting = true;
  for (int32_t j = 0; j < n_full; ++j) {
    std::span<const int32_t> blk = tokens.subspan(static_cast<size_t>(j) * bs, bs);
    const BlockHash key = hash_block(parent, numerics_class, blk);
    m.hashes.push_back(key);
    if (hitting && j < max_hit_blocks) {
      auto it = index_.find(key);
      if (it != index_.end() && block_matches(it->second, parent, numerics_class, blk)) {
        m.blocks.push_back(it->second);
        if (blocks_[it->second].ref_count == 0) ++m.n_idle;
      } else {
        hitting = false;
      }
    }
    parent = key;
  }
  m.n_tokens = static_cast<int32_t>(m.blocks.size()) * bs;
  return m;
}

void KvCacheManager::add_sequence(SeqId id, uint64_t numerics_class, const PrefixMatch& match) {
  check(!has_sequence(id), "kv cache: sequence {} already has a block table", id);
  SeqBlocks t;
  t.numerics_class = numerics_class;
  t.hashes = match.hashes;
  t.blocks.reserve(match.blocks.size());
  for (int32_t b : match.blocks) {
    check(b >= 0 && b < config_.n_blocks && blocks_[b].cached,
          "kv cache: stale prefix match (block {} is no longer cached)", b);
    if (blocks_[b].ref_count == 0) lru_remove(b);
    ++blocks_[b].ref_count;
    t.blocks.push_back(b);
  }
  t.n_blocks_published = static_cast<int32_t>(t.blocks.size());
  n_query_tokens_ += match.n_query_tokens;
  n_hit_tokens_ += match.n_tokens;
  tables_.emplace(id, std::move(t));
}

void KvCacheManager::fork(SeqId parent, SeqId child, int32_t n_computed) {
  check(!has_sequence(child), "kv cache: sequence {} already has a block table", child);
  const SeqBlocks& p = table(parent);
  const int32_t bs = config_.block_size;
  const int32_t n_shared = (n_computed + bs - 1) / bs;
  check(n_computed >= 0 && n_shared <= static_cast<int32_t>(p.blocks.size()),
        "kv cache: fork of sequence {} at {} computed tokens exceeds its {} blocks", parent,
        n_computed, p.blocks.size());
  SeqBlocks c;
  c.numerics_class = p.numerics_class;
  c.blocks.assign(p.blocks.begin(), p.blocks.begin() + n_shared);
  for (int32_t b : c.blocks) ++blocks_[b].ref_count;  // referenced already: not on the LRU
  c.hashes = p.hashes;
  c.n_blocks_published = std::min(p.n_blocks_published, n_computed / bs);
  tables_.emplace(child, std::move(c));
}

void KvCacheManager::free_sequence(SeqId id) {
  auto it = tables_.find(id);
  check(it != tables_.end(), "kv cache: sequence {} has no block table", id);
  const std::vector<int32_t>& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) release(*b);
  tables_.erase(it);
}

void KvCacheManager::truncate(SeqId id, int32_t n_tokens) {
  SeqBlocks& t = table(id);
  const int32_t bs = config_.block_size;
  check(n_tokens >= 0, "kv cache: truncate of sequence {} to {} tokens", id, n_tokens);
  const auto keep = static_cast<size_t>((n_tokens + bs - 1) / bs);
  while (t.blocks.size() > keep) {
    release(t.blocks.back());
    t.blocks.pop_back();
  }
  const auto full = static_cast<size_t>(n_tokens / bs);
  t.hashes.resize(std::min(t.hashes.size(), full));
  t.n_blocks_published = std::min(t.n_blocks_published, static_cast<int32_t>(full));
}

// ---- allocation for writes ----

const KvCacheManager::SeqBlocks& KvCacheManager::write_table(SeqId id, int32_t first) const {
  const SeqBlocks& t = table(id);
  const int32_t n_have = static_cast<int32_t>(t.blocks.size());
  check(first >= 0 && first <= n_have * config_.block_size,
        "kv cache: write at position {} of sequence {} skips past its {} blocks", first, id,
        n_have);
  return t;
}

bool KvCacheManager::must_copy(int32_t block) const {
  return blocks_[block].ref_count > 1 || blocks_[block].cached;
}

// A block in the write range costs one pool block when it does not exist yet, or when it must be
// copied first: it is shared with another table, or keyed (cached blocks are immutable).
int32_t KvCacheManager::blocks_needed(SeqId id, int32_t first, int32_t n) const {
  const SeqBlocks& t = write_table(id, first);
  const int32_t bs = config_.block_size;
  const int32_t n_have = static_cast<int32_t>(t.blocks.size());
  if (n <= 0) return 0;
  int32_t needed = 0;
  for (int32_t j = first / bs; j <= (first + n - 1) / bs; ++j) {
    if (j >= n_have) {
      needed += (first + n - 1) / bs - j + 1;
      break;
    }
    if (must_copy(t.blocks[j])) ++needed;
  }
  return needed;
}

int32_t KvCacheManager::max_tokens_fitting(SeqId id, int32_t first, int32_t n) const {
  const SeqBlocks& t = write_table(id, first);
  const int32_t bs = config_.block_size;
  const int32_t n_have = static_cast<int32_t>(t.blocks.size());
  const int32_t avail = n_available_blocks();
  int32_t used = 0;
  int32_t end = first;  // positions [first, end) fit
  for (int32_t j = first / bs; end < first + n; ++j) {
    const int32_t cost = j < n_have && !must_copy(t.blocks[j]) ? 0 : 1;
    if (used + cost > avail) break;
    used += cost;
    end = std::min(first + n, (j + 1) * bs);
  }
  return end - first;
}

bool KvCacheManager::ensure_writable(SeqId id, int32_t first, int32_t n,
                                     std::vector<BlockCopy>& copies) {
  if (n <= 0) return true;
  if (blocks_needed(id, first, n) > n_available_blocks()) return false;
  SeqBlocks& t = table(id);
  const int32_t bs = config_.block_size;
  for (int32_t j = first / bs; j <= (first + n - 1) / bs; ++j) {
    if (j == static_cast<int32_t>(t.blocks.size())) {
      t.blocks.push_back(take_block());
      continue;
    }
    const int32_t src = t.blocks[j];
    if (must_copy(src)) {
      const int32_t dst = take_block();
      copies.push_back(BlockCopy{src, dst});
      ++n_copies_;
      t.blocks[j] = dst;
      release(src);
    }
  }
  // Rewriting computed positions (only a rollback does that) may change their tokens: their
  // keys are recomputed by mark_computed.
  if (first < t.n_blocks_published * bs) {
    t.n_blocks_published = first / bs;
    t.hashes.resize(std::min<size_t>(t.hashes.size(), first / bs));
  }
  return true;
}

void KvCacheManager::mark_computed(SeqId id, std::span<const int32_t> tokens, int32_t n_computed) {
  SeqBlocks& t = table(id);
  const int32_t bs = config_.block_size;
  check(n_computed >= 0 && n_computed <= static_cast<int32_t>(tokens.size()) &&
            n_computed <= static_cast<int32_t>(t.blocks.size()) * bs,
        "kv cache: sequence {} cannot have {} computed tokens ({} tokens, {} blocks)", id,
        n_computed, tokens.size(), t.blocks.size());
  if (!config_.enable_prefix_cache) return;
  const int32_t n_full = n_computed / bs;
  while (static_cast<int32_t>(t.hashes.size()) < n_full) {
    const size_t j = t.hashes.size();
    const BlockHash parent = j == 0 ? kRootBlockHash : t.hashes[j - 1];
    t.hashes.push_back(hash_block(parent, t.numerics_class, tokens.subspan(j * bs, bs)));
  }
  for (int32_t j = t.n_blocks_published; j < n_full; ++j) {
    const int32_t b = t.blocks[j];
    BlockInfo& info = blocks_[b];
    if (info.cached) {
      check(info.key == t.hashes[j],
            "kv cache: internal error: block {} of sequence {} is cached under another key", b, id);
      continue;
    }
    if (index_.count(t.hashes[j]) != 0) continue;  // same prefix cached by another block
    info.cached = true;
    info.key = t.hashes[j];
    info.parent = j == 0 ? kRootBlockHash : t.hashes[j - 1];
    info.numerics_class = t.numerics_class;
    std::copy_n(tokens.begin() + static_cast<size_t>(j) * bs, bs,
                block_tokens_.begin() + static_cast<size_t>(b) * bs);
    index_.emplace(info.key, b);
  }
  t.n_blocks_published = std::max(t.n_blocks_published, n_full);
}

// ---- introspection ----

KvCacheManager::CachedBlock KvCacheManager::cached_block(int32_t block) const {
  check(is_cached(block), "kv cache: block {} is not cached", block);
  const BlockInfo& info = blocks_[block];
  const int32_t bs = config_.block_size;
  return {info.key, info.parent,
          std::span<const int32_t>(block_tokens_.data() + static_cast<size_t>(block) * bs,
                                   static_cast<size_t>(bs))};
}

int32_t KvCacheManager::find_cached(const BlockHash& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int32_t> KvCacheManager::lru_order() const {
  std::vector<int32_t> order;
  for (int32_t b = lru_head_; b >= 0; b = blocks_[b].lru_next) order.push_back(b);
  return order;
}

// ---- accounting ----

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  s.n_blocks = config_.n_blocks;
  s.n_free = n_free_blocks();
  s.n_cached_idle = n_lru_;
  s.n_cached = static_cast<int32_t>(index_.size());
  s.n_referenced = config_.n_blocks - s.n_free - s.n_cached_idle;
  s.n_query_tokens = n_query_tokens_;
  s.n_hit_tokens = n_hit_tokens_;
  s.n_evictions = n_evictions_;
  s.n_copies = n_copies_;
  return s;
}

void KvCacheManager::check_consistency() const {
  const int32_t n = config_.n_blocks;
  const int32_t bs = config_.block_size;
  std::vector<int32_t> refs(n, 0);
  std::vector<SeqId> seen_in(n, -1);
  for (const auto& [id, t] : tables_) {
    check(t.n_blocks_published >= 0 &&
              t.n_blocks_published <= static_cast<int32_t>(t.blocks.size()) &&
              t.n_blocks_published <= static_cast<int32_t>(t.hashes.size()),
          "kv check: sequence {}: {} published blocks but {} blocks, {} keys", id,
          t.n_blocks_published, t.blocks.size(), t.hashes.size());
    for (size_t j = 0; j < t.blocks.size(); ++j) {
      const int32_t b = t.blocks[j];
      check(b >= 0 && b < n, "kv check: sequence {} holds invalid block {}", id, b);
      check(seen_in[b] != id, "kv check: sequence {} holds block {} twice", id, b);
      seen_in[b] = id;
      ++refs[b];
      if (static_cast<int32_t>(j) < t.n_blocks_published && blocks_[b].cached) {
        check(blocks_[b].key == t.hashes[j],
              "kv check: sequence {} block {} (physical {}) is cached under another key", id, j, b);
      }
    }
  }
  int32_t n_in_free = 0, n_in_lru = 0, n_cached = 0;
  for (int32_t b = 0; b < n; ++b) {
    const BlockInfo& info = blocks_[b];
    check(info.ref_count == refs[b], "kv check: block {} has ref_count {} but {} tables hold it", b,
          info.ref_count, refs[b]);
    if (info.ref_count > 0) {
      check(!info.in_free && !info.in_lru, "kv check: referenced block {} is on a free list", b);
    } else if (info.cached) {
      check(info.in_lru && !info.in_free, "kv check: cached idle block {} is not (only) on the LRU",
            b);
    } else {
      check(info.in_free && !info.in_lru, "kv check: block {} is leaked (unreferenced, not free)",
            b);
    }
    n_in_free += info.in_free;
    n_in_lru += info.in_lru;
    if (info.cached) {
      ++n_cached;
      auto it = index_.find(info.key);
      check(it != index_.end() && it->second == b, "kv check: cached block {} not indexed", b);
      const int32_t* stored = block_tokens_.data() + static_cast<size_t>(b) * bs;
      check(hash_block(info.parent, info.numerics_class, std::span<const int32_t>(stored, bs)) ==
                info.key,
            "kv check: cached block {}: key does not match its stored tokens", b);
    }
  }
  check(n_in_free == static_cast<int32_t>(free_.size()),
        "kv check: free list has {} entries, {} blocks marked free (double free?)", free_.size(),
        n_in_free);
  std::vector<char> on_free(n, 0);
  for (int32_t b : free_) {
    check(b >= 0 && b < n && blocks_[b].in_free && !on_free[b],
          "kv check: free list entry {} is invalid or duplicated", b);
    on_free[b] = 1;
  }
  int32_t walked = 0;
  int32_t prev = -1;
  for (int32_t b = lru_head_; b >= 0; b = blocks_[b].lru_next) {
    check(walked < n, "kv check: LRU list has a cycle");
    check(blocks_[b].in_lru && blocks_[b].lru_prev == prev, "kv check: LRU list broken at {}", b);
    prev = b;
    ++walked;
  }
  check(prev == lru_tail_ && walked == n_lru_ && walked == n_in_lru,
        "kv check: LRU list holds {} blocks, counter says {}, {} marked", walked, n_lru_, n_in_lru);
  check(static_cast<int32_t>(index_.size()) == n_cached,
        "kv check: index has {} keys but {} blocks are cached", index_.size(), n_cached);
}

}  // namespace detllm::engine
