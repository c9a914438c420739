// A negative control of the model checker: this binary links an engine with one planted bug
// (DETLLM_MUTANT, a source edited at configure time by tests/CMakeLists.txt; production code
// has no hook). The checker must find it at the CI bound (with the prefix cache on, or off where
// the cache's own key checks would stop the engine before the checker's check can see the bug)
// and print the trace that reaches it.
#include <gtest/gtest.h>

#include <cstdio>

#include "verify/model_check/model_check.h"

namespace detllm::model_check {
namespace {

TEST(ModelCheckMutant, CheckerFindsThePlantedBug) {
  ModelCheckBounds bounds = ci_bounds();
  bounds.prefix_cache = DETLLM_MUTANT_PREFIX_CACHE;
  const ModelCheckResult r = run_model_check(bounds);
  std::printf("mutant %s:\n%s", DETLLM_MUTANT, format_result(bounds, r).c_str());
  ASSERT_FALSE(r.ok()) << "the checker missed the planted bug " << DETLLM_MUTANT;
  EXPECT_FALSE(r.counterexample->trace.empty());
  EXPECT_NE(r.counterexample->violation.find(DETLLM_MUTANT_FINDS), std::string::npos)
      << r.counterexample->violation;
}

}  // namespace
}  // namespace detllm::model_check
