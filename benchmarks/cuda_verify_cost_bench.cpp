// What a speculative verify step costs against a decode step: Llama-3.1-8B with synthetic weights
// generated on the GPU, invariant numerics, `batch` sequences at context C. A decode step runs one
// token per sequence; the verify step of k drafted tokens runs k + 1 per sequence (the last
// accepted token and the k drafts, each a logit row), as the engine schedules it
// (docs/speculative.md). Speculation pays when a verify of k costs less than the tokens it is
// expected to yield; the question here is the cost side: ms per verify step and ÷ the decode step.
//   decode (graph)   the one-token step as the engine runs it: padded, replayed from a CUDA graph;
//   decode (eager)   the same step without the graph;
//   verify (graph)   the (k + 1)-token step as the engine runs it where decode steps are padded:
//                    the window's tokens as decode rows (a block-table row each), a decode step
//                    of batch · (k + 1) rows padded to a row bucket and replayed from a graph
//                    (eager where that passes the largest bucket, 512 rows: marked "eager");
//   verify (chunk)   the same tokens as one chunk per sequence, eager (graphs off);
// and their ratios to the decode step from a graph. The target: a verify of k = 4 at batch 1
// within 1.15× the decode step.
// Only the forward pass is timed (the logits stay on the device); sampling the k + 1 rows is the
// same per-row device sampler as decode.
// Run: build/benchmarks/cuda_verify_cost_bench [--batches 1,8,64] [--ks 1,2,3,4,5,6,7,8]
//      [--context 512] [--steps 20]
// (exits without a CUDA device; progress on stderr, one markdown table per batch on stdout as
// soon as it is measured)
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "bench_args.h"
#include "decode_step.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "progress_log.h"

using namespace detllm;
using namespace detllm::kernels;
using detllm::bench_util::DecodeStep;

namespace {

const bench_util::ProgressLog progress("cuda_verify_cost_bench");

int usage(const char* argv0) {
  fmt::print(stderr,
             "usage: {} [--batches 1,8,64] [--ks 1,...,8] [--context N] [--steps N]\n"
             "Llama-3.1-8B (synthetic weights on the GPU, invariant numerics): ms of a "
             "speculative verify step of k drafts (k + 1 tokens per sequence) against a "
             "one-token decode step, per batch; markdown on stdout.\n",
             argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches = {1, 8, 64};
  std::vector<int> ks = {1, 2, 3, 4, 5, 6, 7, 8};
  int context = 512, steps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
      batches = bench_util::parse_counts(argv[++i]);
      if (batches.empty()) return usage(argv[0]);
    } else if (std::strcmp(argv[i], "--ks") == 0 && i + 1 < argc) {
      ks = bench_util::parse_counts(argv[++i]);
      if (ks.empty()) return usage(argv[0]);
    } else if (std::strcmp(argv[i], "--context") == 0 && i + 1 < argc) {
      context = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else {
      return usage(argv[0]);
    }
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_verify_cost_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  try {
    const ModelConfig c = synthetic_config("llama-3.1-8b");
    fmt::print("device: {}; Llama-3.1-8B synthetic, invariant numerics, context {}, {} timed "
               "steps each\n",
               cuda_device_description(0), context, steps);
    CudaOptions o;
    o.mode = NumericsMode::kInvariant;
    std::unique_ptr<Ops> ops = make_cuda_ops(o);
    progress("generating the weights");
    const SyntheticWeights recipe = synthetic_recipe(c, 1);
    LlamaModel model(c, recipe, *ops);
    const int max_k = *std::max_element(ks.begin(), ks.end());
    progress("preparing the GEMM plans");
    model.prepare_gemms(*std::max_element(batches.begin(), batches.end()) * (max_k + 1));
    const int warmup = 3;
    for (int b : batches) {
      DecodeStep decode(*ops, c, b, context);
      const double graph_ms = decode.time_enqueued_ms(model, decode.logit_rows(), GraphMode::kAuto,
                                                      warmup, steps);
      const double eager_ms = decode.time_enqueued_ms(model, decode.logit_rows(), GraphMode::kOff,
                                                      warmup, steps);
      progress("batch {}: decode {:.3f} ms (graph), {:.3f} ms (eager)", b, graph_ms, eager_ms);
      fmt::print("\n### batch {}: decode step {:.3f} ms (graph), {:.3f} ms (eager)\n\n", b,
                 graph_ms, eager_ms);
      fmt::print("| k drafts | tokens/step | verify ms (graph, decode rows) | ÷ decode (graph) | "
                 "verify ms (chunk, eager) | ÷ decode (graph) |\n"
                 "|---|---|---|---|---|---|\n");
      for (int k : ks) {
        DecodeStep rows(*ops, c, b, context, 0, k + 1, /*window_rows=*/true);
        const int64_t replays = model.step_stats().n_graph_replays;
        const double rows_ms =
            rows.time_enqueued_ms(model, rows.logit_rows(), GraphMode::kAuto, warmup, steps);
        const bool replayed = model.step_stats().n_graph_replays - replays >= steps;
        DecodeStep chunk(*ops, c, b, context, 0, k + 1);
        const double chunk_ms =
            chunk.time_enqueued_ms(model, chunk.logit_rows(), GraphMode::kOff, warmup, steps);
        fmt::print("| {} | {} | {:.3f}{} | {:.3f} | {:.3f} | {:.3f} |\n", k, b * (k + 1), rows_ms,
                   replayed ? "" : " (eager)", rows_ms / graph_ms, chunk_ms, chunk_ms / graph_ms);
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cuda_verify_cost_bench: {}\n", e.what());
    return 1;
  }
}
