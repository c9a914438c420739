// Model benchmark (a program, not a test): prefill/decode tokens/s of the forward at 1 and 2
// threads, their speedup, the engine's cost over a bare decode step, decode vs the memory roofline.
// Run: build/benchmarks/model_bench [--model PATH] [--reps 3] [--quick]  (--help; docs/perf.md)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/ops.h"
#include "kernels/sampling/sampler.h"
#include "model/bundle.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/solo_runner.h"

namespace {

using namespace detllm;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs fn once to warm up, then `reps` times; returns the median seconds of one call.
double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  return median(t);
}

// Progress lines on stderr: what is being measured, with elapsed time since the start.
class Log {
 public:
  void line(const std::string& what) const {
    fmt::print(stderr, "[model_bench {:6.1f}s] {}\n", seconds_since(start_), what);
    std::fflush(stderr);
  }

 private:
  Clock::time_point start_ = Clock::now();
};

struct Options {
  std::string model;  // "" = the default model
  int reps = 3;
  std::vector<int> threads = {1, 2};
  int prompt_len = 128;         // context before decoding
  int decode_steps = 64;        // single-sequence decode steps
  int batch_decode_steps = 16;  // steps per repetition of batched decode
  std::vector<int> prefill_lens = {128, 512};
  std::vector<int> batches = {8, 32};
  kernels::CpuActivations activations = kernels::CpuActivations::kF32;
};

std::vector<int> parse_int_list(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    check(!item.empty() && *end == '\0' && v >= 1 && v <= 1 << 20,
          "'{}' is not a list of positive integers (e.g. 1,2)", s);
    out.push_back(static_cast<int>(v));
    pos = comma + 1;
  }
  return out;
}

void print_usage() {
  fmt::print(
      "usage: model_bench [--model PATH] [--reps N] [--threads 1,2] [--prefill 128,512]\n"
      "                   [--batches 8,32] [--decode-steps 64] [--batch-decode-steps 16]\n"
      "                   [--activations f32|q8] [--quick]\n"
      "Prefill and decode tokens/s of the forward pass at each thread count (median of N\n"
      "repetitions after a warm-up), 2-vs-1 thread speedups, engine overhead, and decode time\n"
      "against a memory-bandwidth roofline. Figures on stdout, progress on stderr.\n"
      "--activations q8: the CPU backend's q8-activation numerics class (kernels/ref/\n"
      "q8_act_ref.h: activations rounded to int8 per 32-block before Q4_0/Q4_1/Q8_0 matmuls,\n"
      "as llama.cpp does); f32 (the default): no activation rounding.\n");
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      check(i + 1 < argc, "{} needs a value (see --help)", a);
      return argv[++i];
    };
    auto one_int = [&]() { return parse_int_list(value()).at(0); };
    if (a == "--help" || a == "-h") {
      print_usage();
      std::exit(0);
    } else if (a == "--model") {
      o.model = value();
    } else if (a == "--reps") {
      o.reps = one_int();
    } else if (a == "--threads") {
      o.threads = parse_int_list(value());
    } else if (a == "--prefill") {
      o.prefill_lens = parse_int_list(value());
    } else if (a == "--batches") {
      o.batches = parse_int_list(value());
    } else if (a == "--decode-steps") {
      o.decode_steps = one_int();
    } else if (a == "--batch-decode-steps") {
      o.batch_decode_steps = one_int();
    } else if (a == "--activations") {
      const std::string v = value();
      check(v == "f32" || v == "q8", "--activations must be f32 or q8, got '{}'", v);
      o.activations = v == "q8" ? kernels::CpuActivations::kQ8 : kernels::CpuActivations::kF32;
    } else if (a == "--quick") {
      o.reps = 1;
      o.decode_steps = 16;
      o.batch_decode_steps = 4;
    } else {
      throw_error("unknown option '{}' (see --help)", a);
    }
  }
  check(o.decode_steps >= 2, "--decode-steps must be at least 2");
  return o;
}

// Memory bandwidth over 512 MiB buffers (far beyond any cache), split over n_threads; the best
// of several passes. copy: memcpy, GB/s counting bytes read + bytes written. read: an integer
// sum of every 64-bit word (vectorized by the compiler), bytes read per second — the traffic
// pattern of a decode step, which streams weights and writes almost nothing.
struct Bandwidth {
  double copy_gbs = 0;
  double read_gbs = 0;
};

