// The n-gram prompt-lookup drafter (see ngram_drafter.h for the rule).
#include "engine/ngram_drafter.h"

#include <algorithm>
#include <cstddef>

namespace detllm::engine {

std::vector<int32_t> propose_ngram_drafts(std::span<const int32_t> tokens,
                                          const NgramDrafterConfig& config, int32_t k) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (k <= 0 || n < 2 || config.max_n < 1) return {};
  const int32_t max_n = config.max_n;
  int32_t best_len = 0;
  int64_t best_end = -1;
  for (int64_t j = n - 2; j >= 0; --j) {
    // Common suffix of x[0, j] and x[0, n-1], capped at max_n.
    int32_t l = 0;
    while (l < max_n && j - l >= 0 && tokens[j - l] == tokens[n - 1 - l]) ++l;
    if (l > best_len) {  // strictly longer: ties keep the later end
      best_len = l;
      best_end = j;
      if (l == max_n) break;  // nothing earlier can be longer
    }
  }
  if (best_end < 0 || best_len < std::max(config.min_n, 1)) return {};
  // y = tokens followed by the drafts: past the end of the tokens the continuation reads the
  // drafts already made, so the match's period repeats.
  std::vector<int32_t> drafts;
  drafts.reserve(static_cast<size_t>(k));
  for (int64_t i = best_end + 1; i < best_end + 1 + k; ++i) {
    drafts.push_back(i < n ? tokens[i] : drafts[static_cast<size_t>(i - n)]);
  }
  return drafts;
}

}  // namespace detllm::engine
