// GrammarVocabulary: what a grammar engine needs of a tokenizer — each token's bytes, which ids
// are special (never allowed inside the grammar's text), which ids end the output (allowed only
// where the grammar is complete), and the mask width (the model's logit row, which may be wider
// than the tokenizer's vocabulary: the extra ids are never allowed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace detllm {
class Tokenizer;
}

namespace detllm::structured {

struct GrammarVocabulary {
  std::vector<std::string> token_bytes;  // [mask_width]; "" for special and absent ids
  std::vector<int32_t> stop_ids;         // end-of-output ids (eos unless told otherwise)
  int32_t mask_width = 0;                // ids [0, mask_width): the sampling row's columns

  // From the project's tokenizer: Tokenizer::token_bytes for ordinary tokens, "" for special
  // ones; `mask_width` 0 means the tokenizer's vocab_size (else it must be >= it); `stop_ids`
  // empty means {eos_id} (detllm::Error when the tokenizer has none and none are given).
  static GrammarVocabulary from_tokenizer(const Tokenizer& tokenizer, int32_t mask_width = 0,
                                          std::vector<int32_t> stop_ids = {});
};

}  // namespace detllm::structured
