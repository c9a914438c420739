// The FP8 linear layer, written down once: the arithmetic of y = x·Wᵀ on FP8 weights
// (DType::kF8E4M3 / kF8E4M3B128 / kF8E4M3G128, the row layout of core/fp8.h) that every
// backend computes.
// The CPU backend runs it (kernels/cpu/matmul_fp8.cpp: the same bits, threaded over output
// features); a GPU kernel reproduces it. docs/models.md, "FP8", states it with the why.
//
// Activations, per token (row-local — a row's bits never depend on the other rows of the
// batch, so the layer is batch-invariant; a per-tensor dynamic scale over the batch is not):
//   static:  s_x = the row's input_scale (the checkpoint's), when > 0;
//   dynamic: a = max_k |x[k]| (max is exact and order-free), a = min(a, act_bound) when the
//            row has a bound; s_x = a / 448 in fp32 (division, rounded once); s_x = 1 when that
//            is 0 (an all-zero row, or an amax below 448 · 2^-149).
//   q[k] = e4m3(x[k] / s_x): fp32 division, then round to nearest even, saturating at ±448
//          (core/fp8.h float_to_fp8_e4m3).
//   kF8E4M3G128 (transformers' "fp8", DeepSeek-V3's act_quant): the same rule applied to each
//          128-column group of the row on its own — group g = columns [128 g, 128 g + 128), the
//          last one partial — giving one scale s_g per (token, group); still row-local.
// Products: dec(q[k]) · dec(w[n, k]) — exact in fp32 (two 4-bit significands, exponents
// ≥ 2^-18), so an FMA and a multiply-add give the same bits.
// Sums in fp32, k ascending from 0.0f, one rounding per addition:
//   kF8E4M3:     y[n] = ((Σ_k p[k]) · s_x) · s_w[n]
//   kF8E4M3B128: P_b = Σ_{k in block b} p[k] (each from 0.0f), acc = Σ_b (P_b · s_w[n, b]) in
//                ascending b (from 0.0f), y[n] = acc · s_x
//   kF8E4M3G128: P_b as above, acc = Σ_b ((P_b · s_b) · s_w[n, b]) in ascending b (from 0.0f),
//                y[n] = acc — the order of DeepSeek's / transformers' Triton kernel
//                (`acc += dot(a, b) * a_s * b_s`), with P_b's sum fixed to k ascending
// then + bias[n] when there is one. Every multiplication and addition is one fp32 rounding
// (the build has -ffp-contract=off).
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace detllm::kernels::ref {

// The activation scale of row x (k) for a weight row with this input_scale and act_bound.
float fp8_activation_scale(const float* x, int64_t k, float input_scale, float act_bound);

// q (k) = e4m3(x / s_x).
void fp8_quantize_activation(const float* x, int64_t k, float s_x, uint8_t* q);

// q (k) and the per-group scales s (ceil(k / 128)) of row x for kF8E4M3G128: each group's
// fp8_activation_scale, then e4m3(x / s_g).
void fp8_quantize_activation_groups(const float* x, int64_t k, float input_scale,
                                    float act_bound, uint8_t* q, float* s);

// y[n] for one quantized activation row q (scale s_x) and FP8 weight row `row` of type t
// (kF8E4M3 or kF8E4M3B128), k columns: the sums above, without the bias.
float fp8_dot(DType t, const uint8_t* q, float s_x, const uint8_t* row, int64_t k);

// The same for a kF8E4M3G128 row: q quantized per group with scales s_g (ceil(k / 128)).
float fp8_dot_g128(const uint8_t* q, const float* s_g, const uint8_t* row, int64_t k);

// y (m, w.rows) = x (m, w.cols) · wᵀ (+ bias): the whole layer, plainly (w.dtype an FP8 type).
void fp8_linear(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y);

// One FP8 row from fp32 weights: per-channel (kF8E4M3) s_w = max|w| / 448 (1 when 0), codes
// e4m3(w / s_w) — what `--quantization fp8` does to a bf16/fp16/fp32 checkpoint at load.
// dst holds dtype_row_bytes(kF8E4M3, cols) bytes; input_scale 0 (dynamic), act_bound 0.
void fp8_quantize_weight_row(const float* w, int64_t cols, uint8_t* dst);

// An FP8 KV cache's stored value of v for its head's scale s: dec(e4m3(v / s)) · s (fp32
// division, E4M3 rounding, fp32 product).
float fp8_kv_round(float v, float s);

}  // namespace detllm::kernels::ref
