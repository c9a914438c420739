// Paged KV block manager with prefix caching. Pure bookkeeping, never touches a device: it maps
// each sequence's logical blocks to physical blocks of a pool and shares full, computed blocks
// between sequences whose token prefixes (and numerics) agree (design.md Rule 4).
//
//   pool: n_blocks physical blocks of block_size token slots; slot = block * block_size + offset
//
//   seq 7 tokens  [ t0 .. t15 | t16 .. t31 | t32 t33 t34 ]   (block_size 16)
//   logical block       0            1           2  (partial)
//   block table   [     5,           2,          9       ]   physical ids
//   block keys    [    k0,          k1     ]                 k1 = H(k0, class, t16..t31)
//
// Each physical block is in exactly one state:
//   free          ref_count 0, no key            on the free list
//   referenced    ref_count = number of tables holding it (cached or not)
//   cached idle   ref_count 0, keyed             on the LRU list, evicted only when no free
//                                                block is left (least recently released first)
// A block gets a key (enters the prefix cache) once it is full AND its KV has been computed
// (mark_computed). Keyed blocks are never written again; a write into a block shared by
// several tables (after fork) copies it first (copy-on-write: a BlockCopy the runner applies).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "engine/sequence.h"

namespace detllm::engine {

struct KvCacheConfig {
  int32_t block_size = 16;  // tokens per block
  int32_t n_blocks = 0;     // physical blocks in the pool
  bool enable_prefix_cache = true;
  // Tests (design.md V7): take free blocks in a pseudo-random order drawn from shuffle_seed, so
  // two runs can differ only in the physical page layout.
  bool shuffle_blocks = false;
  uint64_t shuffle_seed = 0;

  void validate() const;  // throws detllm::Error
  int64_t capacity_tokens() const { return int64_t{block_size} * n_blocks; }
};

// Copy the KV of physical block src into block dst (all layers, all slots) before the step's
// forward pass. Apply a plan's copies in list order: a copy's dst is never a later copy's src,
// but a src freed by a preemption in the same schedule() may be a later copy's dst.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

// Longest cached prefix of a token list (match_prefix), to hand to add_sequence.
struct PrefixMatch {
  std::vector<int32_t> blocks;    // physical blocks of the cached prefix, in order
  std::vector<BlockHash> hashes;  // keys of the full blocks of the tokens looked up
  int32_t n_tokens = 0;           // blocks.size() * block_size: tokens whose KV is reused
  int32_t n_idle = 0;             // of blocks, those unreferenced (leave the evictable pool)
  int32_t n_query_tokens = 0;     // tokens looked up (for the hit rate)
};

struct KvCacheStats {
  int32_t n_blocks = 0;
  int32_t n_free = 0;         // on the free list
  int32_t n_referenced = 0;   // held by at least one table
  int32_t n_cached = 0;       // keyed (referenced or idle)
  int32_t n_cached_idle = 0;  // keyed and unreferenced: evictable
  int64_t n_query_tokens = 0;
  int64_t n_hit_tokens = 0;
  int64_t n_evictions = 0;
  int64_t n_copies = 0;  // copy-on-write block copies issued
  double hit_rate() const {
    return n_query_tokens == 0 ? 0.0 : static_cast<double>(n_hit_tokens) / n_query_tokens;
  }
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);  // validates config

  const KvCacheConfig& config() const { return config_; }
  int32_t block_size() const { return config_.block_size; }

  // Longest chain of cached full blocks that prefixes `tokens`, limited to the first
  // (tokens.size() - 1) tokens so at least one token is left to compute (its logits are
  // needed). Each hit is verified against the block's stored parent key, numerics class and
  // tokens, so reusing wrong KV would take two different prefixes whose 128-bit chained keys
  // collide. No side effects; empty when caching is off.
  PrefixMatch match_prefix(std::span<const int32_t> tokens, uint64_t numerics_class) const;

  // Creates the (empty) table of sequence `id`, taking the blocks of `match` (ref_count++);
  // pass PrefixMatch{} to reuse nothing. `match` must come from match_prefix with no change to
  // the manager in between.
  void add_sequence(SeqId id, uint64_t numerics_class, const PrefixMatch& match);

  // Child `child` shares the blocks of `parent` that hold its first n_computed tokens
  // (ref_count++ each); a shared partial last block is copied when one of them writes to it.
  void fork(SeqId parent, SeqId child, int32_t n_computed);

  // Releases every block of the sequence, last block first (so a sequence's tail is evicted
  // before its prefix). Keyed blocks stay cached.
  void free_sequence(SeqId id);

  // Pool blocks that ensure_writable(id, first, n) would consume (new blocks + copies).
  int32_t blocks_needed(SeqId id, int32_t first, int32_t n) const;
  // Largest n' <= n (possibly 0) with blocks_needed(id, first, n') <= n_available_blocks().
  int32_t max_tokens_fitting(SeqId id, int32_t first, int32_t n) const;
  // Makes slots of positions [first, first + n) writable by this sequence alone: appends blocks
  // to the table and replaces shared blocks by copies (appended to `copies`). All or nothing:
  // returns false, changing nothing, when the pool cannot supply the blocks.
  bool ensure_writable(SeqId id, int32_t first, int32_t n, std::vector<BlockCopy>& copies);

