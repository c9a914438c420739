// A TokenConstraint (token_constraint.h) at the start of a compiled grammar: what a
// constrained request hands the engine (engine::Request::constraint). Backed by a Matcher.
#pragma once

#include <memory>

#include "structured/compiler.h"
#include "structured/token_constraint.h"

namespace detllm {
class Tokenizer;
}

namespace detllm::structured {

std::shared_ptr<const TokenConstraint> make_constraint(const CompiledGrammar& grammar);

// The ConstraintCompileFn (token_constraint.h) `detllm serve`, `detllm generate` and the Python
// API compile requests with. The compiler (and its cache of compiled grammars) is built once
// here, from the tokenizer's vocabulary with `mask_width` ids (the model's logit row), and
// shared by every call; calls may come from several threads.
ConstraintCompileFn make_constraint_compiler(const Tokenizer& tokenizer, int32_t mask_width);

}  // namespace detllm::structured
