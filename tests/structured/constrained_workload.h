// The constrained workload of the conformance tests (constrained_conformance_test.cpp on the
// CPU, tests/cuda/cuda_constrained_test.cpp on the GPU): a vocabulary for the tiny synthetic
// models' 512 ids, one grammar compiler for it, and grammars of every kind (JSON schemas, a
// regex, a choice, json_object, and an EBNF grammar that runs into a dead end) attached to the
// sampled requests of a random workload.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "structured/compiler.h"
#include "structured/grammar_constraint.h"
#include "verify/conformance.h"

namespace detllm::conformance {

using structured::GrammarSpec;
using structured::TokenConstraint;

inline constexpr int32_t kStop = 0;  // the tiny vocabulary's end-of-output id

// A vocabulary for the tiny models' 512 ids: id 0 ends the output, 1…95 are the printable
// ASCII characters, the rest multi-character pieces (JSON punctuation, words, digit pairs) and
// empty (absent) ids. Nothing in it spells a byte above 0x7e.
inline structured::GrammarVocabulary tiny_vocabulary(int32_t width) {
  structured::GrammarVocabulary v;
  v.mask_width = width;
  v.token_bytes.assign(static_cast<size_t>(width), "");
  for (int c = 0x20; c < 0x7f; ++c) {
    v.token_bytes[static_cast<size_t>(c - 0x1f)] = std::string(1, static_cast<char>(c));
  }
  const char* pieces[] = {"{\"", "\":", "\",", "\"}", "\": \"", "true", "false", "null", "name",
                          "age", "ok", "yes", "no", "red", "green", "blue", ", \"", "]}", "[{",
                          "the", "and", "  ", "\n", "\n  ", "id", "items", "color", "e+"};
  size_t id = 96;
  for (const char* p : pieces) v.token_bytes[id++] = p;
  for (int a = 0; a < 10 && id < 400; ++a)
    for (int b = 0; b < 10 && id < 400; ++b) v.token_bytes[id++] = std::to_string(a * 10 + b);
  v.stop_ids = {kStop};
  return v;
}

inline const structured::GrammarCompiler& tiny_compiler() {
  static const structured::GrammarCompiler compiler(tiny_vocabulary(512));
  return compiler;
}

inline std::vector<GrammarSpec> grammar_specs() {
  return {
      GrammarSpec::json_schema(R"({"type":"object","properties":{"name":{"type":"string",
        "maxLength":6},"age":{"type":"integer","minimum":0,"maximum":99},"ok":{"type":"boolean"}},
        "required":["name","age","ok"],"additionalProperties":false})"),
      GrammarSpec::regex("(red|green|blue)( and (red|green|blue)){0,3}"),
      GrammarSpec::choice({"yes", "no", "null and true"}),
      GrammarSpec::json_schema(R"({"type":"array","items":{"enum":["red","green","blue"]},
        "maxItems":4})"),
      GrammarSpec::json_object(),
      // "ok" then a character no token spells: a dead end after two ids.
      GrammarSpec::ebnf("root ::= \"ok\" \"\u00e9\""),
  };
}

// Constraints on 3 of every 4 sampled requests, the stop id as a stop token on most of them
// (the others go on past the grammar's end: their matcher terminates, then nothing is allowed).
inline void add_constraints(std::vector<engine::Request>& reqs,
                     const std::function<std::shared_ptr<const TokenConstraint>(
                         const structured::CompiledGrammar&)>& make =
                         structured::make_constraint) {
  const auto specs = grammar_specs();
  size_t k = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].max_tokens == 0 || i % 4 == 3) continue;
    reqs[i].constraint = make(tiny_compiler().compile(specs[k % specs.size()]));
    if (k % 3 != 2) reqs[i].stop_token_ids = {kStop};
    reqs[i].max_tokens = std::max(reqs[i].max_tokens, 30);
    ++k;
  }
}

// The constrained workload of the tests: 10 random requests over the tiny vocabulary (some
// scoring, some with n = 2), grammars on most sampled ones (add_constraints).
inline std::vector<engine::Request> constrained_requests(int32_t vocab_size) {
  WorkloadSpec s;
  s.n_requests = 10;
  s.vocab_size = vocab_size;
  s.max_prompt = 30;
  s.max_new_tokens = 30;
  s.scoring_share = 0.1;
  std::vector<engine::Request> reqs = random_workload(9, s);
  add_constraints(reqs);
  return reqs;
}

}  // namespace detllm::conformance