  // The runner has computed KV for positions [0, n_computed) of `tokens` (the sequence's
  // tokens, at least n_computed of them). Full blocks among them get keys and enter the cache
  // (a key already cached by another block leaves this block private).
  void mark_computed(SeqId id, std::span<const int32_t> tokens, int32_t n_computed);

  // Rollback (the verified mode): positions from n_tokens on are gone. Blocks holding only
  // such positions are released (last first); keys of blocks past n_tokens are forgotten.
  void truncate(SeqId id, int32_t n_tokens);

  // Forgets every cached block no sequence holds (vLLM's reset_prefix_cache): their keys go and
  // they return to the free list, so later requests compute those prefixes again. A cached block
  // held by a sequence keeps its key (it is in use). Returns the number of blocks dropped. Bits
  // do not change either way: a prefix hit gives the recomputation's bits (design.md Rule 4).
  int32_t drop_idle_cached();

  bool has_sequence(SeqId id) const { return tables_.count(id) != 0; }
  std::span<const int32_t> block_table(SeqId id) const;  // logical -> physical
  // Keys of the sequence's first full blocks known so far (at least the computed ones).
  std::span<const BlockHash> block_hashes(SeqId id) const;
  // Slot of position pos of sequence id (its block must be in the table).
  int32_t slot(SeqId id, int32_t pos) const;

  int32_t n_free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_available_blocks() const { return n_free_blocks() + n_lru_; }  // free + evictable
  int32_t ref_count(int32_t block) const;
  bool is_cached(int32_t block) const;
  KvCacheStats stats() const;

  // ---- read-only introspection (verify/model_check: the bounded checker rebuilds the prefix a
  // cached block holds and hashes the allocator's state) ----
  // A cached block's entry: its key, the key of the block before it (kRootBlockHash for a
  // sequence's first block) and its block_size tokens. Throws when `block` is not cached.
  struct CachedBlock {
    BlockHash key;
    BlockHash parent;
    std::span<const int32_t> tokens;
  };
  CachedBlock cached_block(int32_t block) const;
  // The cached block under `key`, -1 when none.
  int32_t find_cached(const BlockHash& key) const;
  // The free list (the next block taken is its back, unless shuffled) and the evictable blocks
  // from least to most recently released.
  std::span<const int32_t> free_list() const { return free_; }
  std::vector<int32_t> lru_order() const;

  // Verifies all accounting; throws detllm::Error naming the first broken invariant.
  // O(n_blocks * block_size); for tests and debug builds.
  void check_consistency() const;

 private:
  struct BlockInfo {
    int32_t ref_count = 0;
    bool cached = false;   // has a key and is in index_
    bool in_free = false;  // on free_
    bool in_lru = false;   // on the LRU list
    int32_t lru_prev = -1;
    int32_t lru_next = -1;
    BlockHash key;                // valid when cached
    BlockHash parent;             // valid when cached: key of the previous block
    uint64_t numerics_class = 0;  // valid when cached
  };
  struct SeqBlocks {
    std::vector<int32_t> blocks;     // logical -> physical
    std::vector<BlockHash> hashes;   // keys of the first full blocks of the tokens
    int32_t n_blocks_published = 0;  // leading full computed blocks already offered to the cache
    uint64_t numerics_class = 0;
  };

  SeqBlocks& table(SeqId id);
  const SeqBlocks& table(SeqId id) const;
  // The table of a sequence that is written from position `first` on; throws when the write
  // would skip past its blocks.
  const SeqBlocks& write_table(SeqId id, int32_t first) const;
  // A block written must first be copied: it is shared with another table, or keyed (cached
  // blocks are immutable).
  bool must_copy(int32_t block) const;
  int32_t take_block();  // free block first, else evict the LRU cached-idle block
  void release(int32_t block);
  void lru_push_back(int32_t block);
  void lru_remove(int32_t block);
  void uncache(int32_t block);
  bool block_matches(int32_t block, const BlockHash& parent, uint64_t numerics_class,
                     std::span<const int32_t> tokens) const;
  uint64_t next_random();

  KvCacheConfig config_;
  std::vector<BlockInfo> blocks_;      // (n_blocks)
  std::vector<int32_t> block_tokens_;  // (n_blocks, block_size) tokens of cached blocks
  std::vector<int32_t> free_;          // free list (taken from the back)
  int32_t lru_head_ = -1;              // least recently released cached-idle block
  int32_t lru_tail_ = -1;
  int32_t n_lru_ = 0;
  std::unordered_map<BlockHash, int32_t, Hash128Hasher> index_;  // key -> cached block
  std::unordered_map<SeqId, SeqBlocks> tables_;
  uint64_t rng_state_ = 0;
  int64_t n_query_tokens_ = 0;
  int64_t n_hit_tokens_ = 0;
  int64_t n_evictions_ = 0;
  int64_t n_copies_ = 0;
};

}  // namespace detllm::engine
