// Private to src/structured: the xgrammar objects behind CompiledGrammar (compiler.cpp makes
// them, matcher.cpp reads them). Nothing outside this folder includes xgrammar.
#pragma once

#include <xgrammar/xgrammar.h>

#include "structured/compiler.h"

namespace detllm::structured {

struct CompiledGrammar::Impl {
  xgrammar::CompiledGrammar grammar;
  GrammarSpec::Kind kind;
  int32_t mask_width;
  std::vector<int32_t> stop_ids;
};

}  // namespace detllm::structured
