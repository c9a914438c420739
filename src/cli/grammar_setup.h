// The served model's grammar compiler (structured output, docs/structured_output.md): built
// once from the tokenizer's vocabulary at startup, shared by every request. Empty in a build
// without the grammar engine (xgrammar): constrained requests are then refused by name.
#pragma once

#include <cstdint>

#include "structured/token_constraint.h"

namespace detllm {
class Tokenizer;
}

namespace detllm::cli {

// mask_width: the model's vocabulary (its logit row). Prints the preprocessing time to stderr.
structured::ConstraintCompileFn make_grammar_compiler(const Tokenizer& tokenizer,
                                                     int32_t mask_width);

}  // namespace detllm::cli
