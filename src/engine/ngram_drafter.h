// The n-gram prompt-lookup drafter (vLLM's `ngram` speculative method): guesses the next tokens
// of a sequence from its own earlier text, with no model. A pure function of the tokens, so a
// request's drafts — and so its schedule — depend on nothing else (docs/speculative.md).
//
// Rule. tokens x[0, n), suffix lengths [min_n, max_n], at most k drafts:
//   for each end j = n-2, n-3, …, 0 (latest first), l(j) = the length of the common suffix of
//   x[0, j] and x[0, n-1], capped at max_n. The match is the j of the largest l(j), the latest
//   such j on ties (the most recent occurrence of the longest suffix). If that l(j) >= min_n,
//   the drafts are y[j+1, j+1+k) of y = x followed by the drafts themselves: the tokens that
//   followed the occurrence and, where those reach the end of x, the match's period repeated
//   (x = … 7 8 7 8 proposes 7 8 7 8 …). Otherwise no drafts.
// j <= n-2 makes the occurrence strictly earlier than the suffix, so at least one token
// follows it. Cost: O(n · max_n) per call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace detllm::engine {

struct NgramDrafterConfig {
  int32_t min_n = 1;  // shortest suffix that may match (vLLM's prompt_lookup_min)
  int32_t max_n = 4;  // longest suffix compared (vLLM's prompt_lookup_max)
};

// k drafts for the tokens that follow `tokens` (prompt + generated), by the rule above; empty
// when no suffix of at least min_n tokens occurred before, or k <= 0.
std::vector<int32_t> propose_ngram_drafts(std::span<const int32_t> tokens,
                                          const NgramDrafterConfig& config, int32_t k);

}  // namespace detllm::engine