Bandwidth measure_bandwidth(int n_threads) {
  const size_t mib = 512, bytes = mib << 20;
  std::vector<uint64_t> src(bytes / 8, 1), dst(bytes / 8, 2);  // touched: no page faults timed
  ThreadPool pool(n_threads);
  std::vector<uint64_t> sums(mib);
  auto best_seconds = [](const std::function<void()>& fn) {
    fn();
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = Clock::now();
      fn();
      best = std::min(best, seconds_since(t0));
    }
    return best;
  };
  constexpr size_t kWordsPerMib = (size_t{1} << 20) / 8;
  const double copy_s = best_seconds([&] {
    pool.parallel_for(static_cast<int64_t>(mib), [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b * kWordsPerMib, src.data() + b * kWordsPerMib,
                  static_cast<size_t>(e - b) << 20);
    });
  });
  const double read_s = best_seconds([&] {
    pool.parallel_for(static_cast<int64_t>(mib), [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m) {
        const uint64_t* p = src.data() + m * kWordsPerMib;
        uint64_t acc = 0;
        for (size_t i = 0; i < kWordsPerMib; ++i) acc += p[i];
        sums[m] = acc;  // kept, so the loop is not optimized away
      }
    });
  });
  check(std::accumulate(sums.begin(), sums.end(), uint64_t{0}) == bytes / 8,
        "bandwidth probe: wrong sum");
  return {2.0 * static_cast<double>(bytes) / copy_s / 1e9,
          static_cast<double>(bytes) / read_s / 1e9};
}

// Bytes a decode step must read from memory: every fp32 weight matrix once (the embedding
// table only for the looked-up rows, counted as zero here; lm_head in full, tied or not), the
// norms, and K and V of every cached position attended to, in every layer.
struct StepBytes {
  double weights = 0;
  double kv_per_position = 0;
};

StepBytes decode_step_bytes(const ModelConfig& c, const ModelWeights& w) {
  StepBytes b;
  auto add = [&](const Linear& l) {
    b.weights += static_cast<double>(l.w.n_bytes()) + 4.0 * l.bias.size();
  };
  for (const LayerWeights& l : w.layers) {
    for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) add(*m);
    b.weights += 4.0 * (l.attn_norm.size() + l.ffn_norm.size() + l.q_norm.size() + l.k_norm.size());
  }
  b.weights += static_cast<double>(w.lm_head_tensor().n_bytes()) + 4.0 * w.out_norm.size();
  b.kv_per_position = 4.0 * 2 * c.n_layers * c.kv_dim();
  return b;
}

// The matrices' dtypes as held in memory, with their counts: "q4_1 x 210, q8_0 x 1" (the
// header says what the kernels read; a GGUF quant model held as fp32 would show here).
std::string weight_dtypes(const ModelWeights& w) {
  std::map<std::string, int> n;
  for (const LayerWeights& l : w.layers) {
    for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      ++n[std::string(dtype_name(m->w.dtype))];
  }
  ++n[std::string(dtype_name(w.lm_head_tensor().dtype))];
  std::string s;
  for (const auto& [name, count] : n) s += fmt::format("{}{} x {}", s.empty() ? "" : ", ", name, count);
  return s;
}

// 1-minute load average and CPU count: other work on the machine skews every figure.
std::string machine_load() {
  double load = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return fmt::format("load average {:.2f} on {} CPUs", load, std::thread::hardware_concurrency());
}

// Token ids for timing: a fixed pseudo-random sequence (the forward's cost does not depend on
// which tokens they are).
std::vector<int32_t> bench_tokens(int n, int32_t vocab, uint32_t salt) {
  std::vector<int32_t> t(n);
  uint64_t x = 0x9E3779B97F4A7C15ull ^ salt;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t[i] = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  return t;
}

