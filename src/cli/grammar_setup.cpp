// make_grammar_compiler (see grammar_setup.h).
#include "cli/grammar_setup.h"

#include <chrono>
#include <cstdio>

#if DETLLM_HAVE_GRAMMAR
#include "structured/compiler.h"
#include "structured/grammar_constraint.h"
#include "structured/vocabulary.h"
#endif

namespace detllm::cli {

#if DETLLM_HAVE_GRAMMAR
GrammarCompileFn make_grammar_compiler(const Tokenizer& tokenizer, int32_t mask_width) {
  const auto t0 = std::chrono::steady_clock::now();
  auto vocab = structured::GrammarVocabulary::from_tokenizer(tokenizer, mask_width);
  auto compiler = std::make_shared<const structured::GrammarCompiler>(vocab);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "[detllm] grammar engine ready (xgrammar, %d ids, %.0f ms)\n", mask_width,
               ms);
  return [compiler](const structured::GrammarSpec& spec) {
    return structured::make_constraint(compiler->compile(spec));
  };
}
#else
GrammarCompileFn make_grammar_compiler(const Tokenizer&, int32_t) { return {}; }
#endif

}  // namespace detllm::cli
