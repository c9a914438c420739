// The EBNF grammar of a choice list: root ::= "first" | "second" | ..., each choice a string
// literal (", \ and control bytes escaped; other UTF-8 as is).
#pragma once

#include <string>
#include <vector>

namespace detllm::structured {

std::string choice_grammar(const std::vector<std::string>& choices);

}  // namespace detllm::structured
