// bad_word_token_ids (see bad_words.h).
#include "engine/bad_words.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace detllm::engine {

std::vector<std::vector<int32_t>> bad_word_token_ids(const Tokenizer& tokenizer,
                                                     const std::vector<std::string>& words) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& w : words) {
    const size_t start = w.find_first_not_of(' ');
    const std::string bare = start == std::string::npos ? w : w.substr(start);
    for (const std::string& form : {bare, " " + bare}) {
      std::vector<int32_t> ids = tokenizer.encode(form, /*add_special_tokens=*/false);
      if (!ids.empty() && std::find(out.begin(), out.end(), ids) == out.end()) {
        out.push_back(std::move(ids));
      }
    }
  }
  return out;
}

}  // namespace detllm::engine
