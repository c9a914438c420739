// vLLM's bad_words as the engine takes them (Request::bad_words): each word tokenized alone and
// after a space — the forms it takes at the start of the text and after another word — each
// distinct form once. Shared by the server and the Python API so both ban the same ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace detllm {
class Tokenizer;
}

namespace detllm::engine {

std::vector<std::vector<int32_t>> bad_word_token_ids(const Tokenizer& tokenizer,
                                                     const std::vector<std::string>& words);

}  // namespace detllm::engine
