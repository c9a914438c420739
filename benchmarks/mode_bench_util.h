// Shared by the mode benchmarks (cuda_guarantee_matrix_bench, cuda_nondeterminism_bench):
// the --modes list and the backend that runs a mode (the CPU kernels in every mode, or CUDA
// with the mode's numerics, determinism/modes.h).
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "determinism/modes.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

namespace detllm::bench_util {

// "fast,invariant" → the modes, in order; throws detllm::Error naming an unknown one.
inline std::vector<DeterminismMode> parse_modes(const std::string& list) {
  std::vector<DeterminismMode> out;
  std::stringstream ss(list);
  for (std::string name; std::getline(ss, name, ',');) out.push_back(parse_determinism_mode(name));
  return out;
}

// A Target::make_ops for `mode` on `backend` ("cpu" or "cuda").
// kv_fp8: the FP8 KV cache (--kv-dtype fp8; scales bounded from the model's host weights).
inline std::function<std::unique_ptr<kernels::Ops>(int)> ops_for(const std::string& backend,
                                                                 DeterminismMode mode, int device,
                                                                 bool kv_fp8 = false) {
  if (backend == "cpu") {
    return [kv_fp8](int n) { return kernels::make_cpu_ops(n, CpuActivations::kF32, kv_fp8); };
  }
  kernels::CudaOptions o = kernels::cuda_options_for(mode_info(mode).backend, device);
  if (kv_fp8) o.kv_dtype = DType::kF8E4M3;
  return [o](int) { return kernels::make_cuda_ops(o); };
}

// The options both mode benchmarks take: --model, --backend, --modes, --wide-layers,
// --wide-vocab, --device, --kv-dtype fp8.
struct ModeBenchArgs {
  std::string model_name = "tiny-llama", backend = "cuda";
  std::string modes;  // the --modes list; each benchmark sets its default
  int device = 0, wide_layers = 2, wide_vocab = 4096;
  bool kv_fp8 = false;

  // Takes option `a` (its value from next()) when it is one of the above; false otherwise.
  template <typename Next>
  bool parse(const std::string& a, Next&& next) {
    if (a == "--model") {
      model_name = next();
    } else if (a == "--backend") {
      backend = next();
    } else if (a == "--modes") {
      modes = next();
    } else if (a == "--wide-layers") {
      wide_layers = std::stoi(next());
    } else if (a == "--wide-vocab") {
      wide_vocab = std::stoi(next());
    } else if (a == "--device") {
      device = std::stoi(next());
    } else if (a == "--kv-dtype") {
      const std::string v = next();
      if (v != "fp8" && v != "auto") throw std::runtime_error("--kv-dtype takes fp8 or auto");
      kv_fp8 = v == "fp8";
    } else {
      return false;
    }
    return true;
  }
};

// Validates --backend; false (after saying so) when CUDA was asked for and no GPU is visible.
inline bool backend_usable(const std::string& backend) {
  if (backend != "cpu" && backend != "cuda") throw std::runtime_error("--backend cpu|cuda");
  if (backend == "cuda" && kernels::cuda_device_count() == 0) {
    std::printf("no CUDA device visible: run with --backend cpu, or on the GPU machine\n");
    return false;
  }
  return true;
}

}  // namespace detllm::bench_util
