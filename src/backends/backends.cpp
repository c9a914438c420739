// The backend factory (backends.h). DETLLM_HAVE_CUDA comes from the detllm_cuda target, which
// the CLI and the Python extension link when it exists (CMakeLists.txt, python/CMakeLists.txt);
// this file is the only #if on it outside src/kernels/cuda.
#include "backends/backends.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/version.h"
#include "determinism/fingerprint.h"
#include "kernels/ref/q8_act_ref.h"
#include "model/fp8_weights.h"
#include "model/model_loader.h"
#include "model/tp_group.h"
#if defined(DETLLM_HAVE_CUDA)
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8_rule.h"
#endif

namespace detllm::backends {
namespace {

// The FP8 KV class by the source of its scales, in the build string (the fingerprint): bounded
// from the weights (model/fp8_weights.h fp8_kv_scales), or the checkpoint's own.
constexpr std::string_view kKvFp8WeightBound = "fp8-e4m3-weight-bound";
constexpr std::string_view kKvFp8Checkpoint = "fp8-e4m3-checkpoint-scales";

// A checkpoint with FP8 KV scales (compressed-tensors kv_cache_scheme): under --kv-dtype fp8
// the cache takes them (fp8_kv_scales), and the build string says so; an explicit bf16 / fp32
// KV runs without them, saying so; no --kv-dtype at all is refused rather than drop them unasked.
void apply_checkpoint_kv_scales(Backend& b, const ModelWeights& w) {
  if (!has_checkpoint_kv_scales(w)) return;
  const bool kv_fp8 = b.ops != nullptr && b.ops->kv_fp8();
  if (kv_fp8) {
    const size_t at = b.build.find(kKvFp8WeightBound);
    check(at != std::string::npos, "install_backend: an FP8 KV backend without its KV class in "
          "its build string '{}'", b.build);
    b.build.replace(at, kKvFp8WeightBound.size(), kKvFp8Checkpoint);
    b.description.append("; kv scales=checkpoint");
    return;
  }
  check(b.kv_dtype != KvDType::kAuto,
        "the checkpoint stores FP8 KV cache scales (quantization_config.kv_cache_scheme, "
        "self_attn.k_scale / v_scale): pass --kv-dtype fp8 to run its FP8 KV cache with them "
        "(Python: kv_cache_dtype='fp8'), or --kv-dtype bf16 / fp32 to run a full-precision KV "
        "cache without them");
  b.description.append(fmt::format("; the checkpoint's FP8 KV scales unused (kv={})",
                                   kv_dtype_name(b.kv_dtype)));
}

}  // namespace

bool cuda_backend_built() {
#if defined(DETLLM_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

std::optional<DeterminismMode> selected_mode(const BackendOptions& o) {
  if (o.mode.empty()) return std::nullopt;
  return parse_determinism_mode(o.mode);
}

Backend make_backend(const BackendOptions& o, NumericsMode mode, int n_threads) {
  BackendNumerics n;
  n.numerics = mode;
  return make_backend(o, n, n_threads);
}

Backend make_backend(const BackendOptions& o, const BackendNumerics& mode_numerics,
                     int n_threads) {
  BackendNumerics numerics = mode_numerics;
  numerics.kv_dtype = parse_kv_dtype(o.kv_dtype);
  check(o.tensor_parallel >= 0, "--tensor-parallel {}: give a degree of at least 1",
        o.tensor_parallel);
  numerics.tp_canonical = o.tensor_parallel > 0;
  numerics.cpu_activations = parse_cpu_activations(o.activations);
  const NumericsMode mode = numerics.numerics;
  Backend b;
  b.kv_dtype = numerics.kv_dtype;
  check(o.quantization.empty() || o.quantization == "fp8",
        "--quantization '{}' is not supported (fp8: FP8 weights made at load, docs/models.md)",
        o.quantization);
  b.quantization = o.quantization;
  if (o.backend == "cpu") {
    check(numerics.kv_dtype != KvDType::kBF16,
          "--kv-dtype bf16: the cpu backend stores KV in fp32 only; use --kv-dtype fp32 (or "
          "auto), or --backend cuda");
    b.fingerprint_name = "cpu";
    b.cpu_activations = numerics.cpu_activations;
    const bool kv_fp8 = numerics.kv_dtype == KvDType::kFP8;
    check(!kv_fp8 || !numerics.tp_canonical, "--kv-dtype fp8 is not implemented with "
          "--tensor-parallel; drop one of them");
    // The default class keeps the build string it always had, so its fingerprints are
    // unchanged; the q8 class is another numerics and says so.
    const bool q8 = numerics.cpu_activations == CpuActivations::kQ8;
    // The FP8 KV class: E4M3 with per-(layer, KV head) scales bounded from the weights
    // (model/fp8_weights.h fp8_kv_scales), a rule of this build: named here.
    b.build = fmt::format("{}{}{}", cpu_simd_arch(), q8 ? ";act=q8" : "",
                          kv_fp8 ? fmt::format(";kv={}", kKvFp8WeightBound) : "");
    b.description = fmt::format("cpu; build={}{}{}", cpu_simd_arch(),  // as docs/server.md shows
                                q8 ? "; activations=q8" : "", kv_fp8 ? "; kv=fp8" : "");
    if (numerics.tp_canonical) {
      // --threads is the total: each rank its share (at least one; N > threads oversubscribes).
      const int per_rank = std::max(1, n_threads / o.tensor_parallel);
      b.tensor_parallel = o.tensor_parallel;
      // The q8 class too: its activations are rounded per 32-block from each chunk's start,
      // and the canonical chunks are whole blocks, so every degree rounds the same blocks
      // (TensorParallel.DefaultModelQ8EveryDegreeGivesTheSameBits).
      const CpuActivations act = numerics.cpu_activations;
      b.make_rank_ops = [per_rank, act] { return kernels::make_cpu_ops(per_rank, act); };
      b.description += fmt::format("; threads per rank={}", per_rank);
      return b;
    }
    b.ops = kernels::make_cpu_ops(n_threads, numerics.cpu_activations, kv_fp8);
    return b;
  }
  check(o.backend == "cuda", "unknown backend '{}' (valid: cpu, cuda)", o.backend);
  check(numerics.kv_dtype != KvDType::kFP8 || !numerics.tp_canonical,
        "--kv-dtype fp8 is not implemented with --tensor-parallel; drop one of them");
  check(numerics.cpu_activations == CpuActivations::kF32,
        "--activations q8 is a cpu numerics class (activations rounded to int8 per 32-block "
        "before quantized matmuls); the cuda backend runs bf16 weights: drop --activations, or "
        "use --backend cpu");
#if defined(DETLLM_HAVE_CUDA)
  kernels::CudaOptions cuda = kernels::cuda_options_for(numerics, o.device);
  cuda.gemm_plan_cache = {.enabled = !o.no_gemm_plan_cache, .path = o.gemm_plan_cache};
  b.ops = kernels::make_cuda_ops(cuda);  // throws, saying why, without a usable GPU
  const std::string device = kernels::cuda_device_description(o.device);
  b.fingerprint_name = "cuda:" + device;
  // The FP8 KV class: E4M3 codes with per-(layer, KV head) scales bounded from the weights
  // (the CPU's rule, model/fp8_weights.h), read as bf16(dec · scale): named as the CPU names it.
  const DType kv_type = b.ops->kv_dtype();
  const std::string_view kv = kv_type == DType::kF32        ? "fp32"
                              : kv_type == DType::kF8E4M3 ? kKvFp8WeightBound
                                                          : "bf16";
  b.build = fmt::format("sm_90a;kv={}", kv);
  b.description =
      fmt::format("cuda; device {}: {}; numerics={}{}; kv={}", o.device, device,
                  numerics_mode_name(mode), numerics.gemm_fixed_tile ? "; gemm=fixed-tile" : "",
                  kv);
  if (numerics.tp_canonical) {
    // Ranks as threads on this one device, each with its own CUDA ops (stream, GEMM plans):
    // the canonical partition's bits at any degree (docs/tensor_parallel.md). One rank a GPU
    // is not built yet. The probe above stays rank 0's ops.
    b.tensor_parallel = o.tensor_parallel;
    auto first = std::make_shared<std::unique_ptr<kernels::Ops>>(std::move(b.ops));
    b.make_rank_ops = [first, cuda]() -> std::unique_ptr<kernels::Ops> {
      if (*first) return std::move(*first);
      return kernels::make_cuda_ops(cuda);
    };
    b.description += fmt::format("; all {} ranks on device {}", o.tensor_parallel, o.device);
  }
  return b;
#else
  (void)mode;
  throw_error(
      "this build has no CUDA backend: rebuild with -DDETLLM_CUDA=ON on a machine with "
      "nvcc (docs/cuda.md), or use --backend cpu");
#endif
}

std::string gemm_plan_summary(const kernels::Ops& ops) {
#if defined(DETLLM_HAVE_CUDA)
  const kernels::CudaGemmPlanFileSummary s = kernels::cuda_gemm_plan_file_summary(ops);
  if (s.plans == 0) return "";
  if (s.path.empty())
    return fmt::format("{} GEMM plans tuned ({} on cuBLASLt); not persisted", s.plans,
                       kernels::cuda_gemm_lt_plan_count(ops));
  return fmt::format(
      "{} GEMM plans: {} from {} ({} cuBLASLt re-verified bit for bit, {} kernel), {} tuned, "
      "{} rejected; file written {} time(s)",
      s.plans, s.reverified + s.kernel_from_file, s.path, s.reverified, s.kernel_from_file,
      s.tuned, s.rejected, s.saves);
#else
  (void)ops;
  return "";
#endif
}

namespace {

// Whether any matrix of `w` is held in a block type the q8-activation class rounds for (the
// CPU backend's own dispatch test, kernels/ref/q8_act_ref.h).
bool has_q8_activation_matrix(const ModelWeights& w) {
  for (const LayerWeights& l : w.layers)
    for (const Linear* m : l.matrices())
      if (kernels::ref::q8_act_weight_dtype(m->w.dtype)) return true;
  return kernels::ref::q8_act_weight_dtype(w.lm_head_tensor().dtype);
}

// The FP8 GEMM a device backend's FP8 linears run, for the build string: CUDA's is another
// summation than the CPU's (kernels/ref/fp8_linear.h, which fp8_class_name's class implies), so
// the two are different classes. "" for host backends.
std::string device_fp8_rule(const Backend& b, const ModelWeights& w) {
#if defined(DETLLM_HAVE_CUDA)
  if (b.ops && !b.ops->host_memory()) {
    // Each FP8 row type the model holds names its GEMM's rule (per channel, 128-column blocks).
    std::string rule;
    for (DType t : fp8_weight_dtypes(w)) {
      if (!rule.empty()) rule += '+';
      rule += kernels::cuda_fp8_gemm_rule(kernels::kCudaFp8DefaultSplits, t);
    }
    return rule;
  }
#else
  (void)b;
  (void)w;
#endif
  return "";
}

}  // namespace

void check_activations_apply(const Backend& backend, const ModelWeights& weights) {
  check(backend.cpu_activations != CpuActivations::kQ8 || has_q8_activation_matrix(weights),
        "--activations q8: this model holds no Q4_0, Q4_1 or Q8_0 matrix, so there is nothing "
        "to round activations for (the class would change the fingerprint, not a bit); drop "
        "--activations q8, or use a GGUF quantized to Q4_0/Q4_1/Q8_0");
}

FingerprintInputs backend_fingerprint_inputs(const Backend& backend, uint64_t weights_hash,
                                             const DeterminismPolicy& policy,
                                             bool deterministic) {
  FingerprintInputs in;
  in.weights_hash = weights_hash;
  in.backend = backend.fingerprint_name;
  in.backend_build = backend.build;
  in.numerics_mode = std::string(fingerprint_mode_name(policy, deterministic));
  return in;
}

std::string backend_fingerprint(const Backend& backend, uint64_t weights_hash,
                                const DeterminismPolicy& policy, bool deterministic) {
  return numerics_fingerprint(
      backend_fingerprint_inputs(backend, weights_hash, policy, deterministic));
}

void install_backend(ModelBundle& bundle, Backend& backend) {
  check(backend.ops != nullptr || backend.make_rank_ops,
        "install_backend: the backend was already installed");
  check_activations_apply(backend, bundle.model->weights);
  ModelWeights& w = bundle.model->weights;
  if (backend.quantization == "fp8" && !bundle.fp8_made_at_load) {
    // FP8 weights made at load: new bytes, so a new weights digest (the fingerprint's).
    quantize_weights_fp8(w, bundle.model->config);
    bundle.model->weights_hash = hash_model_weights(w);
    bundle.fp8_made_at_load = true;
  }
  check(backend.quantization == "fp8" || !bundle.fp8_made_at_load,
        "install_backend: the weights were quantized to FP8 at an earlier install; this backend "
        "has no --quantization fp8 (load the model again)");
  if (has_fp8_weights(w)) {
    check(backend.tensor_parallel == 0, "--tensor-parallel: FP8 weights are not implemented "
          "with tensor parallelism (their rows carry scales; the canonical chunks cut columns)");
    // The FP8 class by name in the fingerprint (the weights digest covers the scales too).
    const std::string fp8 = fp8_class_name(w);
    backend.build.append(";").append(fp8);
    backend.description.append("; ").append(fp8);
    if (const std::string rule = device_fp8_rule(backend, w); !rule.empty()) {
      backend.build.append(";").append(rule);
    }
  }
  apply_checkpoint_kv_scales(backend, w);
  bundle.llama.reset();  // before its ops go away
  bundle.tp.reset();
  bundle.ops.reset();
  if (backend.tensor_parallel > 0) {
    const ModelConfig& c = bundle.model->config;
    check(!bundle.model->weights.layers.empty() || c.n_layers == 0,
          "--tensor-parallel: the model's weights are not on the host (ranks slice host weights)");
    bundle.tp = std::make_unique<TpGroup>(c, bundle.model->weights, backend.tensor_parallel,
                                          backend.make_rank_ops);
    backend.make_rank_ops = nullptr;
    const TpChunks k = bundle.tp->chunks();
    // The chunk counts are numerics (the fingerprint reads build); the degree is not.
    backend.build += fmt::format(";tp-chunks=o{}/down{}", k.o, k.ffn);
    backend.description +=
        fmt::format("; tensor-parallel {} (canonical chunks: o_proj {}, down_proj {})",
                    backend.tensor_parallel, k.o, k.ffn);
    return;
  }
  bundle.ops = std::move(backend.ops);
  bundle.llama =
      std::make_unique<LlamaModel>(bundle.model->config, bundle.model->weights, *bundle.ops);
}

}  // namespace detllm::backends
