// detllm bench workloads (workload.h): request lengths, prompt ids, deterministic shares and
// Poisson arrivals, all from mt19937_64 (whose output the standard fixes) with our own bounded
// and uniform draws, so the same seed gives the same requests everywhere.
#include "bench/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace detllm::bench {
namespace {

// Unbiased draw in [0, bound).
uint64_t draw_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % bound;
}

int32_t draw_between(std::mt19937_64& rng, int32_t lo, int32_t hi) {  // [lo, hi]
  return lo + static_cast<int32_t>(draw_below(rng, static_cast<uint64_t>(hi - lo) + 1));
}

// Uniform in [0, 1) with 53 random bits.
double draw_unit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Separate streams per purpose, so e.g. the arrivals do not shift when the lengths change.
uint64_t stream_seed(uint64_t seed, uint64_t purpose) {
  return seed * 0x9E3779B97F4A7C15ull + purpose * 0xD1B54A32D192ED03ull + 1;
}
constexpr uint64_t kStreamLengths = 1, kStreamTokens = 2, kStreamShare = 3, kStreamArrivals = 4;

std::vector<int32_t> random_ids(std::mt19937_64& rng, int32_t n, int32_t vocab_size) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& t : ids)
    t = static_cast<int32_t>(draw_below(rng, static_cast<uint64_t>(vocab_size)));
  return ids;
}

}  // namespace

std::string_view workload_kind_name(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kFixed:
      return "fixed";
    case WorkloadKind::kLong:
      return "long";
    case WorkloadKind::kShareGpt:
      return "sharegpt";
    case WorkloadKind::kFile:
      return "file";
  }
  return "?";
}

WorkloadKind parse_workload_kind(std::string_view name) {
  for (WorkloadKind k :
       {WorkloadKind::kFixed, WorkloadKind::kLong, WorkloadKind::kShareGpt, WorkloadKind::kFile}) {
    if (workload_kind_name(k) == name) return k;
  }
  throw_error("unknown workload '{}' (valid: sharegpt, fixed, long, file)", name);
}

int64_t Workload::n_prompt_tokens() const {
  int64_t n = 0;
  for (const BenchRequest& r : requests) n += static_cast<int64_t>(r.prompt.size());
  return n;
}

int64_t Workload::n_output_tokens() const {
  int64_t n = 0;
  for (const BenchRequest& r : requests) n += r.output_len;
  return n;
}

int32_t Workload::max_request_tokens() const {
  int32_t m = 0;
  for (const BenchRequest& r : requests) {
    m = std::max(m, static_cast<int32_t>(r.prompt.size()) + r.output_len);
  }
  return m;
}

void seeded_shuffle(std::vector<size_t>& v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[draw_below(rng, i)]);
}

std::vector<LengthPair> fixed_lengths(int32_t n, int32_t input, int32_t output) {
  check(n >= 1, "the workload needs at least one request (--n)");
  check(input >= 1 && output >= 1, "fixed workload: --input-len and --output-len must be >= 1");
  return std::vector<LengthPair>(static_cast<size_t>(n), LengthPair{input, output});
}

std::vector<LengthPair> long_lengths(int32_t n, uint64_t seed) {
  check(n >= 1, "the workload needs at least one request (--n)");
  std::mt19937_64 rng(stream_seed(seed, kStreamLengths));
  std::vector<LengthPair> out(static_cast<size_t>(n));
  for (LengthPair& p : out) {
    p.input = draw_between(rng, kLongInputMin, kLongInputMax);
    p.output = draw_between(rng, kLongOutputMin, kLongOutputMax);
  }
  return out;
}

Workload random_token_workload(WorkloadKind kind, const std::vector<LengthPair>& lengths,
                               int32_t vocab_size, int32_t max_context, uint64_t seed) {
  check(vocab_size >= 1, "random_token_workload: empty vocabulary");
  Workload w;
  w.name = std::string(workload_kind_name(kind));
  w.vocab_size = vocab_size;
  w.seed = seed;
  std::mt19937_64 rng(stream_seed(seed, kStreamTokens));
  for (const LengthPair& p : lengths) {
    check(p.input + p.output <= max_context,
          "{} workload: a request of {} prompt + {} output tokens does not fit the model's "
          "context of {} tokens: {}",
          w.name, p.input, p.output, max_context,
          kind == WorkloadKind::kLong ? "use a model with a longer context (the long workload "
                                        "needs 8256 tokens)"
                                      : "lower --input-len / --output-len");
    w.requests.push_back({random_ids(rng, p.input, vocab_size), p.output});
  }
  return w;
}

