// Reads a Hugging Face tokenizer.json (and optionally tokenizer_config.json) into a
// TokenizerSpec. Malformed JSON, missing fields and unsupported component types throw
// detllm::Error naming the file, the field and what to do.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer_spec.h"

namespace detllm {

// `config_json` may be empty (no tokenizer_config.json).
TokenizerSpec parse_tokenizer_json(std::string_view json, std::string_view config_json,
                                   const std::string& name);

}  // namespace detllm
