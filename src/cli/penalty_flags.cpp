// The logit-penalty flags of `detllm generate` (penalty_flags.h).
#include "cli/penalty_flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace detllm::cli {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The whole of `s` as one value of T, or false.
template <typename T>
bool parse_all(std::string_view s, T& out) {
  if (s.empty()) return false;
  const char* first = s.data();
  if constexpr (std::is_floating_point_v<T>) {
    if (*first == '+') ++first;  // from_chars takes no '+'; "+1.5" is a fine bias
  }
  const auto [end, ec] = std::from_chars(first, s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::vector<LogitBias> parse_logit_bias_list(std::string_view text) {
  std::vector<LogitBias> out;
  if (trim(text).empty()) {
    throw Error("--logit-bias: give ID:BIAS pairs separated by commas, e.g. 1000:-100,28:2.5");
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view entry = trim(text.substr(start, comma - start));
    start = comma + 1;
    const size_t colon = entry.find(':');
    if (colon == std::string_view::npos) {
      throw Error(fmt::format("--logit-bias: entry '{}' is not ID:BIAS (e.g. 1000:-100)",
                              entry.substr(0, 64)));
    }
    const std::string_view id_text = trim(entry.substr(0, colon));
    const std::string_view bias_text = trim(entry.substr(colon + 1));
    int64_t id = -1;
    const bool digits = id_text.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits || !parse_all(id_text, id) || id > std::numeric_limits<int32_t>::max()) {
      throw Error(fmt::format("--logit-bias: '{}' is not a token id (a decimal integer 0…{})",
                              id_text.substr(0, 64), std::numeric_limits<int32_t>::max()));
    }
    double bias = 0.0;
    if (!parse_all(bias_text, bias) || !std::isfinite(bias)) {
      throw Error(fmt::format("--logit-bias: the bias of token {} is '{}', not a number", id,
                              bias_text.substr(0, 64)));
    }
    if (bias < -100.0 || bias > 100.0) {
      throw Error(fmt::format("--logit-bias: the bias of token {} must be in [-100, 100], got {}",
                              id, bias));
    }
    out.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
    if (out.size() > static_cast<size_t>(SamplingParams::kMaxLogitBias)) {
      throw Error(fmt::format("--logit-bias: more than {} entries", SamplingParams::kMaxLogitBias));
    }
    if (comma == text.size()) break;
  }
  std::sort(out.begin(), out.end(),
            [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].token == out[i - 1].token) {
      throw Error(fmt::format("--logit-bias: token {} is listed twice", out[i].token));
    }
  }
  return out;
}

void add_penalty_options(CLI::App& cmd, PenaltyFlags& flags) {
  cmd.add_option("--presence-penalty", flags.presence_penalty,
                 "Subtract P from the logit of every token already generated (OpenAI's\n"
                 "presence_penalty, -2..2; > 0 favours new tokens, 0 = off)")
      ->check(CLI::Range(-2.0, 2.0))
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", flags.frequency_penalty,
                 "Subtract F x (times the token was generated) from its logit (OpenAI's\n"
                 "frequency_penalty, -2..2; > 0 discourages repeats, 0 = off)")
      ->check(CLI::Range(-2.0, 2.0))
      ->capture_default_str();
  cmd.add_option("--repetition-penalty", flags.repetition_penalty,
                 "Divide a positive logit by R and multiply a negative one by R for every\n"
                 "token in the prompt or generated so far (transformers/vLLM's\n"
                 "repetition_penalty, (0, 100]; > 1 discourages repeats, 1 = off)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            double r = 0.0;
            if (parse_all(trim(v), r) && r > 0.0 &&
                r <= static_cast<double>(SamplingParams::kMaxRepetitionPenalty)) {
              return {};
            }
            return fmt::format("the repetition penalty must be in (0, {}], got {}",
                               SamplingParams::kMaxRepetitionPenalty, v);
          },
          "FLOAT in (0 - 100]"))
      ->capture_default_str();
  cmd.add_option_function<std::string>(
         "--logit-bias",
         [&flags](const std::string& text) {
           try {
             flags.logit_bias = parse_logit_bias_list(text);
           } catch (const Error& e) {
             throw CLI::ValidationError(e.what());
           }
         },
         "Add BIAS (-100..100) to the logit of token ID before sampling, for each pair:\n"
         "ID:BIAS,ID:BIAS,... (OpenAI's logit_bias; -100 bans a token, 100 forces it)")
      ->type_name("ID:BIAS,...");
  // Applied in one fixed order (bias, repetition, frequency, presence) with pinned fp32
  // rounding: kernels/sampling/logit_penalties.h.
}

void apply_penalty_flags(const PenaltyFlags& flags, SamplingParams& sampling) {
  sampling.presence_penalty = static_cast<float>(flags.presence_penalty);
  sampling.frequency_penalty = static_cast<float>(flags.frequency_penalty);
  sampling.repetition_penalty = static_cast<float>(flags.repetition_penalty);
  sampling.logit_bias = flags.logit_bias;
}

}  // namespace detllm::cli