// B sequences decoded together, one token per sequence per step, with a hand-built StepBatch
// (no scheduler, no sampler): the forward alone. All B share one `context`-token prompt whose KV
// is computed once (as when a prefix cache serves a common prompt); decode positions go to
// private blocks. Block tables, B = 2, context 32, block 16 (prompt blocks 0-1 shared):
//
//   seq 0: [0, 1, 2, 3, …]    positions 32… of seq s live in blocks 2 + s * n_private …
//   seq 1: [0, 1, 2 + n_private, …]
class BatchDecoder {
 public:
  static constexpr int kBlock = 16;

  BatchDecoder(const LlamaModel& model, int n_seqs, int context, int max_steps)
      : model_(model),
        n_seqs_(n_seqs),
        context_(context),
        n_shared_((context + kBlock - 1) / kBlock),
        n_private_((context + max_steps + kBlock - 1) / kBlock - context / kBlock),
        max_blocks_(context / kBlock + n_private_),
        kv_(model.ops(), model.config(), n_shared_ + n_seqs * n_private_, kBlock) {
    tables_.resize(static_cast<size_t>(n_seqs) * max_blocks_);
    for (int s = 0; s < n_seqs; ++s) {
      int32_t* row = tables_.data() + static_cast<size_t>(s) * max_blocks_;
      for (int j = 0; j < context / kBlock; ++j) row[j] = j;  // full prompt blocks: shared
      for (int j = 0; j < n_private_; ++j)
        row[context / kBlock + j] = n_shared_ + s * n_private_ + j;
    }
    // A partial last prompt block must be private: copy it after the prefill (below).
    const auto prompt = bench_tokens(context, model.config().vocab_size, 1);
    std::vector<int32_t> pos(context), seq(context, 0), slots(context);
    for (int i = 0; i < context; ++i) {
      pos[i] = i;
      slots[i] = slot(0, i);
    }
    const int32_t last[] = {context - 1};
    std::vector<float> logits;
    model_.forward(prompt, view(context, pos, seq, slots, 1), last, kv_, logits);
    if (context % kBlock != 0) {
      for (int s = 1; s < n_seqs; ++s) kv_.copy_block(block_of(0, context), block_of(s, context));
    }
  }

  // `steps` decode steps from position `context`: every sequence appends one token a step.
  // Rerunning overwrites the same positions, so the work is identical each time.
  void decode(int steps) {
    const int B = n_seqs_;
    const int32_t vocab = model_.config().vocab_size;
    std::vector<int32_t> tokens = bench_tokens(B, vocab, 7);
    std::vector<int32_t> pos(B), seq(B), slots(B), rows(B);
    std::iota(seq.begin(), seq.end(), 0);
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<float> logits;
    for (int step = 0; step < steps; ++step) {
      for (int s = 0; s < B; ++s) {
        pos[s] = context_ + step;
        slots[s] = slot(s, pos[s]);
      }
      model_.forward(tokens, view(B, pos, seq, slots, B), rows, kv_, logits);
      // Feed back the argmax so consecutive steps depend on each other, as in real decode.
      for (int s = 0; s < B; ++s) {
        const float* row = logits.data() + static_cast<size_t>(s) * vocab;
        tokens[s] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      }
    }
  }

 private:
  int32_t block_of(int s, int p) const {
    return tables_[static_cast<size_t>(s) * max_blocks_ + p / kBlock];
  }
  int32_t slot(int s, int p) const { return block_of(s, p) * kBlock + p % kBlock; }
  kernels::StepBatch view(int n, const std::vector<int32_t>& pos, const std::vector<int32_t>& seq,
                          const std::vector<int32_t>& slots, int n_seqs) const {
    kernels::StepBatch b;
    b.n_tokens = n;
    b.positions = pos.data();
    b.seq_of_token = seq.data();
    b.slots = slots.data();
    b.n_seqs = n_seqs;
    b.max_blocks = max_blocks_;
    b.block_tables = tables_.data();
    return b;
  }

  const LlamaModel& model_;
  int n_seqs_;
  int context_;
  int n_shared_;   // blocks holding the prompt (the last one copied per sequence if partial)
  int n_private_;  // blocks per sequence for its decode positions
  int max_blocks_;
  KvStorage kv_;
  std::vector<int32_t> tables_;  // (n_seqs, max_blocks)
};

