// The fused ops on the host backends equal the op sequences they stand for, bit for bit
// (tests/kernels/fused_ops_checks.h; the CUDA backend: tests/cuda/cuda_fused_ops_test.cpp).
// Run: build/tests/test_kernels --gtest_filter='FusedOps*'.
#include <gtest/gtest.h>

#include <memory>

#include "kernels/fused_ops_checks.h"

namespace detllm::kernels {
namespace {

using namespace testing;

class FusedOps : public ::testing::TestWithParam<int> {  // 0 = ref, else cpu threads
 protected:
  std::unique_ptr<Ops> ops() const {
    return GetParam() == 0 ? make_ref_ops() : make_cpu_ops(GetParam());
  }
};

TEST_P(FusedOps, AddRmsnormIsAddThenRmsnorm) { check_add_rmsnorm(*ops()); }
TEST_P(FusedOps, MatmulRoundedIsMatmulIntoItsColumns) { check_matmul_rounded(*ops()); }
TEST_P(FusedOps, QkvRopeAppendIsNormRopeAppendApart) { check_qkv_rope_append(*ops()); }
TEST_P(FusedOps, SiluMulRowsIsSiluMulOnTheHalves) { check_silu_mul_rows(*ops()); }

INSTANTIATE_TEST_SUITE_P(HostBackends, FusedOps, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return p.param == 0 ? std::string("ref")
                                               : "cpu" + std::to_string(p.param);
                         });

}  // namespace
}  // namespace detllm::kernels
