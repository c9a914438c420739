// make_grammar_compiler (see grammar_setup.h).
#include "cli/grammar_setup.h"

#include <chrono>
#include <cstdio>

#if DETLLM_HAVE_GRAMMAR
#include "structured/grammar_constraint.h"
#endif

namespace detllm::cli {

structured::ConstraintCompileFn make_grammar_compiler([[maybe_unused]] const Tokenizer& tokenizer,
                                       [[maybe_unused]] int32_t mask_width) {
#if DETLLM_HAVE_GRAMMAR
  const auto t0 = std::chrono::steady_clock::now();
  structured::ConstraintCompileFn fn = structured::make_constraint_compiler(tokenizer, mask_width);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "[detllm] grammar engine ready (xgrammar, %d ids, %.0f ms)\n", mask_width,
               ms);
  return fn;
#else
  return {};
#endif
}

}  // namespace detllm::cli
