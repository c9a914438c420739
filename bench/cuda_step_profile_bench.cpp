// Where a decode step's time goes, op by op, on each GEMM numerics: Llama-3.1-8B with synthetic
// weights generated on the GPU, decode steps at the given batch sizes (context 512 by default),
// run eagerly through ProfilingOps (kernels/profiling_ops.h: a sync around every op) on
//   invariant  an invariant backend (verified cuBLASLt plans), as deterministic steps run;
//   switched   the same backend switched to fast numerics (Ops::set_gemm_numerics), as the steps
//              of non-deterministic requests run under mixed traffic (docs/modes.md);
//   fast       a fast backend (CudaOptions::mode = fast), as the `fast` mode runs.
// Prints, per batch, ms per step of every op and shape in the three and the ratio invariant ÷
// fast, plus the unprofiled step (graph replay, device sampling) for scale. The question it
// answers (docs/perf.md): why the invariant decode step measured 0.92 of fast at batch 64.
// Run: build-cuda/bench/cuda_step_profile_bench [--batches 1,64,256] [--context N] [--steps N]
// (exits without a CUDA device; progress on stderr, markdown on stdout)
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "decode_step.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "kernels/profiling_ops.h"
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
// times the same step replayed from a graph with device sampling on the unwrapped `ops`.
Profile profile_step(ProfilingOps& prof, const LlamaModel& model, const LlamaModel& plain, Ops& ops,
                     const ModelConfig& c, int batch, int context, int steps) {
  Profile p;
  DecodeStep step(ops, c, batch, context);
  std::vector<int32_t> rows(static_cast<size_t>(batch));
  std::iota(rows.begin(), rows.end(), 0);
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

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* q = s; *q;) {
    v.push_back(std::max(1, std::atoi(q)));
    while (*q && *q != ',') ++q;
    if (*q == ',') ++q;
  }
  return v;
}

int usage(const char* argv0) {
  fmt::print(stderr,
             "usage: {} [--batches 1,64,256] [--context N] [--steps N]\n"
             "Llama-3.1-8B decode steps (synthetic weights on the GPU), op by op (a sync "
             "around every op), on the invariant numerics, the same backend switched to fast, "
             "and a fast backend; markdown on stdout.\n",
             argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches = {1, 64, 256};
  int context = 512, steps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
      batches = parse_list(argv[++i]);
    } else if (std::strcmp(argv[i], "--context") == 0 && i + 1 < argc) {
      context = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
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
    fmt::print("device: {}; Llama-3.1-8B synthetic, decode at context {}, {} profiled steps\n",
               cuda_device_description(0), context, steps);
    // [0] invariant, [1] the invariant backend switched to fast, [2] a fast backend.
    std::vector<std::vector<Profile>> prof(3);
    for (int backend = 0; backend < 2; ++backend) {
      CudaOptions o;
      o.mode = backend == 0 ? NumericsMode::kInvariant : NumericsMode::kFast;
      auto ops = make_cuda_ops(o);
      ProfilingOps p(*ops);
      progress("{} backend: generating the weights", backend == 0 ? "invariant" : "fast");
      LlamaModel model(c, recipe, p);  // weights in `ops`' memory, ops through the profiler
      LlamaModel plain(c, recipe, *ops);
      if (backend == 0) plain.prepare_gemms(*std::max_element(batches.begin(), batches.end()));
      for (int b : batches) {
        if (backend == 0) {
          for (int sw = 0; sw < 2; ++sw) {
            const NumericsMode n = sw == 0 ? NumericsMode::kInvariant : NumericsMode::kFast;
            ops->set_gemm_numerics(n);
            prof[sw].push_back(profile_step(p, model, plain, *ops, c, b, context, steps));
            progress("batch {}: {} {:.2f} ms profiled, {:.2f} ms graph + sampling", b,
                     sw == 0 ? "invariant" : "switched", total_ms(prof[sw].back()),
                     prof[sw].back().graph_sampled_ms);
          }
          ops->set_gemm_numerics(NumericsMode::kInvariant);
        } else {
          prof[2].push_back(profile_step(p, model, plain, *ops, c, b, context, steps));
          progress("batch {}: fast {:.2f} ms profiled, {:.2f} ms graph + sampling", b,
                   total_ms(prof[2].back()), prof[2].back().graph_sampled_ms);
        }
      }
    }
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const Profile& inv = prof[0][bi];
      const Profile& sw = prof[1][bi];
      const Profile& fast = prof[2][bi];
      fmt::print(
          "\n### Batch {} (ms per step; graph + device sampling, unprofiled: invariant {:.2f}, "
          "switched {:.2f}, fast {:.2f}, fast ÷ invariant {:.3f})\n\n",
          batches[bi], inv.graph_sampled_ms, sw.graph_sampled_ms, fast.graph_sampled_ms,
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
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cuda_step_profile_bench: {}\n", e.what());
    return 1;
  }
}
