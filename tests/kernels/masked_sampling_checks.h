// Ops::sample_rows_masked and score_token rows (kernels/ops.h, kernels/sampling/sample_row.h) on
// one backend against the host specification, bit for bit: a masked row gives sample_allowed()'s
// token, logprob and top logprobs (kernels/sampling/masked_sample.h), or kNoneAllowed; a row
// without a mask gives sample_row()'s; a scoring row gives score_row()'s. Backend-generic
// (memory through the Ops functions): tests/kernels/backend_ops_test.cpp runs it on every
// backend, CUDA included.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/sampling/masked_sample.h"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler.h"

namespace detllm::kernels::testing {

inline void expect_same_row_result(const SampleRowResult& got, const SampleRowResult& want) {
  EXPECT_EQ(got.status, want.status);
  EXPECT_EQ(got.token, want.token);
  if (want.status != SampleRowStatus::kOk) return;
  EXPECT_EQ(std::memcmp(&got.logprob, &want.logprob, 4), 0) << got.logprob << " vs "
                                                            << want.logprob;
  ASSERT_EQ(got.n_top, want.n_top);
  for (int32_t j = 0; j < want.n_top; ++j) {
    EXPECT_EQ(got.top_tokens[j], want.top_tokens[j]) << "top " << j;
    EXPECT_EQ(std::memcmp(&got.top_logprobs[j], &want.top_logprobs[j], 4), 0) << "top " << j;
  }
}

// Rows: unmasked greedy; a random half mask at T 0.8; the upper half of the ids with top-k and
// top-p; a mask of nothing; a mask of ids whose logits are -inf; greedy with the most top
// logprobs; one allowed id with min-p; a sparse mask (1 id in 97) at T 1.
inline void check_sample_rows_masked(Ops& ops, int vocab) {
  const int rows = 8;
  auto logits = random_floats(static_cast<size_t>(rows) * vocab, 21, -8.0f, 8.0f);
  const size_t n_words = (static_cast<size_t>(vocab) + 31) / 32;
  std::vector<uint32_t> words;
  std::vector<int64_t> begin(rows, -1);
  std::mt19937 rng(7);
  auto add_mask = [&](int r, auto allowed) {
    begin[r] = static_cast<int64_t>(words.size());
    words.resize(words.size() + n_words, 0u);
    for (int i = 0; i < vocab; ++i) {
      if (allowed(i)) words[static_cast<size_t>(begin[r]) + i / 32] |= 1u << (i % 32);
    }
  };
  const float neg_inf = -std::numeric_limits<float>::infinity();
  add_mask(1, [&](int) { return rng() % 2 == 0; });
  add_mask(2, [&](int i) { return i >= vocab / 2; });
  add_mask(3, [](int) { return false; });
  for (int i = 0; i < vocab; i += 3) logits[static_cast<size_t>(4) * vocab + i] = neg_inf;
  add_mask(4, [](int i) { return i % 3 == 0; });
  add_mask(5, [&](int) { return rng() % 4 != 0; });
  add_mask(6, [&](int i) { return i == vocab / 3; });
  add_mask(7, [](int i) { return i % 97 == 5; });
  std::vector<SampleRowParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    SampleRowParams& p = params[r];
    p.temperature = (r == 0 || r == 5) ? 0.0f : (r == 7 ? 1.0f : 0.8f);
    p.top_k = r == 2 ? 40 : 0;
    p.top_p = r == 2 ? 0.9f : 1.0f;
    p.min_p = r == 6 ? 0.1f : 0.0f;
    p.seed = 500 + r;
    p.position = 9 + r;
    p.sample_index = r % 3;
    p.n_logprobs = r == 5 ? SamplingParams::kMaxLogprobs : 4;
  }
  DeviceArray<float> dl(ops, logits);
  std::vector<SampleRowResult> out(rows);
  ops.sample_rows_masked(dl.data(), rows, vocab, params.data(),
                         RowMasks{words.data(), begin.data()}, out.data());
  AllowedScratch scratch;
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    const std::span<const float> row =
        std::span<const float>(logits).subspan(static_cast<size_t>(r) * vocab, vocab);
    const SampleRowParams& p = params[r];
    const SampleRowResult want =
        begin[r] < 0
            ? sample_row(row, p)
            : sample_row_result_of(sample_allowed(
                  row, p, p.position, p.sample_index,
                  AllowedIds{std::span<const uint32_t>(words).subspan(
                                 static_cast<size_t>(begin[r]), n_words),
                             vocab},
                  scratch));
    expect_same_row_result(out[r], want);
  }
  EXPECT_EQ(out[3].status, SampleRowStatus::kNoneAllowed);
  EXPECT_EQ(out[4].status, SampleRowStatus::kNoneAllowed);
  EXPECT_EQ(out[6].token, vocab / 3);
  EXPECT_EQ(out[7].token % 97, 5);
}

// score_token rows (temperature 0) beside drawing rows in one sample_rows call.
inline void check_score_rows(Ops& ops, int vocab) {
  const int rows = 4;
  const auto logits = random_floats(static_cast<size_t>(rows) * vocab, 22, -8.0f, 8.0f);
  std::vector<SampleRowParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = r == 1 ? 0.7f : 0.0f;
    params[r].seed = 3;
    params[r].position = 40 + r;
    params[r].n_logprobs = r == 2 ? 0 : 5;
  }
  params[0].score_token = vocab - 1;
  params[2].score_token = 0;
  params[3].score_token = vocab / 2;
  DeviceArray<float> dl(ops, logits);
  std::vector<SampleRowResult> out(rows);
  ops.sample_rows(dl.data(), rows, vocab, params.data(), out.data());
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    const std::span<const float> row =
        std::span<const float>(logits).subspan(static_cast<size_t>(r) * vocab, vocab);
    expect_same_row_result(out[r], sample_row(row, params[r]));
    if (params[r].score_token >= 0) {
      EXPECT_EQ(out[r].token, params[r].score_token);
    }
  }
}

}  // namespace detllm::kernels::testing
