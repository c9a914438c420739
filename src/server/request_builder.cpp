// OpenAI fields -> engine requests, with the checks that need the model (see request_builder.h).
#include "server/request_builder.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "engine/bad_words.h"
#include "server/api_error.h"
#include "structured/after_reasoning.h"
#include "structured/compiler.h"

namespace detllm::server {

SeedSource::SeedSource() : rng_(std::random_device{}()) {}

uint64_t SeedSource::draw() {
  std::lock_guard lk(mu_);
  return rng_() & ((uint64_t{1} << 53) - 1);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void check_model(const ServerContext& ctx, const std::string& requested) {
  if (requested.empty()) return;
  const auto& names = ctx.options.model_names;
  if (std::find(names.begin(), names.end(), requested) != names.end()) return;
  throw ApiError(404,
                 fmt::format("the model '{}' does not exist on this server; it serves '{}' "
                             "(see GET /v1/models)",
                             requested, ctx.model_name()),
                 "invalid_request_error", "model", "model_not_found");
}

void check_prompt(const ServerContext& ctx, const std::vector<int32_t>& ids,
                  const std::string& param) {
  if (ids.empty()) {
    throw_bad_request(param, "'{}' is empty: it encodes to no tokens", param);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= ctx.vocab_size) {
      throw_bad_request(param,
                        "'{}' holds token id {} (position {}), outside the vocabulary "
                        "0…{}",
                        param, ids[i], i, ctx.vocab_size - 1);
    }
  }
  const int32_t limit = ctx.options.limits.max_prompt_tokens;
  if (limit > 0 && static_cast<int64_t>(ids.size()) > limit) {
    throw_bad_request(param,
                      "'{}' has {} tokens; this server accepts at most {} "
                      "(--max-prompt-tokens)",
                      param, ids.size(), limit);
  }
  if (static_cast<int64_t>(ids.size()) > ctx.max_model_len) {
    throw ApiError(400,
                   fmt::format("'{}' has {} tokens, but this model's context is {} tokens "
                               "(prompt and output together); shorten the prompt",
                               param, ids.size(), ctx.max_model_len),
                   "invalid_request_error", param, "context_length_exceeded");
  }
}

int32_t resolve_max_tokens(const ServerContext& ctx, const GenerationFields& gen,
                           size_t longest_prompt, int32_t fallback) {
  const int64_t room = ctx.max_model_len - static_cast<int64_t>(longest_prompt);
  int64_t max_tokens = 0;
  if (gen.max_tokens) {
    max_tokens = *gen.max_tokens;
  } else if (fallback > 0) {
    max_tokens = fallback;
  } else {
    max_tokens = std::min<int64_t>(ctx.options.limits.max_tokens, room);
    if (max_tokens < 1) {
      throw ApiError(400,
                     fmt::format("the prompt has {} tokens and fills this model's context of {} "
                                 "tokens: no room is left to generate; shorten the prompt",
                                 longest_prompt, ctx.max_model_len),
                     "invalid_request_error", "messages", "context_length_exceeded");
    }
  }
  if (static_cast<int64_t>(longest_prompt) + max_tokens > ctx.max_model_len) {
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens and max_tokens is {}: together they "
                               "exceed this model's context of {} tokens; lower max_tokens to "
                               "at most {} or shorten the prompt",
                               longest_prompt, max_tokens, ctx.max_model_len, room),
                   "invalid_request_error", "max_tokens", "context_length_exceeded");
  }
  return static_cast<int32_t>(max_tokens);
}

namespace {

// The request's grammar, compiled once for all its prompts; 400 naming the field on an invalid
// or oversized grammar (structured::GrammarError says what and where).
std::shared_ptr<const structured::TokenConstraint> compile_constraint(const ServerContext& ctx,
                                                                      const GenerationFields& gen) {
  if (!gen.structured) return nullptr;
  const StructuredOutput& so = *gen.structured;
  if (!ctx.compile_grammar) {
    throw_bad_request(so.param,
                      "'{}' needs the grammar engine, and this build of detllm has none (build "
                      "with xgrammar: scripts/deps_xgrammar.sh, then scripts/build.sh)",
                      so.param);
  }
  try {
    return ctx.compile_grammar(so.spec);
  } catch (const structured::GrammarError& e) {
    throw_bad_request(so.param, "'{}' is not a valid grammar: {}", so.param, e.what());
  }
}

// The prompt ends with the reasoning's end marker and blank text after it (Qwen3's template
// with enable_thinking false): the output is no reasoning. A marker earlier in the prompt (a
// past turn's reasoning in the history) closes nothing of this output.
bool template_closed_the_reasoning(const ServerContext& ctx, std::span<const int32_t> prompt) {
  const std::optional<size_t> end =
      structured::AfterReasoning::end_of_last(prompt, ctx.reasoning_end_ids);
  if (!end) return false;
  const std::string rest =
      ctx.tokenizer->decode(prompt.subspan(*end), /*skip_special_tokens=*/false);
  return std::all_of(rest.begin(), rest.end(), [](unsigned char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
  });
}

}  // namespace

void start_grammar_after_reasoning(const ServerContext& ctx, BuiltRequests& built) {
  if (ctx.reasoning_end_ids.empty()) return;
  for (engine::Request& r : built.requests) {
    if (!r.constraint || template_closed_the_reasoning(ctx, r.prompt)) continue;
    r.constraint = std::make_shared<structured::AfterReasoning>(
        r.constraint->fork(), ctx.reasoning_end_ids, ctx.reasoning_open_ids);
  }
}

