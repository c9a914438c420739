// A negative control of the model checker: this binary links an engine with one planted bug
// (DETLLM_MUTANT, a source edited at configure time by tests/CMakeLists.txt; production code
// has no hook). The checker must find it at the CI bound and print the trace that reaches it.
#include <gtest/gtest.h>

#include <cstdio>

#include "verify/model_check/model_check.h"

namespace detllm::model_check {
namespace {

TEST(ModelCheckMutant, CheckerFindsThePlantedBug) {
  const ModelCheckBounds bounds = ci_bounds();
  const ModelCheckResult r = run_model_check(bounds);
  std::printf("mutant %s:\n%s", DETLLM_MUTANT, format_result(bounds, r).c_str());
  ASSERT_FALSE(r.ok()) << "the checker missed the planted bug " << DETLLM_MUTANT;
  EXPECT_FALSE(r.counterexample->trace.empty());
  EXPECT_NE(r.counterexample->violation.find(DETLLM_MUTANT_FINDS), std::string::npos)
      << r.counterexample->violation;
}

}  // namespace
}  // namespace detllm::model_check
