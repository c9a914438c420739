// detllm bench workloads (src/bench/workload.h, sharegpt.h): lengths, seeded prompt ids, the
// deterministic share's choice, Poisson arrivals, and the ShareGPT filter and truncated file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "bench/sharegpt.h"
#include "bench/workload.h"
#include "core/error.h"

namespace detllm::bench {
namespace {

TEST(BenchWorkload, FixedHasTheLengthsAndIdsInTheVocabulary) {
  WorkloadOptions o;
  o.kind = WorkloadKind::kFixed;
  o.n = 5;
  o.input_len = 17;
  o.output_len = 9;
  const Workload w = synthetic_workload(o, 100, 2048);
  ASSERT_EQ(w.requests.size(), 5u);
  for (const BenchRequest& r : w.requests) {
    EXPECT_EQ(r.prompt.size(), 17u);
    EXPECT_EQ(r.output_len, 9);
    for (int32_t t : r.prompt) EXPECT_TRUE(t >= 0 && t < 100);
  }
  EXPECT_EQ(w.n_prompt_tokens(), 85);
  EXPECT_EQ(w.n_output_tokens(), 45);
  EXPECT_EQ(w.max_request_tokens(), 26);
  EXPECT_NE(w.requests[0].prompt, w.requests[1].prompt);  // random ids, not one prompt
  EXPECT_NE(w.description.find("fixed"), std::string::npos);
  EXPECT_EQ(w.vocab_size, 100);
  EXPECT_TRUE(w.counted_with.empty());
}

TEST(BenchWorkload, SameSeedSameRequestsOtherSeedOthers) {
  WorkloadOptions o;
  o.n = 3;
  o.input_len = 32;
  const Workload a = synthetic_workload(o, 512, 2048), b = synthetic_workload(o, 512, 2048);
  o.seed = 1;
  const Workload c = synthetic_workload(o, 512, 2048);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.requests[i].prompt, b.requests[i].prompt);
    EXPECT_NE(a.requests[i].prompt, c.requests[i].prompt);
  }
}