void truncate_prompt(const ServerContext& ctx, const GenerationFields& gen,
                     std::vector<int32_t>& ids) {
  if (!gen.vllm.truncate_prompt_tokens) return;
  const int32_t k = *gen.vllm.truncate_prompt_tokens == -1 ? ctx.max_model_len - 1
                                                           : *gen.vllm.truncate_prompt_tokens;
  if (static_cast<int64_t>(ids.size()) > k) ids.erase(ids.begin(), ids.end() - k);
}

BuiltRequests build_requests(ServerContext& ctx, const GenerationFields& gen,
                             const std::vector<std::vector<int32_t>>& prompts, int32_t max_tokens,
                             int32_t prompt_logprobs) {
  BuiltRequests b;
  b.model = gen.model;
  b.seed = gen.seed ? *gen.seed : ctx.seeds.draw();
  if (gen.determinism_mode && *gen.determinism_mode != ctx.mode) {
    const std::string_view want = determinism_mode_name(*gen.determinism_mode);
    throw_bad_request("determinism_mode",
                      "this server runs determinism mode '{}' and the request asks for '{}': "
                      "send it to a server started with `detllm serve --mode {}`, or drop "
                      "'determinism_mode' to accept '{}'",
                      determinism_mode_name(ctx.mode), want, want, determinism_mode_name(ctx.mode));
  }
  b.deterministic =
      gen.determinism_mode.has_value() || gen.deterministic.value_or(ctx.deterministic_by_default);
  if (gen.return_routed_experts && ctx.n_experts_used == 0) {
    throw_bad_request("return_routed_experts",
                      "'return_routed_experts': the served model is not a mixture-of-experts "
                      "model, so its tokens are routed to no experts; drop the field");
  }
  const std::shared_ptr<const structured::TokenConstraint> constraint =
      compile_constraint(ctx, gen);
  for (const auto& ids : prompts) {
    engine::Request r;
    r.constraint = constraint;
    r.prompt = ids;
    r.max_tokens = max_tokens;
    r.n = gen.n;
    r.stop = gen.stop;
    r.stop_token_ids = gen.stop_token_ids;
    for (int32_t t : r.stop_token_ids) {
      if (t >= ctx.vocab_size) {
        throw_bad_request("stop_token_ids", "stop token id {} is outside the vocabulary", t);
      }
    }
    r.ignore_eos = gen.ignore_eos;
    r.min_tokens = gen.vllm.min_tokens;
    if (r.min_tokens > max_tokens) {
      throw_bad_request("min_tokens", "'min_tokens' ({}) is more than max_tokens ({})",
                        r.min_tokens, max_tokens);
    }
    r.allowed_token_ids = gen.vllm.allowed_token_ids;
    for (int32_t t : r.allowed_token_ids) {
      if (t >= ctx.vocab_size) {
        throw_bad_request("allowed_token_ids",
                          "allowed token id {} is outside the vocabulary (0…{})", t,
                          ctx.vocab_size - 1);
      }
    }
    r.bad_words = engine::bad_word_token_ids(*ctx.tokenizer, gen.vllm.bad_words);
    r.deterministic = b.deterministic;
    r.speculation = gen.speculative;
    r.prompt_logprobs = prompt_logprobs;
    r.return_routed_experts = gen.return_routed_experts;
    r.sampling.temperature = gen.temperature;
    r.sampling.top_p = gen.top_p;
    r.sampling.top_k = gen.top_k;
    r.sampling.min_p = gen.min_p;
    r.sampling.seed = b.seed;
    r.sampling.n_logprobs = std::max(gen.logprobs, 0);
    r.sampling.presence_penalty = gen.presence_penalty;
    r.sampling.frequency_penalty = gen.frequency_penalty;
    r.sampling.repetition_penalty = gen.repetition_penalty;
    r.sampling.logit_bias = gen.logit_bias;
    for (const LogitBias& lb : gen.logit_bias) {
      if (lb.token >= ctx.vocab_size) {
        throw_bad_request("logit_bias", "'logit_bias' token id {} is outside the vocabulary (0…{})",
                          lb.token, ctx.vocab_size - 1);
      }
    }
    try {
      r.validate(ctx.vocab_size, ctx.max_model_len);
    } catch (const std::exception& e) {
      throw_bad_request("", "{}", e.what());
    }
    b.requests.push_back(std::move(r));
  }
  return b;
}

ResponseMeta make_meta(const ServerContext& ctx, std::string_view id_prefix,
                       const BuiltRequests& built) {
  static std::mt19937_64 id_rng{std::random_device{}()};
  static std::mutex id_mu;
  uint64_t r = 0;
  {
    std::lock_guard lk(id_mu);
    r = id_rng();
  }
  ResponseMeta m;
  m.id = fmt::format("{}-{:016x}", id_prefix, r);
  m.created = unix_now();
  m.model = built.model.empty() ? ctx.model_name() : built.model;
  m.fingerprint = ctx.fingerprint(built.deterministic);
  m.seed = built.seed;
  return m;
}

std::vector<std::pair<std::string, std::string>> generation_headers(const ResponseMeta& meta) {
  std::vector<std::pair<std::string, std::string>> h = {
      {"X-Detllm-Seed", std::to_string(meta.seed)},
      {"X-Detllm-Fingerprint", meta.fingerprint},
      {"X-Request-Id", meta.id}};
  if (!meta.weight_version.empty()) h.emplace_back("X-Detllm-Weight-Version", meta.weight_version);
  return h;
}

}  // namespace detllm::server
