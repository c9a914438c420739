// The numerics fingerprint: stable for the same inputs, different when any input changes;
// and the determinism policy refuses a fast path for deterministic requests.
#include <gtest/gtest.h>

#include "core/error.h"
#include "determinism/fingerprint.h"
#include "determinism/policy.h"

namespace detllm {
namespace {

TEST(Fingerprint, StableAndSensitiveToEveryInput) {
  const FingerprintInputs base{0x1234, "cpu", "x86-64-v3", "invariant"};
  const std::string fp = numerics_fingerprint(base);
  EXPECT_EQ(fp, numerics_fingerprint(base));
  EXPECT_EQ(fp.rfind("fp_", 0), 0u);
  EXPECT_EQ(fp.size(), 3u + 16u);
  auto changed = [&](auto mutate) {
    FingerprintInputs in = base;
    mutate(in);
    return numerics_fingerprint(in) != fp;
  };
  EXPECT_TRUE(changed([](auto& i) { i.weights_hash = 0x1235; }));
  EXPECT_TRUE(changed([](auto& i) { i.backend = "cuda"; }));
  EXPECT_TRUE(changed([](auto& i) { i.backend_build = "x86-64-v4"; }));
  EXPECT_TRUE(changed([](auto& i) { i.numerics_mode = "fast"; }));
  EXPECT_TRUE(changed([](auto& i) { i.numerics_revision += 1; }));
  EXPECT_EQ(base.numerics_revision, kNumericsRevision);  // callers get this build's revision
}

TEST(DeterminismPolicy, ValidatesAndDescribes) {
  DeterminismPolicy p;
  p.validate();
  EXPECT_EQ(p.mode_for(true), NumericsMode::kInvariant);
  p.deterministic_mode = NumericsMode::kFast;
  EXPECT_THROW(p.validate(), Error);
  EXPECT_EQ(parse_numerics_mode("fast"), NumericsMode::kFast);
  EXPECT_THROW(parse_numerics_mode("quick"), Error);
  EXPECT_NE(DeterminismPolicy{}.describe().find("det=invariant"), std::string::npos);
}

}  // namespace
}  // namespace detllm
