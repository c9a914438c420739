// Where a decode step's time goes, op by op, on each GEMM numerics: Llama-3.1-8B with synthetic
// weights generated on the GPU, decode steps at the given batch sizes (context 512 by default),
// run eagerly through ProfilingOps (kernels/profiling_ops.h: a sync around every op) on
//   invariant  an invariant backend (verified cuBLASLt plans), as deterministic steps run;
//   switched   the same backend running fast numerics (StepBatch::numerics), as the steps
//              of non-deterministic requests run under mixed traffic (docs/modes.md);
//   fast       a fast backend (CudaOptions::mode = fast), as the `fast` mode runs.
// Prints, per batch, ms per step of every op and shape in the three and the ratio invariant ÷
// fast, plus the unprofiled step (graph replay, device sampling) for scale. The question it
// answers (docs/perf.md): why the invariant decode step measured 0.92 of fast at batch 64.
// With --mixed P each step also carries a P-token prompt chunk (the mixed steps of a loaded
// engine: why invariant trails fast on ShareGPT, docs/perf.md). With --fp8 the model's
// projections are per-channel FP8 (made on the host and quantized as --quantization fp8 does):
// where an FP8 step's time goes, and what its invariant numerics cost against FP8 fast.
// Run: build-cuda/benchmarks/cuda_step_profile_bench [--batches 1,64,256] [--context N]
//      [--mixed P] [--steps N] [--fp8]
// (exits without a CUDA device; progress on stderr, markdown on stdout, one table per batch as
// soon as it is measured; both backends are kept at once: ~64 GB of GPU memory)
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "bench_args.h"
#include "decode_step.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "kernels/profiling_ops.h"
#include "model/fp8_weights.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "progress_log.h"

using namespace detllm;
using namespace detllm::kernels;
using detllm::bench_util::DecodeStep;

namespace {

const bench_util::ProgressLog progress("cuda_step_profile_bench");

struct Profile {
  std::vector<OpTime> ops;  // per step
  double graph_sampled_ms = 0;
};

// Profiles `steps` eager decode steps (after one warm-up) of `model` (built on `prof`), then
// times the same step replayed from a graph with device sampling on the unwrapped `ops`; every
// GEMM with `numerics`.
Profile profile_step(ProfilingOps& prof, const LlamaModel& model, const LlamaModel& plain, Ops& ops,
                     const ModelConfig& c, int batch, int context, int prefill, int steps,
                     NumericsMode numerics) {
  Profile p;
  DecodeStep step(ops, c, batch, context, prefill);
  step.set_numerics(numerics);
  const std::span<const int32_t> rows = step.logit_rows();
  (void)model.forward(step.tokens(), step.batch(), rows, step.kv(), GraphMode::kOff);
  prof.reset();
  for (int i = 0; i < steps; ++i) {
    (void)model.forward(step.tokens(), step.batch(), rows, step.kv(), GraphMode::kOff);
  }
  prof.synchronize();
  p.ops = prof.times();
  for (OpTime& t : p.ops) t.total_ms /= steps;
  p.graph_sampled_ms = step.time_sampled_ms(plain, rows, GraphMode::kAuto, 3, steps);
  return p;
}

double ms_of(const Profile& p, const std::string& key) {
  for (const OpTime& t : p.ops)
    if (t.key == key) return t.total_ms;
  return 0.0;
}

double total_ms(const Profile& p) {
  double s = 0;
  for (const OpTime& t : p.ops) s += t.total_ms;
  return s;
}

// One batch's markdown table, flushed at once.
void print_table(int batch, int prefill, const Profile& inv, const Profile& sw, const Profile& fast,
                 int steps) {
  const std::string what =
      prefill > 0 ? fmt::format("Batch {} + a {}-token prompt chunk (a mixed step: eager)", batch,
                                prefill)
                  : fmt::format("Batch {}", batch);
  fmt::print(
      "\n### {} (ms per step; graph + device sampling, unprofiled: invariant {:.2f}, "
      "switched {:.2f}, fast {:.2f}, fast ÷ invariant {:.3f})\n\n",
      what, inv.graph_sampled_ms, sw.graph_sampled_ms, fast.graph_sampled_ms,
      fast.graph_sampled_ms / inv.graph_sampled_ms);
  fmt::print(
      "| op (shape K->N, rows m) | calls | invariant | switched | fast | invariant − fast "
      "| fast ÷ invariant |\n|---|---|---|---|---|---|---|\n");
  for (const OpTime& t : inv.ops) {
    const double f = ms_of(fast, t.key);
    fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.3f} | {:+.3f} | {:.3f} |\n", t.key,
               t.calls / steps, t.total_ms, ms_of(sw, t.key), f, t.total_ms - f,
               t.total_ms > 0 ? f / t.total_ms : 0.0);
  }
  fmt::print("| total (profiled) | | {:.3f} | {:.3f} | {:.3f} | {:+.3f} | {:.3f} |\n",
             total_ms(inv), total_ms(sw), total_ms(fast), total_ms(inv) - total_ms(fast),
             total_ms(fast) / total_ms(inv));
  std::fflush(stdout);
}