// The same batched decode through the serving engine (scheduler, runner, greedy sampler, stop
// rules): B requests with the same `context`-token prompt. A first request computes the prompt
// and leaves it in the prefix cache, so the B requests only compute their last partial block
// before decoding. Returns the seconds per decode step, once every request has its first token.
double engine_decode_step_seconds(const LlamaModel& model, int n_seqs, int context, int steps) {
  engine::EngineConfig cfg;
  cfg.scheduler.max_tokens_per_step = std::max(2048, n_seqs * BatchDecoder::kBlock + context);
  cfg.scheduler.max_seqs = std::max(256, n_seqs);
  cfg.kv_cache_tokens = (n_seqs + 1) * (context + steps + 1 + BatchDecoder::kBlock);
  engine::Engine eng(model, cfg);
  auto request = [&](int max_tokens) {
    engine::Request r;
    r.prompt = bench_tokens(context, model.config().vocab_size, 1);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.deterministic = true;
    r.sampling.temperature = 0.0f;
    return r;
  };
  eng.add_request(request(1), engine::RequestCallbacks{});
  eng.run_until_idle();  // the prompt's full blocks are now cached
  for (int s = 0; s < n_seqs; ++s) eng.add_request(request(steps + 1), engine::RequestCallbacks{});
  // Until every request has its first token (one step when the budget allows).
  while (eng.stats().n_generated_tokens < 1 + n_seqs) check(eng.step(), "engine stopped early");
  const auto t0 = Clock::now();
  int n_steps = 0;
  while (eng.step()) ++n_steps;
  check(n_steps == steps, "expected {} decode steps, the engine ran {}", steps, n_steps);
  return seconds_since(t0) / steps;
}

struct Row {
  std::string what;
  int threads = 0;
  double tokens = 0;   // tokens per repetition
  double seconds = 0;  // median seconds per repetition
  double tok_s() const { return tokens / seconds; }
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_options(argc, argv);
    Log log;
    log.line("loading the model");
    const std::string load_start = machine_load();
    ModelBundle b = open_model_bundle(o.model, o.threads.front());
    const ModelConfig& c = b.model->config;
    log.line(fmt::format("loaded {}: {} layers, dim {}, ffn {}, heads {}/{}, vocab {}",
                         b.model->name, c.n_layers, c.dim, c.ffn_dim, c.n_heads, c.n_kv_heads,
                         c.vocab_size));
    const int max_prefill = *std::max_element(o.prefill_lens.begin(), o.prefill_lens.end());

    std::vector<Row> rows;
    std::vector<float> sample_logits;  // a real logits row, for timing the sampler
    std::map<int, Bandwidth> bw;
    for (int t : o.threads) {
      auto ops = kernels::make_cpu_ops(t, o.activations);
      LlamaModel model(c, b.model->weights, *ops);
      log.line(fmt::format("threads {}: memory bandwidth (copy, read)", t));
      bw[t] = measure_bandwidth(t);

      SoloRunner solo(model, max_prefill);
      for (int n : o.prefill_lens) {
        log.line(fmt::format("threads {}: prefill {} tokens x {} reps", t, n, o.reps));
        const auto prompt = bench_tokens(n, c.vocab_size, 1);
        const double s = median_seconds(o.reps, [&] {
          solo.reset();
          sample_logits = solo.feed(prompt);
        });
        rows.push_back({fmt::format("prefill {}", n), t, double(n), s});
      }

      log.line(fmt::format("threads {}: decode 1 seq, {} steps after {} x {} reps", t,
                           o.decode_steps, o.prompt_len, o.reps));
      {
        BatchDecoder dec(model, 1, o.prompt_len, o.decode_steps);
        const double s = median_seconds(o.reps, [&] { dec.decode(o.decode_steps); });
        rows.push_back({"decode 1 seq", t, double(o.decode_steps), s});
      }

      for (int B : o.batches) {
        log.line(fmt::format("threads {}: decode batch {}, {} steps after {} x {} reps", t, B,
                             o.batch_decode_steps, o.prompt_len, o.reps));
        BatchDecoder dec(model, B, o.prompt_len, o.batch_decode_steps);
        const double s = median_seconds(o.reps, [&] { dec.decode(o.batch_decode_steps); });
        rows.push_back({fmt::format("decode batch {}", B), t, double(B) * o.batch_decode_steps, s});
        log.line(fmt::format("threads {}: decode batch {} through the engine", t, B));
        std::vector<double> per_step;
        for (int r = 0; r < o.reps; ++r) {  // a fresh engine each time: no warm-up run
          per_step.push_back(
              engine_decode_step_seconds(model, B, o.prompt_len, o.batch_decode_steps));
        }
        rows.push_back({fmt::format("engine decode batch {}", B), t, double(B), median(per_step)});
      }
    }

