// Tests of the paged KV block manager and the chained block hash: allocation and ref counts,
// prefix hits (full, partial, none), LRU eviction, copy-on-write after fork, shuffled layout.
// No model, no device: runs in milliseconds. check_consistency() after every operation.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "engine/kv_cache.h"

namespace detllm::engine {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

KvCacheConfig small_config(int32_t n_blocks, int32_t block_size = 4) {
  KvCacheConfig c;
  c.n_blocks = n_blocks;
  c.block_size = block_size;
  return c;
}

// Adds sequence `id` with its cached prefix, allocates the rest and marks it all computed.
// Returns the prefix-hit tokens.
int32_t add_and_compute(KvCacheManager& kv, SeqId id, const std::vector<int32_t>& tokens,
                        uint64_t numerics_class = 0) {
  const PrefixMatch m = kv.match_prefix(tokens, numerics_class);
  kv.add_sequence(id, numerics_class, m);
  std::vector<BlockCopy> copies;
  const int32_t n = static_cast<int32_t>(tokens.size());
  EXPECT_TRUE(kv.ensure_writable(id, m.n_tokens, n - m.n_tokens, copies));
  EXPECT_TRUE(copies.empty());
  kv.mark_computed(id, tokens, n);
  kv.check_consistency();
  return m.n_tokens;
}

TEST(BlockHash, ChainedAndSensitiveToEverything) {
  const auto a = iota_tokens(8);
  auto b = a;
  b[1] = 7;  // differs in block 0 only
  const std::span<const int32_t> a0(a.data(), 4), a1(a.data() + 4, 4);
  const std::span<const int32_t> b0(b.data(), 4), b1(b.data() + 4, 4);
  const BlockHash ka0 = hash_block(kRootBlockHash, 0, a0);
  const BlockHash kb0 = hash_block(kRootBlockHash, 0, b0);
  EXPECT_NE(ka0, kb0);
  // Block 1 has the same tokens in a and b, but its key covers the whole prefix.
  EXPECT_NE(hash_block(ka0, 0, a1), hash_block(kb0, 0, b1));
  // Deterministic.
  EXPECT_EQ(hash_block(ka0, 0, a1), hash_block(ka0, 0, a1));
  // Numerics class and block length are part of the key.
  EXPECT_NE(hash_block(kRootBlockHash, 1, a0), ka0);
  EXPECT_NE(hash_block(kRootBlockHash, 0, a0.first(3)), ka0);
  EXPECT_EQ(to_hex(ka0).size(), 32u);
}

TEST(BlockHash, PinnedValues) {
  // Keys depend only on the values hashed (little-endian encoding, XXH3-128): a change here
  // changes every block identity, so make it on purpose.
  const std::vector<int32_t> t{1, 2, 3, -4};
  const BlockHash k = hash_block(kRootBlockHash, 0, t);
  EXPECT_EQ(to_hex(k), "aaa788ffc6518a72604a64893e729f55");
  EXPECT_EQ(to_hex(hash_block(k, 3, t)), "c30f07685a3fe8dd572ffaf977528d15");
}

TEST(KvCacheConfig, Validate) {
  EXPECT_THROW(KvCacheManager(small_config(0)), Error);
  EXPECT_THROW(KvCacheManager(small_config(4, 0)), Error);
  EXPECT_NO_THROW(KvCacheManager(small_config(1, 1)));
}

TEST(KvCache, AllocateFreeRefcount) {
  KvCacheManager kv(small_config(8));
  kv.add_sequence(1, 0, PrefixMatch{});
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.ensure_writable(1, 0, 10, copies));  // 3 blocks
  kv.check_consistency();
  auto table = kv.block_table(1);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0], 0);  // unshuffled: blocks in ascending order
  EXPECT_EQ(table[2], 2);
  for (int32_t b : table) EXPECT_EQ(kv.ref_count(b), 1);
  EXPECT_EQ(kv.n_free_blocks(), 5);
  EXPECT_EQ(kv.slot(1, 9), table[2] * 4 + 1);
  // Growing within the last block costs nothing; past it, one block.
  EXPECT_EQ(kv.blocks_needed(1, 10, 2), 0);
  EXPECT_EQ(kv.blocks_needed(1, 10, 3), 1);
  EXPECT_EQ(kv.max_tokens_fitting(1, 10, 100), 2 + 5 * 4);
  kv.free_sequence(1);
  kv.check_consistency();
  EXPECT_EQ(kv.n_free_blocks(), 8);
  EXPECT_THROW(kv.free_sequence(1), Error);  // no table any more
  EXPECT_THROW(kv.block_table(1), Error);
}