using bench_util::parse_counts;

int usage(const char* argv0) {
  fmt::print(stderr,
             "usage: {} [--batches 1,64,256] [--context N] [--mixed P] [--steps N] [--fp8]\n"
             "Llama-3.1-8B decode steps (synthetic weights on the GPU), op by op (a sync "
             "around every op), on the invariant numerics, the same backend switched to fast, "
             "and a fast backend; markdown on stdout.\n"
             "--mixed P: each step also carries the first P tokens of one more sequence (a "
             "prompt chunk beside the decode rows, as under load; such steps run eagerly).\n"
             "--fp8: the projections per-channel FP8 (weights made on the host, quantized as\n"
             "--quantization fp8 does) in every backend.\n",
             argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches = {1, 64, 256};
  int context = 512, steps = 5, prefill = 0;
  bool fp8 = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
      batches = parse_counts(argv[++i]);
      if (batches.empty()) return usage(argv[0]);
    } else if (std::strcmp(argv[i], "--context") == 0 && i + 1 < argc) {
      context = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--mixed") == 0 && i + 1 < argc) {
      prefill = std::max(0, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--fp8") == 0) {
      fp8 = true;
    } else {
      return usage(argv[0]);
    }
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_step_profile_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  try {
    const ModelConfig c = synthetic_config("llama-3.1-8b");
    const SyntheticWeights recipe = synthetic_recipe(c, 1);
    fmt::print("device: {}; Llama-3.1-8B synthetic{}, decode at context {}{}, {} profiled steps\n",
               cuda_device_description(0), fp8 ? ", per-channel FP8 projections" : "", context,
               prefill > 0 ? fmt::format(" beside a {}-token prompt chunk", prefill) : "", steps);
    // --fp8: one host copy of the weights, quantized once, uploaded to every model.
    std::unique_ptr<ModelWeights> host;
    if (fp8) {
      progress("fp8: making the weights on the host (fp32) and quantizing the projections");
      host = std::make_unique<ModelWeights>(make_synthetic_weights(c, 1));
      quantize_weights_fp8(*host, c);
    }
    auto make_model = [&](Ops& ops) {
      return fp8 ? std::make_unique<LlamaModel>(c, *host, ops)
                 : std::make_unique<LlamaModel>(c, recipe, ops);
    };
    // Both backends at once (four copies of the weights: ~64 GB), so that each batch's table
    // is printed as soon as it is measured: a run cut short keeps the batches it finished.
    struct Side {
      std::unique_ptr<Ops> ops;
      std::unique_ptr<ProfilingOps> prof;
      std::unique_ptr<LlamaModel> model;  // ops through the profiler
      std::unique_ptr<LlamaModel> plain;  // the same ops unwrapped (graph replay)
    };
    Side sides[2];  // [0] an invariant backend, [1] a fast backend
    for (int i = 0; i < 2; ++i) {
      CudaOptions o;
      o.mode = i == 0 ? NumericsMode::kInvariant : NumericsMode::kFast;
      Side& sd = sides[i];
      sd.ops = make_cuda_ops(o);
      sd.prof = std::make_unique<ProfilingOps>(*sd.ops);
      progress("{} backend: generating the weights", i == 0 ? "invariant" : "fast");
      sd.model = make_model(*sd.prof);
      sd.plain = make_model(*sd.ops);
    }
    sides[0].plain->prepare_gemms(*std::max_element(batches.begin(), batches.end()) + prefill);
    for (int b : batches) {
      // invariant; the invariant backend switched to fast; a fast backend.
      Profile p[3];
      for (int sw = 0; sw < 2; ++sw) {
        const NumericsMode n = sw == 0 ? NumericsMode::kInvariant : NumericsMode::kFast;
        Side& sd = sides[0];
        p[sw] = profile_step(*sd.prof, *sd.model, *sd.plain, *sd.ops, c, b, context, prefill, steps,
                             n);
        progress("batch {}: {} {:.2f} ms profiled, {:.2f} ms graph + sampling", b,
                 sw == 0 ? "invariant" : "switched", total_ms(p[sw]), p[sw].graph_sampled_ms);
      }
      Side& fs = sides[1];
      p[2] = profile_step(*fs.prof, *fs.model, *fs.plain, *fs.ops, c, b, context, prefill, steps,
                          NumericsMode::kInvariant);
      progress("batch {}: fast {:.2f} ms profiled, {:.2f} ms graph + sampling", b, total_ms(p[2]),
               p[2].graph_sampled_ms);
      print_table(b, prefill, p[0], p[1], p[2], steps);
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cuda_step_profile_bench: {}\n", e.what());
    return 1;
  }
}
