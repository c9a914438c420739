// compile(spec) -> CompiledGrammar, for one vocabulary, through xgrammar (docs/
// structured_output.md says why that library). A GrammarCompiler is built once per vocabulary
// (it preprocesses every token's bytes: ~0.1-0.5 s at 128k tokens) and is safe to share between
// threads. Errors are GrammarError: the spec's kind, what is wrong and, where the library or
// the JSON parser says, where ("json_schema: not valid JSON at byte 17: ...").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "structured/grammar_spec.h"
#include "structured/vocabulary.h"

namespace detllm::structured {

class GrammarError : public Error {
 public:
  using Error::Error;
};

// Bounds on one compilation. Sizes are checked before any work; the time bound is a deadline
// for the caller: past it compile() throws and the library's work, which cannot be cancelled,
// finishes on its own thread and is dropped.
struct CompileLimits {
  size_t max_text_bytes = size_t{1} << 20;  // schema / regex / grammar / tag text
  size_t max_choices = 4096;
  size_t max_choice_bytes = size_t{1} << 20;  // all choices together
  std::chrono::milliseconds max_time{10000};
};

// A grammar compiled for one vocabulary: immutable, shared by the Matchers of every request
// that uses it (copying it copies a pointer).
class CompiledGrammar {
 public:
  GrammarSpec::Kind kind() const;
  int32_t mask_width() const;
  size_t memory_bytes() const;

  struct Impl;
  explicit CompiledGrammar(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

class GrammarCompiler {
 public:
  // `threads`: the library's threads for building a grammar's token-mask cache (the result is
  // the same for any count). `cache_bytes`: its cache of compiled grammars, keyed by the spec
  // (0: no cache).
  explicit GrammarCompiler(const GrammarVocabulary& vocabulary, int threads = 1,
                           int64_t cache_bytes = int64_t{256} << 20);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Throws GrammarError for an invalid spec or one past `limits`.
  CompiledGrammar compile(const GrammarSpec& spec, const CompileLimits& limits = {}) const;
  int32_t mask_width() const { return mask_width_; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  int32_t mask_width_ = 0;
};

}  // namespace detllm::structured
