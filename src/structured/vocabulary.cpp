#include "structured/vocabulary.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace detllm::structured {

GrammarVocabulary GrammarVocabulary::from_tokenizer(const Tokenizer& tokenizer,
                                                    int32_t mask_width,
                                                    std::vector<int32_t> stop_ids) {
  const int32_t n = tokenizer.vocab_size();
  if (mask_width == 0) mask_width = n;
  check(mask_width >= n, "grammar vocabulary: mask width {} is below the tokenizer's {} tokens",
        mask_width, n);
  if (stop_ids.empty()) {
    check(tokenizer.eos_id().has_value(),
          "grammar vocabulary: tokenizer {} has no eos token; name the stop ids", tokenizer.name());
    stop_ids.push_back(*tokenizer.eos_id());
  }
  for (int32_t id : stop_ids) {
    check(id >= 0 && id < mask_width, "grammar vocabulary: stop id {} outside [0, {})", id,
          mask_width);
  }
  GrammarVocabulary v;
  v.mask_width = mask_width;
  v.stop_ids = std::move(stop_ids);
  v.token_bytes.resize(static_cast<size_t>(mask_width));
  for (int32_t id = 0; id < n; ++id) {
    if (!tokenizer.is_special(id)) v.token_bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  }
  return v;
}

}  // namespace detllm::structured
