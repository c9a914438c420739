// The speculative-decoding flags (speculative_flags.h).
#include "cli/speculative_flags.h"

#include <string>

namespace detllm::cli {

void add_speculative_options(CLI::App& cmd, engine::SpeculativeConfig& config) {
  cmd.add_option_function<std::string>(
         "--speculative-method",
         [&config](const std::string& name) {
           config.method = engine::parse_speculative_method(name);
         },
         "Speculative decoding: none, or ngram (drafts looked up in the prompt and output, kept "
         "only where they equal the token plain decoding draws: the same bits, fewer steps; "
         "modes fast, invariant and bi-naive)")
      ->default_str("none");
  cmd.add_option("--num-speculative-tokens", config.num_speculative_tokens,
                 "--speculative-method ngram: drafts per step at most")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd.add_option("--prompt-lookup-min", config.prompt_lookup_min,
                 "--speculative-method ngram: shortest suffix that may match (as vLLM: 5 when "
                 "neither bound is given, else the other bound's value)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--prompt-lookup-max", config.prompt_lookup_max,
                 "--speculative-method ngram: longest suffix compared (as vLLM: 5 when neither "
                 "bound is given, else the other bound's value)")
      ->check(CLI::Range(1, 1024));
}

}  // namespace detllm::cli