TEST(KvCache, EnsureWritableIsAllOrNothing) {
  KvCacheManager kv(small_config(2));
  kv.add_sequence(1, 0, PrefixMatch{});
  std::vector<BlockCopy> copies;
  EXPECT_FALSE(kv.ensure_writable(1, 0, 9, copies));  // needs 3 of 2
  kv.check_consistency();
  EXPECT_TRUE(kv.block_table(1).empty());
  EXPECT_EQ(kv.n_free_blocks(), 2);
  EXPECT_EQ(kv.max_tokens_fitting(1, 0, 9), 8);
  EXPECT_TRUE(kv.ensure_writable(1, 0, 8, copies));
  EXPECT_EQ(kv.max_tokens_fitting(1, 8, 1), 0);
  kv.check_consistency();
}

TEST(KvCache, PrefixHitFullPartialNone) {
  KvCacheManager kv(small_config(32));
  const auto a = iota_tokens(13);  // 3 full blocks + 1 token
  EXPECT_EQ(add_and_compute(kv, 1, a), 0);
  EXPECT_EQ(kv.stats().n_cached, 3);

  // Same 13 tokens: the 3 full blocks hit, the last token is computed.
  PrefixMatch m = kv.match_prefix(a, 0);
  EXPECT_EQ(m.n_tokens, 12);
  EXPECT_EQ(m.blocks,
            std::vector<int32_t>(kv.block_table(1).begin(), kv.block_table(1).begin() + 3));
  EXPECT_EQ(m.n_idle, 0);  // still referenced by sequence 1

  // Exactly 12 tokens: a full hit would leave nothing to compute, so one block less.
  EXPECT_EQ(kv.match_prefix(std::span(a).first(12), 0).n_tokens, 8);

  // Shares only the first 6 tokens: partial hit of one block.
  auto c = a;
  c[6] = 1;
  EXPECT_EQ(kv.match_prefix(c, 0).n_tokens, 4);
  // Differs in the first token: the chain breaks at block 0.
  auto d = a;
  d[0] = 1;
  EXPECT_EQ(kv.match_prefix(d, 0).n_tokens, 0);
  // Other numerics class: nothing.
  EXPECT_EQ(kv.match_prefix(a, 7).n_tokens, 0);

  // Taking the hit shares the blocks.
  EXPECT_EQ(add_and_compute(kv, 2, c), 4);
  EXPECT_EQ(kv.ref_count(kv.block_table(1)[0]), 2);
  EXPECT_EQ(kv.block_table(2)[0], kv.block_table(1)[0]);
  EXPECT_NE(kv.block_table(2)[1], kv.block_table(1)[1]);
  const KvCacheStats s = kv.stats();
  EXPECT_EQ(s.n_query_tokens, 26);
  EXPECT_EQ(s.n_hit_tokens, 4);
  EXPECT_NEAR(s.hit_rate(), 4.0 / 26.0, 1e-12);

  // After both finish, the blocks stay cached (idle) and still hit.
  kv.free_sequence(1);
  kv.free_sequence(2);
  kv.check_consistency();
  m = kv.match_prefix(a, 0);
  EXPECT_EQ(m.n_tokens, 12);
  EXPECT_EQ(m.n_idle, 3);
  EXPECT_EQ(kv.stats().n_referenced, 0);
}

// reset_prefix_cache: idle cached blocks are forgotten and freed; a block a sequence holds keeps
// its key until released (then it is idle-cached again, as without the reset).
TEST(KvCache, DropIdleCachedFreesOnlyUnheldBlocks) {
  KvCacheManager kv(small_config(16));
  const auto a = iota_tokens(9, 100);  // 2 full blocks
  const auto b = iota_tokens(9, 200);
  add_and_compute(kv, 1, a);
  add_and_compute(kv, 2, b);
  kv.free_sequence(1);  // a's 2 blocks idle-cached; b's held by sequence 2
  const int32_t free_before = kv.n_free_blocks();
  EXPECT_EQ(kv.drop_idle_cached(), 2);
  kv.check_consistency();
  EXPECT_EQ(kv.n_free_blocks(), free_before + 2);
  EXPECT_EQ(kv.match_prefix(a, 0).n_tokens, 0);  // a is gone
  EXPECT_EQ(kv.match_prefix(b, 0).n_tokens, 8);  // b is in use: kept
  EXPECT_EQ(kv.stats().n_cached, 2);
  EXPECT_EQ(kv.drop_idle_cached(), 0);  // nothing idle left
  kv.free_sequence(2);
  EXPECT_EQ(kv.drop_idle_cached(), 2);
  kv.check_consistency();
  EXPECT_EQ(kv.stats().n_cached, 0);
  EXPECT_EQ(kv.n_free_blocks(), 16);
  EXPECT_EQ(add_and_compute(kv, 3, a), 0);  // computed again, cached again
  EXPECT_EQ(kv.stats().n_cached, 2);
}