TEST(BenchWorkload, LongLengthsAreInRangeAndRefusedBeyondTheContext) {
  const std::vector<LengthPair> l = long_lengths(200, 3);
  ASSERT_EQ(l.size(), 200u);
  int32_t min_in = 1 << 30, max_in = 0;
  for (const LengthPair& p : l) {
    EXPECT_GE(p.input, kLongInputMin);
    EXPECT_LE(p.input, kLongInputMax);
    EXPECT_GE(p.output, kLongOutputMin);
    EXPECT_LE(p.output, kLongOutputMax);
    min_in = std::min(min_in, p.input);
    max_in = std::max(max_in, p.input);
  }
  EXPECT_LT(max_in - min_in, kLongInputMax - kLongInputMin + 1);
  EXPECT_GT(max_in - min_in, 2000);  // spread over the range
  WorkloadOptions o;
  o.kind = WorkloadKind::kLong;
  o.n = 2;
  try {
    (void)synthetic_workload(o, 512, 2048);  // tiny-llama's context
    FAIL() << "a 4k prompt must not fit a 2048-token context";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
  EXPECT_EQ(synthetic_workload(o, 512, 131072).requests.size(), 2u);
}

TEST(BenchWorkload, DeterministicShareIsExactAndNested) {
  const int32_t n = 50;
  std::vector<bool> prev(n, false);
  for (double share : {0.0, 2.0, 10.0, 50.0, 100.0}) {
    const std::vector<bool> m = deterministic_mask(n, share, 7);
    const auto k = std::count(m.begin(), m.end(), true);
    EXPECT_EQ(k, std::llround(n * share / 100.0)) << share;
    for (int32_t i = 0; i < n; ++i) {
      EXPECT_TRUE(!prev[i] || m[i]) << "a larger share keeps the smaller share's requests";
    }
    prev = m;
    EXPECT_EQ(m, deterministic_mask(n, share, 7));
  }
  EXPECT_NE(deterministic_mask(n, 50, 7), deterministic_mask(n, 50, 8));
  EXPECT_THROW(deterministic_mask(n, 101, 0), Error);
}

TEST(BenchWorkload, PoissonArrivalsAreSeededAscendingWithTheRightMean) {
  const double rate = 4.0;
  const std::vector<double> t = poisson_arrivals(20000, rate, 11);
  ASSERT_EQ(t.size(), 20000u);
  EXPECT_GT(t[0], 0.0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  // Mean gap 1/rate; the standard error of 20000 exponential gaps is 0.7% of the mean.
  const double mean_gap = t.back() / static_cast<double>(t.size());
  EXPECT_NEAR(mean_gap, 1.0 / rate, 0.04 / rate);
  // Exponential: about e^-1 of the gaps exceed the mean.
  int64_t above = 0;
  for (size_t i = 1; i < t.size(); ++i) above += t[i] - t[i - 1] > 1.0 / rate;
  EXPECT_NEAR(static_cast<double>(above) / (t.size() - 1), std::exp(-1.0), 0.02);
  EXPECT_EQ(t, poisson_arrivals(20000, rate, 11));
  EXPECT_NE(poisson_arrivals(5, rate, 11), poisson_arrivals(5, rate, 12));
  EXPECT_THROW(poisson_arrivals(5, 0.0, 1), Error);
}

TEST(BenchWorkload, ParsesKinds) {
  EXPECT_EQ(parse_workload_kind("sharegpt"), WorkloadKind::kShareGpt);
  EXPECT_EQ(parse_workload_kind("fixed"), WorkloadKind::kFixed);
  EXPECT_EQ(parse_workload_kind("long"), WorkloadKind::kLong);
  EXPECT_EQ(parse_workload_kind("file"), WorkloadKind::kFile);
  EXPECT_EQ(workload_kind_name(WorkloadKind::kFile), "file");
  EXPECT_THROW(parse_workload_kind("random"), Error);
}

ShareGptFile small_file() {
  ShareGptFile f;
  f.n_entries = 6;
  f.pairs = {
      {std::string(40, 'a'), std::string(400, 'b')},     // 10 + 100 tokens (4 bytes / token)
      {std::string(8, 'a'), std::string(40, 'b')},       // prompt 2 tokens: too short
      {std::string(5000, 'a'), std::string(40, 'b')},    // prompt 1250 tokens: too long
      {std::string(80, 'a'), std::string(60, 'b')},      // 20 + 15
      {std::string(100, 'a'), std::string(36, 'b')},     // 25 + 9
      {std::string(4000, 'a'), std::string(6000, 'b')},  // 1000 + 1500 > 2048: too long
  };
  return f;
}

TEST(BenchWorkload, ShareGptFilterCapAndRandomIds) {
  WorkloadOptions o;
  o.kind = WorkloadKind::kShareGpt;
  o.n = 3;
  o.max_output = 12;
  const Workload w = sharegpt_workload(small_file(), "mem", nullptr, "", false, o, 300, 2048);
  ASSERT_EQ(w.requests.size(), 3u);
  std::vector<std::pair<size_t, int32_t>> got;
  for (const BenchRequest& r : w.requests) {
    got.push_back({r.prompt.size(), r.output_len});
    for (int32_t t : r.prompt) EXPECT_TRUE(t >= 0 && t < 300);
  }
  std::sort(got.begin(), got.end());
  const std::vector<std::pair<size_t, int32_t>> want = {{10, 12}, {20, 12}, {25, 9}};
  EXPECT_EQ(got, want);
  EXPECT_NE(w.description.find("ceil(bytes / 4)"), std::string::npos) << w.description;
  EXPECT_EQ(w.counted_with, "ceil(bytes / 4)");  // what a request file's header records
  EXPECT_EQ(w.vocab_size, 300);
  o.n = 4;  // only three pass the filter
  EXPECT_THROW(sharegpt_workload(small_file(), "mem", nullptr, "", false, o, 300, 2048), Error);
  o.n = 3;  // a 64-token context leaves only (20 + 15) and (25 + 9)
  EXPECT_THROW(sharegpt_workload(small_file(), "mem", nullptr, "", false, o, 300, 64), Error);
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

TEST(BenchShareGpt, TruncatedFileKeepsTheCompleteEntries) {
  const std::string entry =
      R"({"id": "x", "conversations": [{"from": "human", "value": "hello there"},)"
      R"( {"from": "gpt", "value": "general kenobi"}, {"from": "human", "value": "again"}]})";
  const std::string path = temp_path("detllm_bench_sharegpt_test.json");
  {
    std::ofstream f(path);
    f << "[" << entry << ", " << entry << ", "
      << R"({"id": "y", "conversations": [{"from": "hu)";
  }
  const ShareGptFile d = load_sharegpt(path);
  EXPECT_TRUE(d.truncated);
  EXPECT_EQ(d.n_entries, 2u);
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_EQ(d.pairs[0].prompt, "hello there");
  EXPECT_EQ(d.pairs[0].completion, "general kenobi");
  {
    std::ofstream f(path);
    f << "[" << entry << ", }} " << entry << "]";
  }
  EXPECT_THROW(load_sharegpt(path), Error);  // broken in the middle: not truncation
  std::filesystem::remove(path);
  EXPECT_THROW(load_sharegpt(path), Error);  // missing
}

}  // namespace
}  // namespace detllm::bench
