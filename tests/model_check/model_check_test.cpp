// The bounded model checker (src/verify/model_check) at the CI bound on the real engine, and
// its abstract backend's sensitivity. Negative controls: backend faults here (the row-value and
// emitted-token checks fire), and engines with a planted bug each, which the checker must catch
// with a trace — the test_model_check_mutant_* binaries (mutants/, tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "verify/model_check/hash_backend.h"
#include "verify/model_check/model_check.h"

namespace detllm::model_check {
namespace {

TEST(ModelCheckBackend, ValuesNameTheirWholePrefix) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5};
  std::vector<int32_t> b = a;
  b[1] = 6;  // another prefix from position 1 on
  const ReferenceValues ra = reference_values(a, 2);
  const ReferenceValues rb = reference_values(b, 2);
  EXPECT_EQ(ra.kv[0][0], rb.kv[0][0]);
  for (size_t p = 1; p < a.size(); ++p) {
    EXPECT_NE(ra.kv[0][p], rb.kv[0][p]) << p;
    EXPECT_NE(ra.out[p], rb.out[p]) << p;
  }
  // One stale entry before p changes the KV at p; the same entries at another position too.
  std::vector<uint64_t> before(ra.kv[0].begin(), ra.kv[0].begin() + 3);
  const uint64_t kv3 = kv_value(0, 4, 3, before);
  EXPECT_EQ(kv3, ra.kv[0][3]);
  before[1] ^= 1;
  EXPECT_NE(kv_value(0, 4, 3, before), kv3);
  EXPECT_NE(kv_value(0, 4, 2, std::span(ra.kv[0]).first(3)), kv3);
  // Fast numerics change some values (the verified mode's candidates can mismatch).
  int changed = 0;
  for (uint64_t v = 0; v < 30; ++v) changed += project_value(v, NumericsMode::kFast) != v;
  EXPECT_EQ(changed, 10);
  // A value survives the floats it is carried in.
  float row[2];
  store_value(row, ra.out[4]);
  EXPECT_EQ(load_value(row), ra.out[4]);
}

TEST(ModelCheck, CiBoundHoldsOnTheRealEngine) {
  const ModelCheckBounds bounds = ci_bounds();
  const ModelCheckResult r = run_model_check(bounds);
  std::printf("%s", format_result(bounds, r).c_str());
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r.states, 1000);
  // Every mechanism the proof speaks of happened somewhere in the exploration.
  const Coverage& c = r.coverage;
  EXPECT_GT(c.preemptions, 0);
  EXPECT_GT(c.prefix_hit_tokens, 0);
  EXPECT_GT(c.evictions, 0);
  EXPECT_GT(c.forks, 0);
  EXPECT_GT(c.block_copies, 0);
  EXPECT_GT(c.aborts, 0);
  EXPECT_GT(c.stops, 0);
  EXPECT_GT(c.chunked, 0);
  EXPECT_GT(c.rollbacks, 0);
}

// Backend faults: each makes one of the checker's checks fire (the engine itself is right).

// The last layer's attention leaves out the row's own KV entry from position 3 on: rows read
// the wrong KV while every KV entry stays right (the last layer's attention feeds only the
// logits), so only the row-value check can see it.
class DropOwnEntryOps final : public HashOps {
 public:
  using HashOps::HashOps;
  void attention_rounded(const float* q, const kernels::KvCacheLayer& cache,
                         const kernels::StepBatch& batch, int32_t n_heads, float scale,
                         void* out) override {
    HashOps::attention_rounded(q, cache, batch, n_heads, scale, out);
    if (layer_ != n_layers_) return;
    for (int32_t t = 0; t < batch.n_tokens; ++t) {
      const int32_t pos = batch.positions[t];
      if (pos < 3) continue;
      std::vector<uint64_t> kv;
      for (int32_t j = 0; j < pos; ++j) kv.push_back(kv_at(cache, batch, batch.seq_of_token[t], j));
      store_value(static_cast<float*>(out) + int64_t{t} * n_heads * cache.head_dim,
                  attention_value(layer_ - 1, kv));
    }
  }
};

// logits made from another value than the row's: rows and KV are right, the sampled tokens
// are not the reference's (the emitted-token check).
class WrongLogitsOps final : public HashOps {
 public:
  using HashOps::HashOps;
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    HashOps::matmul(x, m, w, bias, y, numerics);
    if (w.rows != kHashVocab) return;
    for (int32_t t = 0; t < m; ++t) logits_of(logit_values()[t] ^ 0x249, y + t * w.rows);
  }
};

TEST(ModelCheck, RowValueCheckFires) {
  const ModelCheckBounds bounds = ci_bounds();
  const ModelCheckResult r =
      run_model_check(bounds, std::make_unique<DropOwnEntryOps>(bounds.n_layers));
  std::printf("%s", format_result(bounds, r).c_str());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.counterexample->violation.find("logit row"), std::string::npos);
}

TEST(ModelCheck, EmittedTokenCheckFires) {
  const ModelCheckBounds bounds = ci_bounds();
  const ModelCheckResult r =
      run_model_check(bounds, std::make_unique<WrongLogitsOps>(bounds.n_layers));
  std::printf("%s", format_result(bounds, r).c_str());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.counterexample->violation.find("the reference gives"), std::string::npos);
}

}  // namespace
}  // namespace detllm::model_check