TEST(KvCache, BlockIsCachedOnlyWhenFullAndComputed) {
  KvCacheManager kv(small_config(8));
  const auto a = iota_tokens(12);
  kv.add_sequence(1, 0, PrefixMatch{});
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.ensure_writable(1, 0, 12, copies));
  EXPECT_EQ(kv.match_prefix(a, 0).n_tokens, 0);  // allocated, not computed
  kv.mark_computed(1, a, 7);                     // block 0 full and computed; block 1 not
  kv.check_consistency();
  EXPECT_TRUE(kv.is_cached(kv.block_table(1)[0]));
  EXPECT_FALSE(kv.is_cached(kv.block_table(1)[1]));
  EXPECT_EQ(kv.match_prefix(a, 0).n_tokens, 4);
  kv.mark_computed(1, a, 12);
  kv.check_consistency();
  EXPECT_EQ(kv.match_prefix(a, 0).n_tokens, 8);
  EXPECT_EQ(kv.block_hashes(1).size(), 3u);
}

TEST(KvCache, PrefixCacheOff) {
  KvCacheConfig c = small_config(8);
  c.enable_prefix_cache = false;
  KvCacheManager kv(c);
  const auto a = iota_tokens(12);
  EXPECT_EQ(add_and_compute(kv, 1, a), 0);
  kv.free_sequence(1);
  kv.check_consistency();
  EXPECT_EQ(kv.match_prefix(a, 0).n_tokens, 0);
  EXPECT_EQ(kv.n_free_blocks(), 8);
}

TEST(KvCache, EvictsFreeBlocksLastAndLeastRecentlyReleasedFirst) {
  KvCacheManager kv(small_config(6));
  const auto a = iota_tokens(8, 100);
  const auto b = iota_tokens(8, 200);
  add_and_compute(kv, 1, a);
  add_and_compute(kv, 2, b);
  const std::vector<int32_t> ta(kv.block_table(1).begin(), kv.block_table(1).end());
  kv.free_sequence(1);  // releases a1 then a0
  kv.free_sequence(2);  // then b1, b0: LRU order a1, a0, b1, b0
  kv.check_consistency();
  EXPECT_EQ(kv.stats().n_cached_idle, 4);

  // Two truly free blocks are taken before any cached one.
  kv.add_sequence(3, 0, PrefixMatch{});
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.ensure_writable(3, 0, 8, copies));
  kv.check_consistency();
  EXPECT_EQ(kv.stats().n_evictions, 0);
  const auto a_query = iota_tokens(9, 100);  // a plus one token
  EXPECT_EQ(kv.match_prefix(a_query, 0).n_tokens, 8);

  // The next block evicts a's tail block: a now hits one block only.
  ASSERT_TRUE(kv.ensure_writable(3, 8, 1, copies));
  kv.check_consistency();
  EXPECT_EQ(kv.stats().n_evictions, 1);
  EXPECT_EQ(kv.block_table(3)[2], ta[1]);
  EXPECT_EQ(kv.match_prefix(a_query, 0).n_tokens, 4);
  // Then a's head: a is a miss, b still a full hit.
  ASSERT_TRUE(kv.ensure_writable(3, 12, 1, copies));
  kv.check_consistency();
  EXPECT_EQ(kv.match_prefix(a_query, 0).n_tokens, 0);
  EXPECT_EQ(kv.match_prefix(iota_tokens(9, 200), 0).n_tokens, 8);

  // A hit takes b's blocks off the LRU: they are not evicted while referenced.
  const PrefixMatch m = kv.match_prefix(iota_tokens(9, 200), 0);
  EXPECT_EQ(m.n_idle, 2);
  kv.add_sequence(4, 0, m);
  kv.check_consistency();
  EXPECT_EQ(kv.n_available_blocks(), 0);
  EXPECT_FALSE(kv.ensure_writable(3, 16, 1, copies));
}

TEST(KvCache, SameKeyComputedTwiceStaysPrivate) {
  KvCacheManager kv(small_config(8));
  const auto a = iota_tokens(9);
  // Both sequences miss (nothing cached yet) and compute the same blocks.
  kv.add_sequence(1, 0, kv.match_prefix(a, 0));
  kv.add_sequence(2, 0, kv.match_prefix(a, 0));
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.ensure_writable(1, 0, 9, copies));
  ASSERT_TRUE(kv.ensure_writable(2, 0, 9, copies));
  kv.mark_computed(1, a, 9);
  kv.mark_computed(2, a, 9);
  kv.check_consistency();
  EXPECT_EQ(kv.stats().n_cached, 2);  // sequence 1's blocks
  EXPECT_FALSE(kv.is_cached(kv.block_table(2)[0]));
  EXPECT_EQ(kv.block_hashes(1)[1], kv.block_hashes(2)[1]);
  kv.free_sequence(2);
  kv.free_sequence(1);
  kv.check_consistency();
  EXPECT_EQ(kv.n_free_blocks(), 6);
  EXPECT_EQ(kv.stats().n_cached_idle, 2);
}

