// vLLM's packed-broadcast cut (server/packed_chunks.h) against a plain transcription of the
// trainer's loop (packed_tensor.py pack_tensors: append, then break once the total exceeds the
// buffer), over many random size lists; and the edge cases spelled out.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "server/packed_chunks.h"

namespace detllm::server {
namespace {

// The producer's loop as written in vLLM: each chunk is the list of tensor indices it holds.
std::vector<std::vector<size_t>> producer_cut(const std::vector<uint64_t>& sizes, uint64_t buffer) {
  std::vector<std::vector<size_t>> chunks;
  size_t next = 0;
  while (true) {
    std::vector<size_t> chunk;
    uint64_t total = 0;
    while (next < sizes.size()) {
      chunk.push_back(next);
      total += sizes[next++];
      if (total > buffer) break;
    }
    if (chunk.empty()) break;
    chunks.push_back(chunk);
  }
  return chunks;
}

TEST(PackedChunks, CutsAsVllmsProducerOnRandomLists) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint64_t> sizes(rng() % 20);
    for (uint64_t& s : sizes) s = rng() % 4 == 0 ? 0 : rng() % 300;
    const uint64_t buffer = 1 + rng() % 500;
    const auto want = producer_cut(sizes, buffer);
    const auto got = plan_broadcasts(sizes, true, buffer);
    ASSERT_EQ(got.size(), want.size()) << "trial " << trial;
    for (size_t c = 0; c < got.size(); ++c) {
      ASSERT_EQ(got[c].first, want[c].front());
      ASSERT_EQ(got[c].count, want[c].size());
      uint64_t bytes = 0;
      for (size_t i : want[c]) bytes += sizes[i];
      ASSERT_EQ(got[c].bytes, bytes);
    }
  }
}

TEST(PackedChunks, EdgeCases) {
  const std::vector<uint64_t> sizes = {40, 60, 10, 500, 5};
  // 40 + 60 = 100 is not > 100: the chunk goes on; + 10 crosses it and ends the chunk.
  auto c = plan_broadcasts(sizes, true, 100);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].count, 3u);
  EXPECT_EQ(c[0].bytes, 110u);
  EXPECT_EQ(c[1].count, 1u);  // a tensor larger than the buffer is a chunk of its own
  EXPECT_EQ(c[1].bytes, 500u);
  EXPECT_EQ(c[2].count, 1u);  // the remainder
  EXPECT_EQ(c[2].first, 4u);
  // Unpacked: one broadcast per tensor.
  c = plan_broadcasts(sizes, false, 100);
  ASSERT_EQ(c.size(), sizes.size());
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i].bytes, sizes[i]);
  EXPECT_TRUE(plan_broadcasts({}, true, 100).empty());
}

}  // namespace
}  // namespace detllm::server
