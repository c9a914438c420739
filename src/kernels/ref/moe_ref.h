// The mixture-of-experts ops (kernels/ops.h: moe_route, moe_combine) as plain loops: the
// reference every backend's routing and combine are tested against, bit for bit
// (tests/kernels/backend_ops_test.cpp, tests/kernels/moe_route_test.cpp).
// Routing rule: the k highest logits, highest first; equal logits in ascending expert index
// (NaN ranks as -inf); weights from exp(l - max) in double (sampler_math's exp), rounded once.
#pragma once

#include <cstdint>

namespace detllm::kernels::ref {

// ops.h Ops::moe_route: k rounds of "the best expert not yet chosen, scanning from expert 0,
// replacing the best only on a strictly higher logit".
void moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k, bool renormalize,
               int32_t* experts, float* weights);

// ops.h Ops::moe_combine.
void moe_combine(const float* y, const int32_t* rows, const float* weights, int32_t n, int32_t k,
                 int32_t dim, const float* shared, const float* shared_gate, float* out);

}  // namespace detllm::kernels::ref
