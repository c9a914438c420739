// Small string helpers shared by the tokenizer's normalizers, pre-tokenizers and decoders.
#pragma once

#include <string>
#include <string_view>

namespace detllm {

// `text` with every non-overlapping occurrence of `from`, left to right, replaced by `to`.
// An empty `from` matches nothing (the text comes back unchanged).
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace detllm
