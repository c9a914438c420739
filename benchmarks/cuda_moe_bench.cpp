// Mixture-of-experts steps on the GPU: synthetic models shaped like OLMoE-1B-7B (16 layers, 64
// experts of 1024, top-8) and Qwen3-30B-A3B (48 layers, 128 experts of 768, top-8; ~61 GB of
// bf16), weights generated in device memory (LlamaModel's recipe constructor, no host copy;
// router rows distinct, so tokens spread over the experts). One model in memory at a time; each
// step runs with the invariant numerics and with the fast ones on the same model
// (StepBatch::numerics: the experts' grouped GEMM and every projection through default
// cuBLAS), so the two columns differ only by the GEMMs.
//
// Rows: decode steps at batch 1, 64, 256 (every sequence at position `context`, its earlier
// KV in zero blocks; logits left on the device, every row's greedy token chosen there and
// downloaded, as the engine runs a step) and one prompt of 2048 tokens prefilled in one step
// (the last row's logits downloaded). MoE steps run eagerly (no CUDA graph: the groups are
// formed on the host, docs/cuda.md "Mixture of experts").
// Prints markdown on stdout (ms a step, tok/s, fast ms ÷ invariant ms) and one
// "RESULT model case invariant_ms fast_ms" line per row for scripts/gpu/moe_gpu.sh, which
// puts them beside the torch peer's (scripts/gpu/peer_torch_moe.py).
// Run: build-cuda/benchmarks/cuda_moe_bench [--models olmoe-1b-7b,qwen3-30b-a3b]
//      [--batches 1,64,256] [--context 512] [--prefill 2048] [--steps N] [--quick]
//      [--moe-grouped-rows R]  (CudaOptions::moe_grouped_rows: up to R expert rows a step in
//      one grouped launch on device offsets, above it one invariant GEMM per expert; 0 always
//      per expert, -1 always one launch; the same bits)
//      (exits without a CUDA device; progress on stderr)
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench_args.h"
#include "decode_step.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "progress_log.h"

using namespace detllm;
using namespace detllm::kernels;
using detllm::bench_util::DecodeStep;

namespace {

using Clock = std::chrono::steady_clock;
const bench_util::ProgressLog progress("cuda_moe_bench");

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int usage(const char* argv0) {
  fmt::print(stderr,
             "usage: {} [--models olmoe-1b-7b,qwen3-30b-a3b] [--batches 1,64,256] "
             "[--context 512] [--prefill 2048] [--steps N] [--quick] [--moe-grouped-rows R]\n",
             argv0);
  return 2;
}

struct Row {
  std::string model, what;
  double invariant_ms = 0, fast_ms = 0;
  int tokens = 0;  // tokens a step
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models = {"olmoe-1b-7b", "qwen3-30b-a3b"};
  std::vector<int> batches = {1, 64, 256};
  int context = 512, prefill = 2048, steps = 10;
  int32_t grouped_rows = CudaOptions{}.moe_grouped_rows;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      steps = 3;
    } else if (std::strcmp(argv[i], "--models") == 0 && i + 1 < argc) {
      models = bench_util::parse_names(argv[++i]);
    } else if (std::strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
      batches = bench_util::parse_counts(argv[++i]);
      if (batches.empty()) return usage(argv[0]);
    } else if (std::strcmp(argv[i], "--context") == 0 && i + 1 < argc) {
      context = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--prefill") == 0 && i + 1 < argc) {
      prefill = std::max(0, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--moe-grouped-rows") == 0 && i + 1 < argc) {
      grouped_rows = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else {
      return usage(argv[0]);
    }
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_moe_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  std::vector<Row> rows;
  try {
    const std::string device = cuda_device_description(0);
    fmt::print("# MoE steps on {} (moe_grouped_rows {})\n\n", device, grouped_rows);
    for (const std::string& name : models) {
      const ModelConfig c = synthetic_config(name);
      CudaOptions options;
      options.moe_grouped_rows = grouped_rows;
      auto ops = make_cuda_ops(options);
      const auto t0 = Clock::now();
      const LlamaModel model(c, synthetic_recipe(c, 42), *ops);
      ops->synchronize();
      progress("{}: weights generated in {:.1f} s", name, since(t0));
      int max_rows = prefill;
      for (int b : batches) max_rows = std::max(max_rows, b);
      const auto t1 = Clock::now();
      model.prepare_gemms(max_rows);
      progress("{}: GEMM plans for up to {} rows in {:.1f} s", name, max_rows, since(t1));
      for (int b : batches) {
        DecodeStep step(*ops, c, b, context);
        Row r{name, fmt::format("decode b={} ctx={}", b, context), 0, 0, b};
        for (NumericsMode mode : {NumericsMode::kInvariant, NumericsMode::kFast}) {
          step.set_numerics(mode);
          const double ms = step.time_sampled_ms(model, step.logit_rows(), GraphMode::kOff, 2,
                                                 steps, /*greedy=*/true);
          (mode == NumericsMode::kInvariant ? r.invariant_ms : r.fast_ms) = ms;
          progress("{}: {} {}: {:.3f} ms", name, r.what,
                   mode == NumericsMode::kInvariant ? "invariant" : "fast", ms);
        }
        rows.push_back(r);
        fmt::print("RESULT {} decode_b{} {:.4f} {:.4f}\n", name, b, r.invariant_ms, r.fast_ms);
        std::fflush(stdout);
      }
      if (prefill > 0) {
        Row r{name, fmt::format("prefill {}", prefill), 0, 0, prefill};
        r.invariant_ms =
            bench_util::prefill_ms(*ops, model, c, prefill, 1, steps, NumericsMode::kInvariant);
        r.fast_ms = bench_util::prefill_ms(*ops, model, c, prefill, 1, steps, NumericsMode::kFast);
        progress("{}: {}: invariant {:.2f} ms, fast {:.2f} ms", name, r.what, r.invariant_ms,
                 r.fast_ms);
        rows.push_back(r);
        fmt::print("RESULT {} prefill_{} {:.4f} {:.4f}\n", name, prefill, r.invariant_ms,
                   r.fast_ms);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "cuda_moe_bench: {}\n", e.what());
    return 1;
  }
  fmt::print("\n| model | step | invariant ms | fast ms | invariant tok/s | fast ÷ invariant |\n");
  fmt::print("|---|---|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.0f} | {:.3f} |\n", r.model, r.what, r.invariant_ms,
               r.fast_ms, r.tokens / (r.invariant_ms * 1e-3), r.fast_ms / r.invariant_ms);
  }
  fmt::print(
      "\nfast ÷ invariant: the fast step's time over the invariant one's (1.0 = as fast; the "
      "target is ≥ 0.95). MoE steps run eagerly; {} timed steps after 2 warm-ups (prefill: 1).\n",
      steps);
  return 0;
}