TEST(KvCache, ForkSharesBlocksAndCopiesPartialOnWrite) {
  KvCacheManager kv(small_config(8));
  const auto p = iota_tokens(10);  // blocks 0, 1 full; block 2 holds positions 8, 9
  add_and_compute(kv, 1, p);
  kv.fork(1, 2, 10);
  kv.fork(1, 3, 10);
  kv.check_consistency();
  const std::vector<int32_t> tp(kv.block_table(1).begin(), kv.block_table(1).end());
  for (int32_t b : tp) EXPECT_EQ(kv.ref_count(b), 3);
  EXPECT_EQ(kv.blocks_needed(2, 10, 1), 1);  // copy of the shared partial block

  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.ensure_writable(2, 10, 1, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, tp[2]);
  EXPECT_EQ(copies[0].dst, kv.block_table(2)[2]);
  ASSERT_TRUE(kv.ensure_writable(3, 10, 1, copies));
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[1].src, tp[2]);
  // The last holder writes in place.
  EXPECT_EQ(kv.blocks_needed(1, 10, 1), 0);
  ASSERT_TRUE(kv.ensure_writable(1, 10, 1, copies));
  EXPECT_EQ(copies.size(), 2u);
  EXPECT_EQ(kv.block_table(1)[2], tp[2]);
  kv.check_consistency();
  // Full blocks stay shared.
  EXPECT_EQ(kv.ref_count(tp[0]), 3);
  EXPECT_EQ(kv.ref_count(tp[2]), 1);
  EXPECT_EQ(kv.stats().n_copies, 2);
  kv.free_sequence(2);
  kv.free_sequence(1);
  kv.free_sequence(3);
  kv.check_consistency();
  EXPECT_EQ(kv.stats().n_referenced, 0);
}

TEST(KvCache, ForkAtBlockBoundaryNeedsNoCopy) {
  KvCacheManager kv(small_config(8));
  const auto p = iota_tokens(8);
  add_and_compute(kv, 1, p);
  kv.fork(1, 2, 8);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.ensure_writable(2, 8, 1, copies));
  ASSERT_TRUE(kv.ensure_writable(1, 8, 1, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_NE(kv.block_table(1)[2], kv.block_table(2)[2]);
  kv.check_consistency();
}

TEST(KvCache, RewritingACachedBlockCopiesIt) {
  KvCacheManager kv(small_config(8));
  const auto a = iota_tokens(8);
  add_and_compute(kv, 1, a);
  const int32_t cached = kv.block_table(1)[1];
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.ensure_writable(1, 6, 1, copies));  // e.g. a rollback of positions 6..
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, cached);
  EXPECT_TRUE(kv.is_cached(cached));
  EXPECT_EQ(kv.ref_count(cached), 0);
  EXPECT_EQ(kv.block_hashes(1).size(), 1u);
  kv.check_consistency();
  auto b = a;
  b[7] = 5;
  kv.mark_computed(1, b, 8);
  kv.check_consistency();
  EXPECT_EQ(kv.block_hashes(1).size(), 2u);
  EXPECT_EQ(kv.match_prefix(iota_tokens(9), 0).n_tokens, 8);  // the old block is still cached
}

TEST(KvCache, ShuffledAllocationIsSeededAndConsistent) {
  auto layout = [](bool shuffle, uint64_t seed) {
    KvCacheConfig c = small_config(64);
    c.shuffle_blocks = shuffle;
    c.shuffle_seed = seed;
    KvCacheManager kv(c);
    std::vector<int32_t> all;
    for (SeqId id = 0; id < 4; ++id) {
      add_and_compute(kv, id, iota_tokens(30, 1000 * static_cast<int32_t>(id)));
      if (id == 1) kv.free_sequence(0);
    }
    for (SeqId id = 1; id < 4; ++id) {
      all.insert(all.end(), kv.block_table(id).begin(), kv.block_table(id).end());
    }
    return all;
  };
  const auto plain = layout(false, 0);
  EXPECT_EQ(layout(true, 1), layout(true, 1));
  EXPECT_NE(layout(true, 1), layout(true, 2));
  EXPECT_NE(layout(true, 1), plain);
}

}  // namespace
}  // namespace detllm::engine
