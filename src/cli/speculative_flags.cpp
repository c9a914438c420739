// The speculative-decoding flags (speculative_flags.h).
#include "cli/speculative_flags.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/progress.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace detllm::cli {

void apply_speculative_config_json(const std::string& text, engine::SpeculativeConfig& config) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_error(
        "--speculative-config is not JSON ({}): give an object such as "
        "'{{\"method\": \"draft_model\", \"model\": \"PATH\", "
        "\"num_speculative_tokens\": 4}}'",
        e.what());
  }
  check(j.is_object(), "--speculative-config must be a JSON object");
  auto int_of = [](const nlohmann::json& v, const std::string& key) {
    check(v.is_number_integer(), "--speculative-config: '{}' must be an integer", key);
    return v.get<int32_t>();
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "method") {
      check(v.is_string(), "--speculative-config: 'method' must be a string");
      config.method = engine::parse_speculative_method(v.get<std::string>());
    } else if (key == "model") {
      check(v.is_string(), "--speculative-config: 'model' must be a path");
      config.model = v.get<std::string>();
    } else if (key == "num_speculative_tokens") {
      config.num_speculative_tokens = int_of(v, key);
    } else if (key == "prompt_lookup_min") {
      config.prompt_lookup_min = int_of(v, key);
    } else if (key == "prompt_lookup_max") {
      config.prompt_lookup_max = int_of(v, key);
    } else {
      throw_error(
          "--speculative-config: key '{}' is not supported; detllm reads method, model, "
          "num_speculative_tokens, prompt_lookup_min and prompt_lookup_max",
          key);
    }
  }
  // vLLM infers the method from a model when none is named.
  if (!j.contains("method") && !config.model.empty()) {
    config.method = engine::SpeculativeMethod::kDraftModel;
  }
}

void add_speculative_options(CLI::App& cmd, engine::SpeculativeConfig& config) {
  config.adaptive = true;  // the CLI's default (SpeculativeConfig's is off)
  cmd.add_option_function<std::string>(
         "--speculative-method",
         [&config](const std::string& name) {
           config.method = engine::parse_speculative_method(name);
         },
         "Speculative decoding: none, ngram (drafts looked up in the prompt and output) or "
         "draft_model (drafts of --speculative-model); a draft is kept only where it equals "
         "the token plain decoding draws: the same bits, fewer steps; modes fast, invariant "
         "and bi-naive")
      ->default_str("none");
  cmd.add_option_function<std::string>(
      "--speculative-model",
      [&config](const std::string& path) {
        config.model = path;
        if (config.method == engine::SpeculativeMethod::kNone) {
          config.method = engine::SpeculativeMethod::kDraftModel;
        }
      },
      "Draft model of --speculative-method draft_model (implied): a smaller model with the "
      "same tokenizer (GGUF file or Hugging Face folder), run greedily on its own KV cache");
  cmd.add_option_function<std::string>(
      "--speculative-config",
      [&config](const std::string& json) { apply_speculative_config_json(json, config); },
      "Speculative decoding as one JSON object (vLLM's form): method, model, "
      "num_speculative_tokens, prompt_lookup_min, prompt_lookup_max");
  cmd.add_option("--num-speculative-tokens", config.num_speculative_tokens,
                 "Speculative decoding: drafts per step at most (K)")
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
  cmd.add_flag("--speculative-adaptive,!--no-speculative-adaptive", config.adaptive,
               "Speculative decoding: adapt each request's draft length to its acceptance and "
               "pause drafting while it stays low (default on; changes no bit)");
}

ModelBundle load_draft_model(const engine::SpeculativeConfig& config, const Tokenizer& target,
                             const std::function<Backend()>& make_draft_backend, int n_threads) {
  if (config.method != engine::SpeculativeMethod::kDraftModel) {
    check(config.model.empty(),
          "a draft model ({}) was given but the speculative method is '{}': use "
          "--speculative-method draft_model, or give no --speculative-model",
          config.model, engine::speculative_method_name(config.method));
    return {};
  }
  check(!config.model.empty(),
        "--speculative-method draft_model needs the draft model: give --speculative-model PATH");
  Backend backend = make_draft_backend();
  Progress progress("loading draft model");
  ModelBundle d = open_model_bundle(config.model, n_threads,
                                    [&](size_t done, size_t t) { progress.update(done, t); });
  install_backend(d, backend);
  progress.finish(d.model->name);
  const Tokenizer& draft = *d.tokenizer;
  check(draft.vocab_size() == target.vocab_size(),
        "the draft model {} has a vocabulary of {} tokens, the target's has {}: a draft model "
        "must share the target's tokenizer",
        config.model, draft.vocab_size(), target.vocab_size());
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    check(draft.id_to_token(id) == target.id_to_token(id),
          "the draft model {} has another vocabulary: token {} is '{}' there, '{}' in the "
          "target's; a draft model must share the target's tokenizer",
          config.model, id, draft.id_to_token(id), target.id_to_token(id));
  }
  return d;
}

}  // namespace detllm::cli
