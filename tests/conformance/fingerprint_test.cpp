// The numerics fingerprint: stable for the same inputs, different when any input changes;
// and the determinism policy refuses a fast path for deterministic requests.
#include <fmt/format.h>
#include <gnu/libc-version.h>
#include <gtest/gtest.h>
#include <xxhash.h>

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

// The published fields (GET /v1/models, docs/ray.md) are exactly what is hashed: the hash of
// their "name=value;..." text is the fingerprint, and each input moves its own field only.
TEST(Fingerprint, FieldsAreWhatIsHashed) {
  const FingerprintInputs base{0x1234, "cpu", "x86-64-v3", "invariant"};
  const auto fields = fingerprint_fields(base);
  std::string canon;
  std::vector<std::string> names;
  for (const auto& [name, value] : fields) {
    canon += (canon.empty() ? "" : ";") + name + "=" + value;
    names.push_back(name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"detllm", "numerics", "weights", "backend", "build",
                                             "libc", "mode"}));
  EXPECT_EQ(fields[2].second, "0000000000001234");
  // The text every fingerprint so far was the hash of: publishing the fields moved none.
  EXPECT_EQ(canon, fmt::format("detllm={};numerics={};weights={:016x};backend={};build={};"
                               "libc={};mode={}",
                               engine_version(), kNumericsRevision, 0x1234, "cpu", "x86-64-v3",
                               gnu_get_libc_version(), "invariant"));
  EXPECT_EQ(numerics_fingerprint(base),
            fmt::format("fp_{:016x}", XXH3_64bits(canon.data(), canon.size())));
  FingerprintInputs other = base;
  other.weights_hash = 0x99;
  const auto moved = fingerprint_fields(other);
  for (size_t i = 0; i < fields.size(); ++i) {
    EXPECT_EQ(fields[i].second == moved[i].second, fields[i].first != "weights") << fields[i].first;
  }
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