Workload synthetic_workload(const WorkloadOptions& o, int32_t vocab_size, int32_t max_context) {
  check(o.kind == WorkloadKind::kFixed || o.kind == WorkloadKind::kLong,
        "synthetic_workload: {} is not made from options alone", workload_kind_name(o.kind));
  Workload w;
  if (o.kind == WorkloadKind::kFixed) {
    w = random_token_workload(o.kind, fixed_lengths(o.n, o.input_len, o.output_len), vocab_size,
                              max_context, o.seed);
    w.description = fmt::format(
        "fixed: {} requests, {} prompt tokens (random ids, seed {}), {} "
        "output tokens each",
        o.n, o.input_len, o.seed, o.output_len);
  } else {
    w = random_token_workload(o.kind, long_lengths(o.n, o.seed), vocab_size, max_context, o.seed);
    w.description = fmt::format(
        "long: {} requests, prompts uniform in {}…{} tokens (random ids), outputs uniform in "
        "{}…{} tokens, seed {}",
        o.n, kLongInputMin, kLongInputMax, kLongOutputMin, kLongOutputMax, o.seed);
  }
  return w;
}

Workload sharegpt_workload(const ShareGptFile& file, const std::string& path,
                           const Tokenizer* counter, const std::string& counter_name,
                           bool prompt_from_text, const WorkloadOptions& o, int32_t vocab_size,
                           int32_t max_context) {
  check(!prompt_from_text || counter != nullptr,
        "sharegpt_workload: prompts from text need a tokenizer");
  check(o.n >= 1, "the workload needs at least one request (--n)");
  std::vector<size_t> order(file.pairs.size());
  std::iota(order.begin(), order.end(), 0);
  seeded_shuffle(order, o.seed);
  auto count = [&](const std::string& text, std::vector<int32_t>* ids) -> int32_t {
    if (counter == nullptr) return static_cast<int32_t>((text.size() + 3) / 4);
    *ids = counter->encode(text);
    return static_cast<int32_t>(ids->size());
  };
  const int32_t max_total = std::min<int32_t>(2048, max_context);
  std::mt19937_64 rng(stream_seed(o.seed, kStreamTokens));
  Workload w;
  w.name = "sharegpt";
  w.vocab_size = vocab_size;
  w.seed = o.seed;
  w.counted_with = counter ? counter_name : std::string("ceil(bytes / 4)");
  size_t n_seen = 0, n_rejected = 0, n_bad_text = 0, n_capped = 0;
  for (size_t idx : order) {
    if (static_cast<int32_t>(w.requests.size()) == o.n) break;
    ++n_seen;
    std::vector<int32_t> p, c;
    int32_t np = 0, nc = 0;
    try {
      np = count(file.pairs[idx].prompt, &p);
      nc = count(file.pairs[idx].completion, &c);
    } catch (const Error&) {
      ++n_bad_text;  // not valid UTF-8 for the tokenizer
      continue;
    }
    if (np < 4 || nc < 4 || np > 1024 || np + nc > max_total) {
      ++n_rejected;
      continue;
    }
    BenchRequest r;
    r.prompt = prompt_from_text ? std::move(p) : random_ids(rng, np, vocab_size);
    r.output_len = o.max_output > 0 ? std::min(nc, o.max_output) : nc;
    n_capped += r.output_len < nc;
    w.requests.push_back(std::move(r));
  }
  check(static_cast<int32_t>(w.requests.size()) == o.n,
        "only {} ShareGPT conversations pass the filter; ask for fewer with --n",
        w.requests.size());
  w.description = fmt::format(
      "sharegpt: {} requests from {} ({} entries{}), seeded order (seed {}): {} looked at, {} "
      "outside vLLM's length filter, {} not UTF-8; lengths counted with {}; prompts {}; {} "
      "outputs capped at {}",
      o.n, path, file.n_entries, file.truncated ? ", file truncated: complete entries only" : "",
      o.seed, n_seen, n_rejected, n_bad_text, counter ? counter_name : "ceil(bytes / 4)",
      prompt_from_text ? "tokenized text" : "random ids of those lengths", n_capped,
      o.max_output > 0 ? std::to_string(o.max_output) : std::string("(no cap)"));
  return w;
}

std::vector<bool> deterministic_mask(int32_t n, double percent, uint64_t seed) {
  check(percent >= 0.0 && percent <= 100.0,
        "a deterministic share is a percentage in 0…100, not {}", percent);
  const auto k = static_cast<size_t>(std::llround(static_cast<double>(n) * percent / 100.0));
  std::vector<size_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  seeded_shuffle(order, stream_seed(seed, kStreamShare));
  std::vector<bool> mask(static_cast<size_t>(n), false);
  for (size_t i = 0; i < k; ++i) mask[order[i]] = true;
  return mask;
}

std::vector<double> poisson_arrivals(int32_t n, double rate, uint64_t seed) {
  check(rate > 0.0 && std::isfinite(rate), "an arrival rate must be > 0 requests/s, not {}", rate);
  std::mt19937_64 rng(stream_seed(seed, kStreamArrivals));
  std::vector<double> t(static_cast<size_t>(n));
  double now = 0.0;
  for (double& x : t) {
    now += -std::log1p(-draw_unit(rng)) / rate;
    x = now;
  }
  return t;
}

}  // namespace detllm::bench
