// End-to-end decode on the GPU: Llama-3.1-8B with synthetic weights generated in device memory
// (LlamaModel's recipe constructor, 16 GB of bf16, no host copy), LlamaModel::forward timed for
// decode steps — one token per sequence at position `context`, every earlier position's KV
// already in (allocated, zero) blocks — at batch 1…256, in the invariant and the fast numerics
// modes (CudaOptions::mode; one model in memory at a time). Reports ms per step, tok/s, the
// speed ratio fast time ÷ invariant time (1.0 = as fast; issue 5's target ≥ 0.9) and the
// fraction of the bandwidth roofline reached: (weights read + KV read) ÷ the device copy rate
// measured in the same run. forward() downloads every logit row (128256 fp32 per sequence) to
// pageable host memory; the step is timed eagerly with all rows (what an engine does) and with
// one row (lm_head at m = 1, weights still read whole), with all rows replayed from a CUDA graph
// (padded decode step, model/step_padding.h), and the download alone; and, as the engine runs
// it now, replayed from a graph with the logits left on the device and every row sampled there
// (Ops::sample_rows; only tokens and logprobs are downloaded).
// --fp8 also runs every case (and --prefill) on FP8 projections: the same synthetic weights made
// on the host (fp32, ~32 GB for 8B) and quantized per channel as --quantization fp8 does
// (model/fp8_weights.h), then uploaded in the device form; it prints FP8 ÷ bf16 step times
// and prefill tokens/s (one "RESULT_FP8 batch context mode graph_ms" and "PREFILL_FP8 tokens
// mode ms tok/s" line each). --fp8-kv: those runs with the FP8 KV cache too (--kv-dtype fp8:
// the packed attention CTA on every step).
// Run: build-cuda/benchmarks/cuda_e2e_bench [--quick] [--steps N] [--invariant-only]
//      [--cases 1x512,64x2048,…] [--fp8]  (exits without a CUDA device; progress on stderr,
// markdown on stdout, and one "RESULT batch context mode graph_ms greedy_ms sampled_ms" line per
// case for scripts/gpu/vs_peer.sh; docs/cuda.md)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "bench_args.h"
#include "decode_step.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "kernels/sampling/sample_row.h"
#include "kernels/cuda/fp8_rule.h"
#include "model/fp8_weights.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/step_padding.h"
#include "model/synthetic.h"
#include "progress_log.h"

using namespace detllm;
using namespace detllm::kernels;
using detllm::bench_util::DecodeStep;

namespace {

using Clock = std::chrono::steady_clock;
const bench_util::ProgressLog progress("cuda_e2e_bench");

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Case {
  int batch;
  int context;
};

struct Timing {
  double all_rows_ms = 0;       // eager step with every sequence's logits downloaded
  double one_row_ms = 0;        // eager step with one logit row
  double graph_ms = 0;          // all rows, padded decode step replayed from a CUDA graph
  bool graph_replayed = false;  // the graph steps really replayed (LlamaModel::step_stats)
  double download_ms = 0;       // the all-rows logits download alone
  double sampled_ms = 0;        // graph step, every row sampled on the device, tokens downloaded
  double greedy_ms = 0;         // the same with greedy rows (the argmax and its logprob)
  double enqueued_ms = 0;       // graph steps enqueued back to back, nothing read, one sync
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy rate of a 1 GiB buffer, counting bytes read + written (TB/s).
double copy_tbs(Ops& ops) {
  const size_t bytes = size_t(1) << 30;
  Buffer a(ops, bytes), b(ops, bytes);
  for (int i = 0; i < 3; ++i) ops.copy(b.data(), a.data(), bytes);
  ops.synchronize();
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 10; ++i) ops.copy(b.data(), a.data(), bytes);
    ops.synchronize();
    t.push_back(since(t0) / 10);
  }
  return 2.0 * bytes / median(t) * 1e-12;
}

// The logits download of `rows` rows alone, as forward() does it (pageable host vector).
double download_ms(Ops& ops, int rows, int vocab) {
  const size_t bytes = size_t(rows) * vocab * sizeof(float);
  Buffer d(ops, bytes);
  std::vector<float> h(bytes / sizeof(float));
  ops.download(h.data(), d.data(), bytes);
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = Clock::now();
    ops.download(h.data(), d.data(), bytes);
    t.push_back(since(t0) * 1e3);
  }
  return median(t);
}

