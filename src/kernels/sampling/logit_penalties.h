// Logit penalties: presence, frequency and repetition penalties and logit_bias, applied to a
// row's logits as a step of their own before the sampler (which is unchanged). One fixed fp32
// formula per listed token with pinned rounding, shared by the host code and the CUDA kernel
// (kernels/cuda/logit_penalties.cu), so the penalised logits are the same bits on every backend
// and, since a row's entries depend only on its own sequence, whatever else is in the batch.
// Tests: tests/kernels/logit_penalties_test.cpp (CPU), tests/cuda/cuda_logit_penalties_test.cpp.
//
// Specification. A row predicts the token at position t of a sequence whose tokens are
// tokens[0 .. t): the prompt tokens [0, n_prompt) and the tokens generated so far
// [n_prompt, t) (chat: the prompt is the rendered template, special tokens included). For each
// vocabulary entry v with logit x (fp32):
//   c(v)        = occurrences of v among the generated tokens               (OpenAI's c[j])
//   seen(v)     = v occurs in the prompt or among the generated tokens     (transformers, vLLM)
//   1. x = x + bias(v)                           if logit_bias lists v
//   2. x = x > 0 ? x / r : x * r                 if seen(v) and r = repetition_penalty != 1
//   3. x = x - f * float(c(v))                   if c(v) > 0, f = frequency_penalty
//   4. x = x - p                                 if c(v) > 0, p = presence_penalty
//   (steps 3 and 4 only when f or p is non-zero)
// every operation one IEEE fp32 operation rounded to nearest even (no FMA: the product f * c
// is rounded before the subtraction). That is OpenAI's formula (mu - c * f - [c > 0] * p) in
// vLLM v1's order (logit_bias, then repetition, frequency, presence). Entries the formula does
// not touch keep their bits. Logprobs are then those of the penalised logits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sampling/sampler_math.h"  // DETLLM_HD, pinned

namespace detllm {

struct SamplingParams;

// One logit_bias entry (OpenAI: token id -> bias in [-100, 100]).
struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;
  bool operator==(const LogitBias&) const = default;
};

// One (row, token) the penalties touch: everything the formula needs, so a device applies
// it without the history. Plain struct, the same layout in host and device code.
struct LogitPenalty {
  static constexpr uint32_t kHasBias = 1;  // step 1 applies
  static constexpr uint32_t kSeen = 2;     // step 2 applies (with repetition != 1)
  int32_t row = 0;                         // logit row of the call
  int32_t token = 0;                       // column (vocabulary id)
  int32_t n_generated = 0;  // c: occurrences among the generated tokens (steps 3 and 4)
  uint32_t flags = 0;
  float bias = 0.0f;
  float repetition = 1.0f;
  float frequency = 0.0f;
  float presence = 0.0f;
};
static_assert(sizeof(LogitPenalty) == 32);

namespace penalty_math {

using sampler_math::pinned;
using sampler_math::PinnedOp;
DETLLM_HD inline float fadd(float a, float b) { return pinned<PinnedOp::kAdd>(a, b); }
DETLLM_HD inline float fsub(float a, float b) { return pinned<PinnedOp::kSub>(a, b); }
DETLLM_HD inline float fmul(float a, float b) { return pinned<PinnedOp::kMul>(a, b); }
DETLLM_HD inline float fdiv(float a, float b) { return pinned<PinnedOp::kDiv>(a, b); }

// The formula above for one listed token (steps 1-4), on the host and on the device.
DETLLM_HD inline float penalized_logit(float x, const LogitPenalty& e) {
  if (e.flags & LogitPenalty::kHasBias) x = fadd(x, e.bias);
  if ((e.flags & LogitPenalty::kSeen) && e.repetition != 1.0f) {
    x = x > 0.0f ? fdiv(x, e.repetition) : fmul(x, e.repetition);
  }
  if (e.n_generated > 0) {
    x = fsub(x, fmul(e.frequency, static_cast<float>(e.n_generated)));
    x = fsub(x, e.presence);
  }
  return x;
}

}  // namespace penalty_math

// Appends the entries of one row to `out`: one per token the formula touches, in ascending
// token order (each (row, token) once, so a device can apply them all at once). history =
// tokens[0 .. t) of the row's sequence, the first n_prompt of them the prompt. Nothing when
// params has no penalty. `scratch` is reused storage.
void build_logit_penalties(const SamplingParams& params, std::span<const int32_t> history,
                           int32_t n_prompt, int32_t row, std::vector<LogitPenalty>& out,
                           std::vector<int64_t>& scratch);

// Applies entries to logits (rows, vocab) in host memory: logits[row, token] =
// penalized_logit(...). Throws detllm::Error when an entry's row or token is out of range or
// a (row, token) is listed twice. The host default of Ops::apply_logit_penalties.
void apply_logit_penalties_host(float* logits, int32_t rows, int32_t vocab,
                                std::span<const LogitPenalty> entries);

// Checks entries against the shape (row, token in range, strictly ascending (row, token)
// within the list's runs of one row, no duplicates): what every backend checks first.
void check_logit_penalties(int32_t rows, int32_t vocab, std::span<const LogitPenalty> entries);

// The specification written the obvious way over the whole row (counts by scanning the
// history for every vocabulary entry). Slow; the tests check that build + apply gives
// identical bits.
void penalize_row_reference(std::span<float> logits, const SamplingParams& params,
                            std::span<const int32_t> history, int32_t n_prompt);

}  // namespace detllm
