// The guarantee matrix (design.md section 3, verify/guarantee_matrix.h): the conformance
// harness against every determinism mode, variations V1–V10 (V11 = CPU threads: --backend cpu
// only), each cell "holds" or "FAILS" with its first mismatch. Expected failures are printed,
// not hidden. A program, not a test: it prints a markdown table and the conditions.
//
//   build-cuda/benchmarks/cuda_guarantee_matrix_bench                       # tiny-llama, CUDA
//   build-cuda/benchmarks/cuda_guarantee_matrix_bench --model wide          # 4096-wide, 2 layers
//   build-cuda/benchmarks/cuda_guarantee_matrix_bench --model /path/m.gguf  # a real model
//   build-cuda/benchmarks/cuda_guarantee_matrix_bench --backend cpu         # the CPU (adds V11)
//   build-cuda/benchmarks/cuda_guarantee_matrix_bench --model wide@fp8 --kv-dtype fp8
//                                    # FP8 projections (@fp8g: 128x128 blocks) and FP8 KV
//   options: --modes fast,invariant,bi-naive,padded,verified  --requests N  --max-prompt N
//            --max-new N  --seed S  --wide-layers N  --wide-vocab N  --device D  --kv-dtype fp8
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "mode_bench_util.h"
#include "verify/guarantee_matrix.h"

using namespace detllm;
using namespace detllm::conformance;

namespace {

using bench_util::ops_for;
using bench_util::parse_modes;

int run(int argc, char** argv) {
  bench_util::ModeBenchArgs args;
  args.modes = "fast,invariant,bi-naive,padded,verified";
  VariationSpec spec;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return argv[++i];
    };
    if (args.parse(a, next)) continue;
    if (a == "--requests")
      spec.n_requests = std::stoi(next());
    else if (a == "--max-prompt")
      spec.max_prompt = std::stoi(next());
    else if (a == "--max-new")
      spec.max_new_tokens = std::stoi(next());
    else if (a == "--seed")
      spec.seed = std::stoull(next());
    else
      throw std::runtime_error("unknown option " + a + " (see the comment at the top)");
  }
  if (!bench_util::backend_usable(args.backend)) return 2;
  const std::vector<DeterminismMode> modes = parse_modes(args.modes);
  const auto model =
      make_matrix_model(args.model_name, args.wide_layers, args.wide_vocab, args.kv_fp8);
  spec.vocab_size = model->config.vocab_size;
  spec.cpu_threads = args.backend == "cpu";
  auto target_for = [&](DeterminismMode mode) {
    Target t = model->target();
    t.make_ops = ops_for(args.backend, mode, args.device, args.kv_fp8);
    return t;
  };
  auto on_cell = [](const Variation& v, DeterminismMode mode, const CellResult& c) {
    std::fprintf(stderr, "%-4s %-10s %6.1f s  %s\n", v.id.c_str(),
                 std::string(determinism_mode_name(mode)).c_str(), c.seconds, c.text().c_str());
  };
  const GuaranteeMatrix m = run_matrix(target_for, modes, build_variations(spec), on_cell);

  std::printf("## Guarantee matrix: %s\n\n", model->name.c_str());
  std::printf("Backend: %s%s. Model: %s.\n",
              args.backend == "cpu" ? "cpu (the CPU kernels in every "
                                      "mode)"
                                    : kernels::cuda_device_description(args.device).c_str(),
              args.kv_fp8 ? "; FP8 KV cache (--kv-dtype fp8)" : "", model->conditions.c_str());
  std::printf(
      "Workloads: random_workload, %d requests per case (V2/V5/V6 +1, V10 +3 with half "
      "non-deterministic), prompts 1-%d tokens (V3: %d) with shared prefixes, up to %d "
      "new tokens, greedy and seeded sampling, seed %llu; block size 4, max_seqs 64. "
      "Each cell: every case of the variation, deterministic requests compared bit for "
      "bit (tokens, logprobs, fp32 logits at every position); first mismatch below.\n\n",
      spec.n_requests, spec.max_prompt, 2 * spec.max_prompt, spec.max_new_tokens,
      static_cast<unsigned long long>(spec.seed));
  std::printf("Modes: ");
  for (DeterminismMode mode : modes) {
    const ModeInfo& info = mode_info(mode);
    std::printf("`%s` = %s (expected: %s); ", std::string(determinism_mode_name(mode)).c_str(),
                std::string(info.what).c_str(), std::string(info.expected).c_str());
  }
  std::printf("\n\n%s", m.markdown().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_guarantee_matrix_bench: %s\n", e.what());
    return 1;
  }
}