int usage(const char* argv0) {
  fmt::print(stderr,
             "usage: {} [--quick] [--steps N] [--invariant-only] [--cases BxC,...]\n"
             "       [--prefill T,...] [--gemm-lt 0|1]\n"
             "       [--pdl -1|0|1]\n"
             "       [--attn-kernel K] [--attn-split S]\n"
             "       [--fp8 [--fp8-kv] [--fp8-wg-splits S] [--fp8-fused 0|1] [--fp8-lt 0|1]]\n"
             "Decode steps of Llama-3.1-8B (synthetic weights made on the GPU) in the invariant\n"
             "and fast modes at batch 1, 8, 64, 256 and contexts 512, 2048, against the\n"
             "bandwidth roofline. --quick: batch 1 and 64 at context 512, fewer steps.\n"
             "--invariant-only: skip the fast mode. --cases: the (batch x context) cases.\n"
             "--prefill: also time one prompt of T tokens prefilled in one step.\n"
             "--gemm-lt 0: the invariant mode without the verified cuBLASLt plans (every GEMM on\n"
             "the invariant kernel, the FP8 runs' too); same bits.\n"
             "--fp8-lt 0: the FP8 runs' invariant linears on the FP8 kernel alone, without its\n"
             "verified cuBLASLt plans (CudaOptions::fp8_gemm_lt); same bits.\n"
             "--pdl: both modes' programmatic dependent launch of the small kernels\n"
             "(CudaOptions::programmatic_launch, -1 chosen: on for steps of <= 4 rows,\n"
             "0 off, 1 on); same bits.\n"
             "--attn-kernel, --attn-split: both modes' CudaOptions::attention_kernel (-1 the\n"
             "planner's choice; 0 decode warps, 1 shared-split CTA, 2 warpgroup CTA, 3 packed\n"
             "CTA, 4 packed streams, on every step they can run; kernels/attention_plan.h) and\n"
             "attention_split_blocks (-1 chosen, 0 a row's splits in its CTA, 1 a CTA a split);\n"
             "same bits.\n"
             "--fp8: also every case and prefill on per-channel FP8 projections (weights made\n"
             "on the host and quantized as --quantization fp8 does), FP8 vs bf16 tables.\n"
             "--fp8-kv: the FP8 runs with --kv-dtype fp8 as well.\n"
             "--fp8-wg-splits S: the FP8 runs' invariant linears on the split-K wgmma GEMM\n"
             "with S runs of k for every shape, 1 for the unsplit wgmma GEMM, or 'auto' (the\n"
             "default, what served models run): each shape's split from the device's SMs\n"
             "(CudaOptions::fp8_wg_splits; each its own numerics).\n"
             "--fp8-fused 0: the FP8 runs with the activation quantizer launched apart instead\n"
             "of fused into RMSNorm and SiLU-mul (CudaOptions::fp8_fused_quantize); same bits.\n"
             "--fp8-prefill-variant V: the FP8 runs' linears of more than 64 rows on split\n"
             "launcher variant V (CudaOptions::fp8_wg_prefill_variant; -1 its choice, the\n"
             "TMA-fed warp-specialised kernel; 2 the cp.async tiles); same bits.\n",
             argv0);
  return 2;
}

// "1x512,64x2048" → cases; empty on a malformed list.
std::vector<Case> parse_cases(const std::string& list) {
  std::vector<Case> out;
  size_t at = 0;
  while (at < list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    const size_t x = item.find('x');
    if (x == std::string::npos) return {};
    const int b = std::atoi(item.substr(0, x).c_str()), ctx = std::atoi(item.substr(x + 1).c_str());
    if (b <= 0 || ctx <= 0) return {};
    out.push_back({b, ctx});
    at = end + 1;
  }
  return out;
}

