// A TokenConstraint (token_constraint.h) at the start of a compiled grammar: what a
// constrained request hands the engine (engine::Request::constraint). Backed by a Matcher.
#pragma once

#include <memory>

#include "structured/compiler.h"
#include "structured/token_constraint.h"

namespace detllm::structured {

std::shared_ptr<const TokenConstraint> make_constraint(const CompiledGrammar& grammar);

}  // namespace detllm::structured
