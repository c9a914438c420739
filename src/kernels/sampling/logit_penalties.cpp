// Logit penalties on the host: the entries of a row from its history, their application to
// host logits (the CPU backends' Ops::apply_logit_penalties), and the whole-row reference.
#include "kernels/sampling/logit_penalties.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/sampling/sampling_params.h"

namespace detllm {

void build_logit_penalties(const SamplingParams& params, std::span<const int32_t> history,
                           int32_t n_prompt, int32_t row, std::vector<LogitPenalty>& out,
                           std::vector<int64_t>& scratch) {
  if (!params.has_penalties()) return;
  check(n_prompt >= 0 && static_cast<size_t>(n_prompt) <= history.size(),
        "logit penalties: {} prompt tokens in a history of {}", n_prompt, history.size());
  const bool repetition = params.repetition_penalty != 1.0f;
  const bool generated_counts = params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  // The tokens that count, sorted: key = token * 2 + (1 if generated), so a token's prompt
  // occurrences sort before its generated ones.
  scratch.clear();
  if (repetition || generated_counts) {
    const size_t first = repetition ? 0 : static_cast<size_t>(n_prompt);
    for (size_t i = first; i < history.size(); ++i) {
      scratch.push_back(int64_t{history[i]} * 2 + (i >= static_cast<size_t>(n_prompt) ? 1 : 0));
    }
  }
  std::sort(scratch.begin(), scratch.end());

  auto entry = [&](int32_t token) {
    LogitPenalty e;
    e.row = row;
    e.token = token;
    e.repetition = params.repetition_penalty;
    e.frequency = params.frequency_penalty;
    e.presence = params.presence_penalty;
    return e;
  };
  const std::vector<LogitBias>& bias = params.logit_bias;
  size_t b = 0;
  size_t i = 0;
  while (i < scratch.size() || b < bias.size()) {
    const int32_t token_hist =
        i < scratch.size() ? static_cast<int32_t>(scratch[i] >> 1) : INT32_MAX;
    const int32_t token_bias = b < bias.size() ? bias[b].token : INT32_MAX;
    const int32_t token = std::min(token_hist, token_bias);
    LogitPenalty e = entry(token);
    if (token_bias == token) {
      e.flags |= LogitPenalty::kHasBias;
      e.bias = bias[b].bias;
      ++b;
    }
    for (; i < scratch.size() && (scratch[i] >> 1) == token; ++i) {
      e.flags |= LogitPenalty::kSeen;
      if ((scratch[i] & 1) != 0) ++e.n_generated;
    }
    if (!generated_counts) e.n_generated = 0;
    const bool touches = (e.flags & LogitPenalty::kHasBias) ||
                         (repetition && (e.flags & LogitPenalty::kSeen)) || e.n_generated > 0;
    if (touches) out.push_back(e);
  }
}

void check_logit_penalties(int32_t rows, int32_t vocab, std::span<const LogitPenalty> entries) {
  check(rows >= 0 && vocab > 0, "logit penalties: bad shape ({} rows, vocab {})", rows, vocab);
  for (size_t i = 0; i < entries.size(); ++i) {
    const LogitPenalty& e = entries[i];
    check(e.row >= 0 && e.row < rows && e.token >= 0 && e.token < vocab,
          "logit penalties: entry {} is (row {}, token {}), outside ({} rows, vocab {})", i, e.row,
          e.token, rows, vocab);
    if (i > 0) {
      const LogitPenalty& p = entries[i - 1];
      check(p.row < e.row || (p.row == e.row && p.token < e.token),
            "logit penalties: entries must be strictly ascending by (row, token); entry {} is "
            "(row {}, token {}) after (row {}, token {})",
            i, e.row, e.token, p.row, p.token);
    }
  }
}

void apply_logit_penalties_host(float* logits, int32_t rows, int32_t vocab,
                                std::span<const LogitPenalty> entries) {
  check_logit_penalties(rows, vocab, entries);
  for (const LogitPenalty& e : entries) {
    float& x = logits[static_cast<size_t>(e.row) * static_cast<size_t>(vocab) +
                      static_cast<size_t>(e.token)];
    x = penalty_math::penalized_logit(x, e);
  }
}

void penalize_row_reference(std::span<float> logits, const SamplingParams& params,
                            std::span<const int32_t> history, int32_t n_prompt) {
  for (size_t v = 0; v < logits.size(); ++v) {
    const auto token = static_cast<int32_t>(v);
    int32_t c = 0;
    bool seen = false;
    for (size_t i = 0; i < history.size(); ++i) {
      if (history[i] != token) continue;
      seen = true;
      if (i >= static_cast<size_t>(n_prompt)) ++c;
    }
    float x = logits[v];
    for (const LogitBias& b : params.logit_bias) {
      if (b.token == token) x = x + b.bias;
    }
    const float r = params.repetition_penalty;
    if (seen && r != 1.0f) x = x > 0.0f ? x / r : x * r;
    if (c > 0 && (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f)) {
      const float fc = params.frequency_penalty * static_cast<float>(c);
      x = x - fc;
      x = x - params.presence_penalty;
    }
    logits[v] = x;
  }
}

namespace kernels {

void Ops::apply_logit_penalties(float* logits, int32_t rows, int32_t vocab,
                                const LogitPenalty* entries, int32_t n) {
  check(n >= 0, "logit penalties: {} entries", n);
  const std::span<const LogitPenalty> list(entries, static_cast<size_t>(n));
  if (host_memory()) {
    apply_logit_penalties_host(logits, rows, vocab, list);
    return;
  }
  // A device backend without its own kernel: through the host, row by row.
  check_logit_penalties(rows, vocab, list);
  std::vector<float> row;
  for (size_t i = 0; i < list.size();) {
    size_t end = i;
    while (end < list.size() && list[end].row == list[i].row) ++end;
    float* dev = logits + static_cast<size_t>(list[i].row) * static_cast<size_t>(vocab);
    row.resize(static_cast<size_t>(vocab));
    download(row.data(), dev, sizeof(float) * row.size());
    for (size_t j = i; j < end; ++j) {
      float& x = row[static_cast<size_t>(list[j].token)];
      x = penalty_math::penalized_logit(x, list[j]);
    }
    upload(dev, row.data(), sizeof(float) * row.size());
    i = end;
  }
}

}  // namespace kernels
}  // namespace detllm