    // ---- report -------------------------------------------------------------------------
    auto find = [&](const std::string& what, int t) -> const Row* {
      for (const Row& r : rows) {
        if (r.what == what && r.threads == t) return &r;
      }
      return nullptr;
    };
    const int t1 = o.threads.front(), t_last = o.threads.back();
    fmt::print(
        "# model_bench: {} ({} layers, dim {}, ffn {}, vocab {}), CPU backend {}, matrices held "
        "as {}\n\n",
        b.model->name, c.n_layers, c.dim, c.ffn_dim, c.vocab_size,
        o.activations == kernels::CpuActivations::kQ8 ? "cpu-q8 (activations rounded to q8)"
                                                      : "cpu (fp32 activations)",
        weight_dtypes(b.model->weights));
    fmt::print(
        "median of {} repetitions after one warm-up; decode starts after a {}-token prompt "
        "(batched: one prompt shared by all sequences); {} at the start, {} at the end\n\n",
        o.reps, o.prompt_len, load_start, machine_load());
    fmt::print("| case | threads | tokens/s | ms per step | speedup vs {} thr |\n", t1);
    fmt::print("|---|---|---|---|---|\n");
    for (const Row& r : rows) {
      const Row* base = find(r.what, t1);
      const bool prefill = r.what.rfind("prefill", 0) == 0;
      const bool engine = r.what.rfind("engine", 0) == 0;
      const double steps = prefill                    ? 1.0
                           : engine                   ? 1.0
                           : r.what == "decode 1 seq" ? o.decode_steps
                                                      : o.batch_decode_steps;
      fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.2f} |\n", r.what, r.threads, r.tok_s(),
                 1e3 * r.seconds / steps, base ? base->seconds / r.seconds : 0.0);
    }

    fmt::print("\n## engine overhead: engine decode step time ÷ hand-built forward step time\n\n");
    fmt::print("| batch | threads | forward ms | engine ms | ratio |\n|---|---|---|---|---|\n");
    for (int t : o.threads) {
      for (int B : o.batches) {
        const Row* raw = find(fmt::format("decode batch {}", B), t);
        const Row* eng = find(fmt::format("engine decode batch {}", B), t);
        if (!raw || !eng) continue;
        const double raw_ms = 1e3 * raw->seconds / o.batch_decode_steps;
        fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.2f} |\n", B, t, raw_ms, 1e3 * eng->seconds,
                   1e3 * eng->seconds / raw_ms);
      }
    }

    // The sampler runs on the engine thread for every generated token (one pass of exp over
    // the vocab for the logprob, more with temperature and filters).
    {
      SamplingParams greedy, nucleus;
      greedy.temperature = 0.0f;
      nucleus.temperature = 0.8f;
      nucleus.top_p = 0.95f;
      nucleus.seed = 1;
      const int n = 200;
      const std::span<const float> row(sample_logits);
      const double greedy_s = median_seconds(3,
                                             [&] {
                                               for (int i = 0; i < n; ++i)
                                                 sample(row, greedy, 1000 + i, 0);
                                             }) /
                              n;
      const double nucleus_s = median_seconds(3,
                                              [&] {
                                                for (int i = 0; i < n; ++i)
                                                  sample(row, nucleus, 1000 + i, 0);
                                              }) /
                               n;
      fmt::print(
          "\nsampler, one token over a vocab of {} (single thread): greedy {:.0f} µs, "
          "temperature 0.8 + top-p 0.95 {:.0f} µs (logits after a random-token prompt: a flat "
          "distribution, the slow case for top-p; real text is usually far more peaked)\n",
          c.vocab_size, 1e6 * greedy_s, 1e6 * nucleus_s);
      for (int B : o.batches) {
        const Row* raw = find(fmt::format("decode batch {}", B), t_last);
        if (!raw) continue;
        fmt::print("  batch {}: greedy sampling = {:.1f}% of a {}-thread forward step\n", B,
                   100.0 * B * greedy_s / (raw->seconds / o.batch_decode_steps), t_last);
      }
    }

    // Roofline: a decode step reads every weight once, the shared prompt's KV once and each
    // sequence's own decode KV (on average half the steps); at the measured copy bandwidth
    // that takes at least bytes / bandwidth.
    const StepBytes bytes = decode_step_bytes(c, b.model->weights);
    fmt::print("\n## decode vs memory-bandwidth roofline\n\n");
    fmt::print(
        "weights read per step (as stored): {:.1f} MB (lm_head {:.1f} MB); KV: {:.1f} KB per "
        "cached position ({:.1f} MB for the {}-token prompt).\n",
        bytes.weights / 1e6, b.model->weights.lm_head_tensor().n_bytes() / 1e6,
        bytes.kv_per_position / 1e3, bytes.kv_per_position * o.prompt_len / 1e6, o.prompt_len);
    fmt::print(
        "bandwidth measured here over 512 MiB at the same thread count: copy = memcpy, "
        "(read + write) bytes / s; read = streaming read.\nefficiency = roofline time ÷ "
        "measured time (1.0 = at that bandwidth).\n\n");
    fmt::print(
        "| case | threads | MB read/step | measured ms/step | achieved GB/s | copy GB/s | "
        "roofline ms (copy) | efficiency (copy) | read GB/s | efficiency (read) |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int t : o.threads) {
      std::vector<std::pair<std::string, int>> cases = {{"decode 1 seq", 1}};
      for (int B : o.batches) cases.emplace_back(fmt::format("decode batch {}", B), B);
      for (const auto& [what, B] : cases) {
        const Row* r = find(what, t);
        if (!r) continue;
        const int steps = B == 1 ? o.decode_steps : o.batch_decode_steps;
        const double step_s = r->seconds / steps;
        const double step_bytes =
            bytes.weights + bytes.kv_per_position * (o.prompt_len + B * (steps / 2.0));
        const double roof_copy_s = step_bytes / (bw[t].copy_gbs * 1e9);
        const double roof_read_s = step_bytes / (bw[t].read_gbs * 1e9);
        fmt::print(
            "| {} | {} | {:.0f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.1f} | "
            "{:.2f} |\n",
            what, t, step_bytes / 1e6, 1e3 * step_s, step_bytes / step_s / 1e9, bw[t].copy_gbs,
            1e3 * roof_copy_s, roof_copy_s / step_s, bw[t].read_gbs, roof_read_s / step_s);
      }
    }
    if (o.threads.size() > 1) {
      fmt::print("\nbandwidth {} → {} threads: copy {:.2f}x, read {:.2f}x\n", t1, t_last,
                 bw[t_last].copy_gbs / bw[t1].copy_gbs, bw[t_last].read_gbs / bw[t1].read_gbs);
    }
    // Compute side: 2 FLOP per weight per token (the matmuls; attention excluded). Prefill is
    // the kernels' compute ceiling; batched decode approaches it as the batch grows.
    const double flop_per_token = 2.0 * bytes.weights / 4.0;
    fmt::print("\n## arithmetic rate (2 FLOP per weight per token, attention excluded)\n\n");
    const std::string ceiling_case = fmt::format("prefill {}", max_prefill);
    fmt::print("| case | threads | GFLOP/s | vs {} |\n|---|---|---|---|\n", ceiling_case);
    for (const Row& r : rows) {
      if (r.what.rfind("engine", 0) == 0) continue;
      const Row* ceiling = find(ceiling_case, r.threads);
      fmt::print("| {} | {} | {:.1f} | {:.2f} |\n", r.what, r.threads,
                 flop_per_token * r.tok_s() / 1e9, ceiling ? r.tok_s() / ceiling->tok_s() : 0.0);
    }
    log.line("done");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "model_bench: error: {}\n", e.what());
    return 1;
  }
}