using bench_util::parse_counts;

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, invariant_only = false, fp8 = false, fp8_kv = false, fp8_fused = true;
  int steps = 20, fp8_wg_splits = kernels::kCudaFp8DefaultSplits, fp8_prefill_variant = -1;
  bool gemm_lt = CudaOptions{}.gemm_lt, fp8_lt = CudaOptions{}.fp8_gemm_lt;
  int pdl = CudaOptions{}.programmatic_launch;
  int attn_kernel = CudaOptions{}.attention_kernel, attn_split = CudaOptions{}.attention_split_blocks;
  std::vector<Case> chosen;
  std::vector<int> prefill_tokens;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      steps = 5;
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--fp8") == 0) {
      fp8 = true;
    } else if (std::strcmp(argv[i], "--fp8-kv") == 0) {
      fp8_kv = true;
    } else if (std::strcmp(argv[i], "--fp8-wg-splits") == 0 && i + 1 < argc) {
      ++i;
      fp8_wg_splits = std::strcmp(argv[i], "auto") == 0 ? -1 : std::atoi(argv[i]);
      if (fp8_wg_splits == 0 || fp8_wg_splits > 64) return usage(argv[0]);
    } else if (std::strcmp(argv[i], "--fp8-prefill-variant") == 0 && i + 1 < argc) {
      fp8_prefill_variant = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--fp8-fused") == 0 && i + 1 < argc) {
      fp8_fused = std::atoi(argv[++i]) != 0;
    } else if (std::strcmp(argv[i], "--invariant-only") == 0) {
      invariant_only = true;
    } else if (std::strcmp(argv[i], "--prefill") == 0 && i + 1 < argc) {
      prefill_tokens = parse_counts(argv[++i]);
      if (prefill_tokens.empty()) return usage(argv[0]);
    } else if (std::strcmp(argv[i], "--fp8-lt") == 0 && i + 1 < argc) {
      fp8_lt = std::atoi(argv[++i]) != 0;
    } else if (std::strcmp(argv[i], "--gemm-lt") == 0 && i + 1 < argc) {
      gemm_lt = std::atoi(argv[++i]) != 0;
    } else if (std::strcmp(argv[i], "--pdl") == 0 && i + 1 < argc) {
      pdl = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--attn-kernel") == 0 && i + 1 < argc) {
      attn_kernel = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--attn-split") == 0 && i + 1 < argc) {
      attn_split = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--cases") == 0 && i + 1 < argc) {
      chosen = parse_cases(argv[++i]);
      if (chosen.empty()) return usage(argv[0]);
    } else {
      return usage(argv[0]);
    }
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_e2e_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  try {
    const int warmup = quick ? 1 : 3;
    std::vector<Case> cases = {{1, 512},  {1, 2048},  {8, 512},  {8, 2048},
                               {64, 512}, {64, 2048}, {256, 512}};
    if (quick) cases = {{1, 512}, {64, 512}};
    if (!chosen.empty()) cases = chosen;
    const ModelConfig c = synthetic_config("llama-3.1-8b");
    const SyntheticWeights recipe = synthetic_recipe(c, 1);
    fmt::print("device: {}\n", cuda_device_description(0));
    fmt::print("invariant mode's verified cuBLASLt plans: {}{}\n", gemm_lt ? "on" : "off",
               fp8 ? (gemm_lt && fp8_lt ? " (FP8 GEMMs' too)" : " (FP8 GEMMs': off)") : "");
    fmt::print("programmatic dependent launch: {}\n",
               pdl < 0 ? "chosen (steps of <= 4 rows)" : pdl ? "on" : "off");
    fmt::print("attention_kernel {}, attention_split_blocks {}\n", attn_kernel, attn_split);

    double copy = 0;
    {
      auto ops = make_cuda_ops({});
      copy = copy_tbs(*ops);
    }
    progress("device copy {:.2f} TB/s (read + write, 1 GiB)", copy);

    // Bytes one decode step must read: every weight once (bf16; the embedding table only for
    // the batch's rows) + each sequence's K and V at positions 0 … context (the KV dtype).
    const double weight_bytes =
        static_cast<double>(recipe.bytes(2)) - 2.0 * static_cast<double>(recipe.tok_embd.numel());
    auto step_bytes = [&](const Case& k) {
      const double kv = double(k.batch) * (k.context + 1) * c.n_layers * 2.0 * c.kv_dim() *
                        double(dtype_size(CudaOptions{}.kv_dtype));
      return weight_bytes + 2.0 * k.batch * c.dim + kv;
    };

    std::map<std::pair<int, int>, Timing> results[2];  // [mode][(batch, context)]
    std::map<int, double> prefill[2];                   // [mode][tokens] ms (bf16)
    double gen_s[2] = {0, 0};
    const NumericsMode modes[2] = {NumericsMode::kInvariant, NumericsMode::kFast};
    const int n_modes = invariant_only ? 1 : 2;
    for (int mi = 0; mi < n_modes; ++mi) {
      const char* mode = mi == 0 ? "invariant" : "fast";
      CudaOptions o;
      o.mode = modes[mi];
      o.programmatic_launch = pdl;
      o.attention_kernel = attn_kernel;
      o.attention_split_blocks = attn_split;
      if (mi == 0) {
        o.gemm_lt = gemm_lt;
      }
      auto ops = make_cuda_ops(o);
      progress("{}: generating Llama-3.1-8B weights on the GPU ({:.1f} GB bf16)", mode,
               recipe.bytes(2) * 1e-9);
      const auto t0 = Clock::now();
      auto model = std::make_unique<LlamaModel>(c, recipe, *ops);
      ops->synchronize();
      gen_s[mi] = since(t0);
      progress("{}: weights ready in {:.2f} s", mode, gen_s[mi]);
      for (int tokens : prefill_tokens) {
        const double ms = bench_util::prefill_ms(*ops, *model, c, tokens, 1, quick ? 2 : 3);
        prefill[mi][tokens] = ms;
        progress("{}: prefill of {} tokens: {:.2f} ms, {:.0f} tok/s", mode, tokens, ms,
                 tokens / ms * 1e3);
        fmt::print("PREFILL {} {} {:.4f} {:.1f}\n", tokens, mode, ms, tokens / ms * 1e3);
        std::fflush(stdout);
      }
      for (const Case& k : cases) {
        DecodeStep step(*ops, c, k.batch, k.context);
        std::vector<int32_t> all(static_cast<size_t>(k.batch));
        std::iota(all.begin(), all.end(), 0);
        const std::vector<int32_t> one = {0};
        Timing t;
        t.all_rows_ms = step.time_ms(*model, all, GraphMode::kOff, warmup, steps);
        t.one_row_ms = step.time_ms(*model, one, GraphMode::kOff, warmup, steps);
        // Warm-up includes the first (eager) step and the graph capture.
        const int64_t replays = model->step_stats().n_graph_replays;
        t.graph_ms = step.time_ms(*model, all, GraphMode::kAuto, warmup + 2, steps);
        t.graph_replayed = model->step_stats().n_graph_replays >= replays + steps;
        t.download_ms = download_ms(*ops, k.batch, c.vocab_size);
        t.sampled_ms = step.time_sampled_ms(*model, all, GraphMode::kAuto, warmup + 2, steps);
        t.greedy_ms = step.time_sampled_ms(*model, all, GraphMode::kAuto, warmup + 2, steps, true);
        t.enqueued_ms = step.time_enqueued_ms(*model, all, GraphMode::kAuto, warmup + 2, steps);
        results[mi][{k.batch, k.context}] = t;
        fmt::print("RESULT {} {} {} {:.4f} {:.4f} {:.4f}\n", k.batch, k.context, mode, t.graph_ms,
                   t.greedy_ms, t.sampled_ms);
        std::fflush(stdout);
        progress(
            "{}: batch {:3d}, context {:4d}: {:.2f} ms/step (all logit rows), {:.2f} (one "
            "row), {:.2f} (all rows, {}), download {:.2f} ms, {:.2f} (graph, sampled on the "
            "device), {:.2f} (greedy), {:.2f} (graph replays back to back, no host round trip)",
            mode, k.batch, k.context, t.all_rows_ms, t.one_row_ms, t.graph_ms,
            t.graph_replayed ? "CUDA graph" : "NOT replayed from a graph", t.download_ms,
            t.sampled_ms, t.greedy_ms, t.enqueued_ms);
      }
    }

    // FP8 projections: one host copy of the weights, quantized once, uploaded per mode.
    std::map<std::pair<int, int>, double> fp8_graph_ms[2];  // [mode][(batch, context)]
    std::map<int, double> fp8_prefill[2];
    if (fp8) {
      progress("fp8: making the weights on the host (fp32) and quantizing the projections");
      const auto t0 = Clock::now();
      ModelWeights host = make_synthetic_weights(c, 1);
      quantize_weights_fp8(host, c);
      progress("fp8: host weights ready in {:.1f} s ({}; GEMM rule {})", since(t0),
               fp8_class_name(host), cuda_fp8_gemm_rule(fp8_wg_splits));
      for (int mi = 0; mi < n_modes; ++mi) {
        const char* mode = mi == 0 ? "invariant" : "fast";
        CudaOptions o;
        o.mode = modes[mi];
        o.programmatic_launch = pdl;
        o.attention_kernel = attn_kernel;
        o.attention_split_blocks = attn_split;
        if (fp8_kv) o.kv_dtype = DType::kF8E4M3;
        o.fp8_wg_splits = fp8_wg_splits;
        o.fp8_fused_quantize = fp8_fused;
        o.fp8_wg_prefill_variant = fp8_prefill_variant;
        if (mi == 0) {
          o.gemm_lt = gemm_lt;
          o.fp8_gemm_lt = fp8_lt;
        }
        auto ops = make_cuda_ops(o);
        auto model = std::make_unique<LlamaModel>(c, host, *ops);
        ops->synchronize();
        // The plans of every step this run takes, made now (timed apart; first use otherwise).
        int32_t max_rows = 1;
        for (int tokens : prefill_tokens) max_rows = std::max(max_rows, tokens);
        for (const Case& k : cases) max_rows = std::max(max_rows, k.batch);
        const auto t_plans = Clock::now();
        model->prepare_gemms(max_rows);
        progress("fp8 {}: GEMM plans for up to {} rows made in {:.1f} s", mode, max_rows,
                 since(t_plans));
        for (const std::string& line : cuda_gemm_plan_report(*ops))
          if (line.starts_with("fp8 ")) progress("  plan {}", line);
        for (int tokens : prefill_tokens) {
          const double ms = bench_util::prefill_ms(*ops, *model, c, tokens, 1, quick ? 2 : 3);
          fp8_prefill[mi][tokens] = ms;
          fmt::print("PREFILL_FP8 {} {} {:.4f} {:.1f}\n", tokens, mode, ms, tokens / ms * 1e3);
          std::fflush(stdout);
        }
        for (const Case& k : cases) {
          DecodeStep step(*ops, c, k.batch, k.context);
          std::vector<int32_t> all(static_cast<size_t>(k.batch));
          std::iota(all.begin(), all.end(), 0);
          const int64_t replays = model->step_stats().n_graph_replays;
          const double ms = step.time_ms(*model, all, GraphMode::kAuto, warmup + 2, steps);
          const bool replayed = model->step_stats().n_graph_replays >= replays + steps;
          fp8_graph_ms[mi][{k.batch, k.context}] = ms;
          fmt::print("RESULT_FP8 {} {} {} {:.4f}\n", k.batch, k.context, mode, ms);
          std::fflush(stdout);
          progress("fp8 {}: batch {:3d}, context {:4d}: {:.2f} ms/step ({})", mode, k.batch,
                   k.context, ms, replayed ? "CUDA graph" : "NOT replayed from a graph");
        }
      }
    }

    fmt::print(
        "\nLlama-3.1-8B decode, synthetic weights generated on the GPU in {:.2f} s "
        "(invariant) / {:.2f} s (fast); {} timed steps after {} warm-up; device copy "
        "{:.2f} TB/s (read + write).\n",
        gen_s[0], gen_s[1], steps, warmup, copy);
    fmt::print(
        "Roofline = (bf16 weights {:.2f} GB + {} KV of positions 0…context) ÷ copy "
        "rate; % = roofline time ÷ measured time. Speed ratio = fast ms ÷ invariant ms "
        "(1.0 = as fast{}).\n",
        weight_bytes * 1e-9, dtype_name(CudaOptions{}.kv_dtype),
        invariant_only ? "; --invariant-only: the fast columns repeat the invariant ones" : "");
    const char* kinds[5] = {
        "Eager step with every sequence's logits (lm_head at m = batch, batch × 128256 fp32 "
        "downloaded to pageable host memory: what the engine does)",
        "Eager step with one logit row (lm_head at m = 1, weights still read whole; 0.5 MB "
        "downloaded)",
        "Step with every sequence's logits, padded to its row bucket and replayed from a CUDA "
        "graph (GraphMode::kAuto, model/step_padding.h)",
        "All rows sampled on the device (only tokens downloaded): the graph step with its "
        "logits left in device memory and one Ops::sample_rows call (temperature 0.8, top-p "
        "0.95, seeded) — what the engine does now",
        "The same with greedy rows (temperature 0: the argmax and its logprob)"};
    for (int kind = 0; kind < 5; ++kind) {
      std::string notes;
      fmt::print("\n{}:\n\n", kinds[kind]);
      fmt::print(
          "| batch | context | GB read | roofline ms | invariant ms | fast ms | "
          "invariant tok/s | fast tok/s | speed ratio | invariant % roofline | fast % "
          "roofline |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
      for (const Case& k : cases) {
        const Timing& ti = results[0].at({k.batch, k.context});
        const Timing& tf = results[n_modes - 1].at({k.batch, k.context});
        const auto pick = [kind](const Timing& t) {
          const double by_kind[5] = {t.all_rows_ms, t.one_row_ms, t.graph_ms, t.sampled_ms,
                                     t.greedy_ms};
          return by_kind[kind];
        };
        const double inv = pick(ti);
        const double fast = pick(tf);
        if (kind == 2 && !(ti.graph_replayed && tf.graph_replayed))
          notes += fmt::format("Batch {}, context {}: the steps were NOT replayed from a graph.\n",
                               k.batch, k.context);
        const double bytes = step_bytes(k);
        const double roof_ms = bytes / (copy * 1e12) * 1e3;
        fmt::print(
            "| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.0f} | {:.0f} | {:.2f} | "
            "{:.1f}% | {:.1f}% |\n",
            k.batch, k.context, bytes * 1e-9, roof_ms, inv, fast, k.batch / inv * 1e3,
            k.batch / fast * 1e3, fast / inv, 100 * roof_ms / inv, 100 * roof_ms / fast);
      }
      if (!notes.empty()) fmt::print("\n{}", notes);
    }
    fmt::print(
        "\nLogits download alone (batch × 128256 fp32, device → pageable host, as "
        "forward() does it), and the all-rows step without it:\n\n");
    fmt::print(
        "| batch | context | MB | download ms | GB/s | invariant ms − download | fast ms "
        "− download |\n|---|---|---|---|---|---|---|\n");
    for (const Case& k : cases) {
      const Timing& ti = results[0].at({k.batch, k.context});
      const Timing& tf = results[n_modes - 1].at({k.batch, k.context});
      const double mb = double(k.batch) * c.vocab_size * 4 * 1e-6;
      fmt::print("| {} | {} | {:.1f} | {:.2f} | {:.1f} | {:.2f} | {:.2f} |\n", k.batch, k.context,
                 mb, ti.download_ms, mb / ti.download_ms, ti.all_rows_ms - ti.download_ms,
                 tf.all_rows_ms - tf.download_ms);
    }
    if (fp8) {
      fmt::print(
          "\nFP8 projections (per-channel E4M3, activations per token; embedding and lm_head "
          "bf16{}) against bf16, graph step with every logit row (ms; ratio = bf16 ÷ FP8, > 1 = "
          "FP8 faster):\n\n| batch | context | bf16 invariant | FP8 invariant | ratio | bf16 "
          "fast | FP8 fast | ratio |\n|---|---|---|---|---|---|---|---|\n",
          fp8_kv ? "; FP8 KV cache" : "; bf16 KV cache");
      for (const Case& k : cases) {
        const double bi = results[0].at({k.batch, k.context}).graph_ms;
        const double bf = results[n_modes - 1].at({k.batch, k.context}).graph_ms;
        const double fi = fp8_graph_ms[0].at({k.batch, k.context});
        const double ff = fp8_graph_ms[n_modes - 1].at({k.batch, k.context});
        fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", k.batch,
                   k.context, bi, fi, bi / fi, bf, ff, bf / ff);
      }
      if (!prefill_tokens.empty()) {
        fmt::print(
            "\nPrefill of one prompt (tokens/s; ratio = FP8 ÷ bf16):\n\n| tokens | bf16 "
            "invariant | FP8 invariant | ratio | bf16 fast | FP8 fast | ratio |\n"
            "|---|---|---|---|---|---|---|\n");
        for (int t : prefill_tokens) {
          const auto tps = [t](double ms) { return t / ms * 1e3; };
          const double bi = tps(prefill[0].at(t)), bf = tps(prefill[n_modes - 1].at(t));
          const double fi = tps(fp8_prefill[0].at(t)), ff = tps(fp8_prefill[n_modes - 1].at(t));
          fmt::print("| {} | {:.0f} | {:.0f} | {:.2f} | {:.0f} | {:.0f} | {:.2f} |\n", t, bi, fi,
                     fi / bi, bf, ff, ff / bf);
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cuda_e2e_bench: error: {}\n", e.what());
    return 1;
  }
}
