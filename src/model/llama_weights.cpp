// Maps file tensor names to LayerWeights, validates shapes, un-permutes GGUF q/k rows, cuts
// llama.cpp's stacked expert tensors into one matrix per expert.
#include "model/llama_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <mutex>

#include "core/error.h"
#include "core/fp8.h"
#include "core/parallel.h"
#include "formats/dequant.h"

namespace detllm {
namespace {

struct Names {
  WeightNaming naming;
  std::string layer(int i, const char* gguf, const char* hf) const {
    return naming == WeightNaming::kGguf ? fmt::format("blk.{}.{}", i, gguf)
                                         : fmt::format("model.layers.{}.{}", i, hf);
  }
  std::string global(const char* gguf, const char* hf) const {
    return naming == WeightNaming::kGguf ? gguf : hf;
  }
};

// Planned first, then read in parallel: each tensor is one job (read, widen to fp32, check the
// shape, optional fix-up) on a pool of threads, so a 16 GB checkpoint widens on every core.
// Jobs write to distinct tensors, so the result does not depend on the thread count or order;
// the first failing job in plan order is the error reported.
class Loader {
 public:
  Loader(const TensorSource& source, const std::function<void(size_t, size_t)>& cb,
         WeightStorage storage)
      : source_(source), progress_(cb), storage_(storage) {}

  void tensor(const std::string& name, std::vector<int64_t> shape, HostTensor* out,
              std::function<void(HostTensor&)> fixup = {}) {
    check(source_.has_tensor(name), "{}: missing tensor '{}' (is this a complete model?)",
          source_.path(), name);
    planned_.insert(name);
    jobs_.push_back({name, std::move(shape), out, nullptr, std::move(fixup), {}});
  }
  // A 3-D tensor (n, rows, cols) — llama.cpp's stacked experts, "blk.N.ffn_up_exps.weight" —
  // read once and cut into n matrices (rows, cols), kept in the stored type: every expert's
  // rows are whole rows of whole blocks, so slicing moves bytes and changes no value.
  void stacked(const std::string& name, int64_t rows, int64_t cols, std::vector<HostTensor*> out) {
    check(source_.has_tensor(name), "{}: missing tensor '{}' (is this a complete model?)",
          source_.path(), name);
    planned_.insert(name);
    const int64_t n = static_cast<int64_t>(out.size());
    jobs_.push_back({name, {n, rows, cols}, nullptr, nullptr, {}, std::move(out)});
  }
  void vec(const std::string& name, int64_t n, std::vector<float>* out) {
    check(source_.has_tensor(name), "{}: missing tensor '{}' (is this a complete model?)",
          source_.path(), name);
    planned_.insert(name);
    jobs_.push_back({name, {n}, nullptr, out, {}, {}});
  }
  // n values stored in any shape of n elements whose other dimensions are 1: compressed-tensors'
  // per-head KV scales are (n_kv_heads, 1, 1), its per-tensor ones () or (1).
  void scales(const std::string& name, int64_t n, std::vector<float>* out) {
    vec(name, n, out);
    jobs_.back().unit_dims = true;
  }
  bool has(const std::string& name) const { return source_.has_tensor(name); }

  // Every tensor in the files is loaded or on the allow-list (ignored_tensor): a tensor the
  // config does not use — a layer past its layer count, a bias it does not declare — is
  // refused by name, never dropped, so two different files cannot claim the same numerics.
  void check_all_used(const ModelConfig& c, WeightNaming naming) const {
    std::vector<std::string> unused;
    for (const std::string& name : source_.tensor_names()) {
      if (planned_.count(name) == 0 && !ignored_tensor(name)) unused.push_back(name);
    }
    if (unused.empty()) return;
    std::sort(unused.begin(), unused.end());
    throw_error(
        "{}: {} tensor{} in the file{} {} not used by this {} model as its config describes it, "
        "e.g. '{}'{}. detllm refuses weights it would silently drop: fix the config or remove "
        "the tensors",
        source_.path(), unused.size(), unused.size() == 1 ? "" : "s",
        naming == WeightNaming::kGguf ? "" : "s", unused.size() == 1 ? "is" : "are",
        model_arch_name(c.arch), unused.front(), unused_hint(unused.front(), c, naming));
  }

  void run() {
    const size_t n_jobs = jobs_.size();
    const size_t total = n_jobs;
    std::mutex progress_mutex;
    size_t done = 0;
    parallel_each(n_jobs, 32, [&](size_t i) {
      run_job(jobs_[i]);
      if (progress_) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress_(++done, total);
      }
    });
  }

 private:
  struct Job {
    std::string name;
    std::vector<int64_t> shape;
    HostTensor* tensor;         // destination of a matrix, or
    std::vector<float>* vector;  // of a vector
    std::function<void(HostTensor&)> fixup;
    std::vector<HostTensor*> slices;  // a stacked tensor's matrices, or empty
    bool unit_dims = false;           // a vector stored as (n, 1, ...) or (1, ..., n): scales()
  };

  void run_job(Job& job) const {
    const bool matrix = job.tensor != nullptr || !job.slices.empty();
    HostTensor t = matrix && storage_ == WeightStorage::kStored ? source_.load_stored(job.name)
                                                                : source_.load_f32(job.name);
    // A 1-D GGUF vector may be stored as (1, n); normalise by element count for vectors. A
    // (1, n) matrix may be stored as a vector (llama.cpp's ffn_gate_inp_shexp).
    const auto& shape = job.shape;
    const bool same =
        t.shape == shape || (shape.size() == 1 && t.numel() == shape[0] && t.shape.size() <= 2) ||
        (shape.size() == 2 && shape[0] == 1 && t.shape.size() == 1 && t.shape[0] == shape[1]) ||
        (job.unit_dims && t.numel() == shape[0] &&
         std::count_if(t.shape.begin(), t.shape.end(), [](int64_t d) { return d != 1; }) <= 1);
    check(same, "{}: tensor '{}' has shape {}, expected {}", source_.path(), job.name,
          fmt::join(t.shape, "x"), fmt::join(shape, "x"));
    t.shape = shape;
    if (!job.slices.empty()) {
      slice(t, job.slices);
      return;
    }
    if (job.fixup) job.fixup(t);
    if (job.tensor != nullptr) {
      *job.tensor = std::move(t);
    } else {
      *job.vector = std::move(t.data);
    }
  }

  static void slice(const HostTensor& t, const std::vector<HostTensor*>& out) {
    const int64_t rows = t.shape[1], cols = t.shape[2];
    const size_t bytes = static_cast<size_t>(rows * dtype_row_bytes(t.dtype, cols));
    const auto* p = static_cast<const uint8_t*>(t.ptr());
    for (size_t e = 0; e < out.size(); ++e) {
      HostTensor& m = *out[e];
      m.shape = {rows, cols};
      m.dtype = t.dtype;
      if (t.dtype == DType::kF32) {
        const float* f = t.data.data() + e * static_cast<size_t>(rows * cols);
        m.data.assign(f, f + rows * cols);
      } else {
        m.raw.assign(p + e * bytes, p + (e + 1) * bytes);
      }
    }
  }

  // Tensors that carry nothing the model computes with: the RoPE inverse frequencies some
  // converters store (transformers recomputes them from the config and ignores the stored
  // buffer; llama.cpp likewise).
  static bool ignored_tensor(const std::string& name) {
    auto ends_with = [&](std::string_view suffix) {
      return name.size() >= suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return ends_with(".rotary_emb.inv_freq") || ends_with(".attn_rot_embd");
  }

  // Why a tensor may be unused: a layer index past the config's count, or a bias.
  static std::string unused_hint(const std::string& name, const ModelConfig& c,
                                 WeightNaming naming) {
    const std::string prefix = naming == WeightNaming::kGguf ? "blk." : "model.layers.";
    if (name.rfind(prefix, 0) == 0) {
      const long layer = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (layer >= c.n_layers) {
        return fmt::format(" (layer {} is past the {} layers the config declares in {})", layer,
                           c.n_layers,
                           naming == WeightNaming::kGguf ? "<arch>.block_count"
                                                         : "num_hidden_layers");
      }
    }
    auto ends_with = [&](std::string_view suffix) {
      return name.size() >= suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with(".bias")) return " (the config declares no bias for it)";
    if (ends_with(".k_scale") || ends_with(".v_scale") || ends_with(".kv_scale")) {
      return " (FP8 KV scales: read only under a compressed-tensors quantization_config."
             "kv_cache_scheme, as self_attn.k_scale / v_scale)";
    }
    if (ends_with(".q_scale") || ends_with(".prob_scale")) {
      return " (FP8 attention, queries or probabilities rounded to E4M3, is not implemented)";
    }
    return "";
  }

  const TensorSource& source_;
  const std::function<void(size_t, size_t)>& progress_;
  const WeightStorage storage_;
  std::vector<Job> jobs_;
  std::set<std::string> planned_;
};

// llama.cpp's converter stores q/k rows of each head interleaved (pairs (2i, 2i+1)) for its
// adjacent-pair RoPE; HF's half-split RoPE wants row i and i + head_dim/2. Undo it. Rows move
// whole, so a tensor kept in a block type moves its rows' blocks.
void unpermute_rows(HostTensor& t, int32_t n_heads, int32_t head_dim) {
  const int64_t row_bytes = dtype_row_bytes(t.dtype, t.shape.at(1));
  const int32_t half = head_dim / 2;
  const uint8_t* in = static_cast<const uint8_t*>(t.ptr());
  std::vector<uint8_t> out(t.n_bytes());
  for (int32_t h = 0; h < n_heads; ++h) {
    for (int32_t i = 0; i < half; ++i) {
      for (int32_t j = 0; j < 2; ++j) {
        const int64_t src = static_cast<int64_t>(h) * head_dim + 2 * i + j;
        const int64_t dst = static_cast<int64_t>(h) * head_dim + j * half + i;
        std::copy_n(in + src * row_bytes, row_bytes, out.data() + dst * row_bytes);
      }
    }
  }
  if (t.dtype == DType::kF32) {
    std::memcpy(t.data.data(), out.data(), out.size());
  } else {
    t.raw = std::move(out);
  }
}

// The Hugging Face names of a mixture-of-experts layer's tensors under model.layers.N.
struct MoeNames {
  std::string block;             // "mlp" / "block_sparse_moe"
  const char *gate, *up, *down;  // an expert's projections
};
MoeNames moe_names(ModelArch arch) {
  if (arch == ModelArch::kMixtral) return {"block_sparse_moe", "w1", "w3", "w2"};
  return {"mlp", "gate_proj", "up_proj", "down_proj"};
}

// A GGUF mixture-of-experts layer in llama.cpp's layout: the router blk.N.ffn_gate_inp
// (n_experts, dim); the experts stacked, blk.N.ffn_{gate,up}_exps (n_experts, ffn, dim) and
// blk.N.ffn_down_exps (n_experts, dim, ffn) — or, in files written before llama.cpp stacked
// them, one tensor per expert, blk.N.ffn_{gate,up,down}.E; Qwen2-MoE's shared expert
// blk.N.ffn_{gate,up,down}_shexp and its gate blk.N.ffn_gate_inp_shexp (dim).
void load_gguf_experts(Loader& ld, const ModelConfig& c, int i, LayerWeights& l) {
  const int64_t fe = c.moe.expert_ffn_dim, dim = c.dim;
  auto name = [i](const std::string& rest) { return fmt::format("blk.{}.{}", i, rest); };
  ld.tensor(name("ffn_gate_inp.weight"), {c.moe.n_experts, dim}, &l.router.w);
  l.experts.resize(static_cast<size_t>(c.moe.n_experts));  // no resize below (jobs)
  auto part = [&](Linear MlpWeights::*lin) {
    std::vector<HostTensor*> out;
    for (MlpWeights& e : l.experts) out.push_back(&(e.*lin).w);
    return out;
  };
  if (ld.has(name("ffn_gate_exps.weight")) || !ld.has(name("ffn_gate.0.weight"))) {
    ld.stacked(name("ffn_gate_exps.weight"), fe, dim, part(&MlpWeights::w_gate));
    ld.stacked(name("ffn_up_exps.weight"), fe, dim, part(&MlpWeights::w_up));
    ld.stacked(name("ffn_down_exps.weight"), dim, fe, part(&MlpWeights::w_down));
  } else {
    for (int32_t e = 0; e < c.moe.n_experts; ++e) {
      MlpWeights& m = l.experts[static_cast<size_t>(e)];
      ld.tensor(name(fmt::format("ffn_gate.{}.weight", e)), {fe, dim}, &m.w_gate.w);
      ld.tensor(name(fmt::format("ffn_up.{}.weight", e)), {fe, dim}, &m.w_up.w);
      ld.tensor(name(fmt::format("ffn_down.{}.weight", e)), {dim, fe}, &m.w_down.w);
    }
  }
  if (c.moe.shared_expert_ffn_dim > 0) {
    const int64_t fs = c.moe.shared_expert_ffn_dim;
    ld.tensor(name("ffn_gate_shexp.weight"), {fs, dim}, &l.shared_expert.w_gate.w);
    ld.tensor(name("ffn_up_shexp.weight"), {fs, dim}, &l.shared_expert.w_up.w);
    ld.tensor(name("ffn_down_shexp.weight"), {dim, fs}, &l.shared_expert.w_down.w);
    ld.tensor(name("ffn_gate_inp_shexp.weight"), {1, dim}, &l.shared_expert_gate.w);
  }
}

template <typename L>
std::vector<L*> layer_matrices(auto& l) {
  std::vector<L*> out{&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down};
  if (!l.router.w.empty()) out.push_back(&l.router);
  for (auto& e : l.experts) out.insert(out.end(), {&e.w_gate, &e.w_up, &e.w_down});
  if (!l.shared_expert.w_gate.w.empty()) {
    auto& s = l.shared_expert;
    out.insert(out.end(), {&s.w_gate, &s.w_up, &s.w_down, &l.shared_expert_gate});
  }
  return out;
}

// An FP8 checkpoint's linear layer (docs/models.md, "FP8"): its weight read as the codes'
// exact values, its scales, and what the config says about them; pack_fp8 makes the FP8 rows.
struct Fp8Plan {
  Linear* lin;
  std::string module;           // "model.layers.0.self_attn.q_proj"
  std::vector<float> w_scale;   // channel: (rows); tensor: (1)
  HostTensor block_scale;       // block: (ceil(rows / 128), ceil(cols / 128))
  std::vector<float> in_scale;  // static activations: (1); fbgemm: input_scale_ub (1) or empty
};

// The plan's weight as FP8 rows of core/fp8.h: each value re-encoded (the codes' own values, so
// exactly the stored codes) behind the row's scales.
void pack_fp8(Fp8Plan& p, const ModelConfig& c, const std::string& path) {
  HostTensor& t = p.lin->w;
  const Fp8Config& f = c.fp8;
  const int64_t rows = t.shape.at(0), cols = t.shape.at(1);
  auto scale_ok = [&](float s, const char* what) {
    check(std::isfinite(s) && s > 0.0f, "{}: {}.{} holds {} (scales must be finite and > 0)",
          path, p.module, what, s);
  };
  float input_scale = 0.0f, bound = 0.0f;
  if (f.source == Fp8Config::Source::kFbgemm) {
    bound = p.in_scale.empty() ? f.activation_bound : p.in_scale.at(0);
    scale_ok(bound, "input_scale_ub");
  } else if (f.static_activations) {
    input_scale = p.in_scale.at(0);
    scale_ok(input_scale, "input_scale");
  }
  const bool blocks = f.weight_scales == Fp8Config::WeightScales::kBlock;
  // transformers' fp8: the block rows, activations scaled per 128-column group.
  const DType dt = f.source == Fp8Config::Source::kFineGrained ? DType::kF8E4M3G128
                   : blocks                                    ? DType::kF8E4M3B128
                                                               : DType::kF8E4M3;
  const int64_t n_w = fp8_row_scales(dt, cols) - 2, row_bytes = dtype_row_bytes(dt, cols);
  std::vector<uint8_t> raw(static_cast<size_t>(rows * row_bytes));
  std::vector<float> ws(static_cast<size_t>(n_w));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < n_w; ++b) {
      float s;
      if (blocks) {
        s = p.block_scale.data[static_cast<size_t>((r / kFp8ScaleBlock) * n_w + b)];
      } else {
        s = p.w_scale[f.weight_scales == Fp8Config::WeightScales::kTensor ? 0 : r];
      }
      scale_ok(s, "weight_scale");
      ws[static_cast<size_t>(b)] = s;
    }
    uint8_t* row = raw.data() + r * row_bytes;
    fp8_write_row_header(dt, row, cols, input_scale, bound, ws.data());
    uint8_t* codes = row + 4 * (n_w + 2);
    const float* v = t.data.data() + r * cols;
    for (int64_t k = 0; k < cols; ++k) {
      check(!std::isnan(v[k]), "{}: {}.weight holds a NaN code at row {} column {}", path,
            p.module, r, k);
      codes[k] = float_to_fp8_e4m3(v[k]);
    }
  }
  t.dtype = dt;
  t.data = {};
  t.raw = std::move(raw);
}

}  // namespace

std::vector<const Linear*> LayerWeights::matrices() const {
  return layer_matrices<const Linear>(*this);
}
std::vector<Linear*> LayerWeights::matrices() {
  return layer_matrices<Linear>(*this);
}

ModelWeights load_weights(const TensorSource& source, WeightNaming naming,
                          const ModelConfig& c, const std::function<void(size_t, size_t)>& cb,
                          WeightStorage storage) {
  const Names n{naming};
  const bool gguf = naming == WeightNaming::kGguf;
  Loader ld(source, cb, storage);
  const Fp8Config& f = c.fp8;
  check(!f.active() || !gguf, "{}: FP8 weights come from safetensors checkpoints", source.path());
  check(!f.active() || !f.quantizes("lm_head"),
        "{}: an FP8 lm_head is not implemented (the config's quantization_config quantizes "
        "it; published FP8 checkpoints list lm_head in ignore / modules_to_not_convert)",
        source.path());
  std::deque<Fp8Plan> fp8;  // deque: jobs hold pointers into it
  // The scale tensors of an FP8 checkpoint's quantized module (HF name, weight (out, in)).
  auto plan_fp8 = [&](Linear& l, const std::string& module, int64_t out, int64_t in) {
    if (gguf || !f.quantizes(module)) return;
    Fp8Plan& p = fp8.emplace_back(Fp8Plan{&l, module, {}, {}, {}});
    switch (f.weight_scales) {
      case Fp8Config::WeightScales::kChannel:
        ld.vec(module + ".weight_scale", out, &p.w_scale);
        break;
      case Fp8Config::WeightScales::kTensor:
        ld.vec(module + ".weight_scale", 1, &p.w_scale);
        break;
      case Fp8Config::WeightScales::kBlock:
        // transformers' fp8 names it weight_scale_inv; it multiplies all the same.
        ld.tensor(module + (f.source == Fp8Config::Source::kFineGrained ? ".weight_scale_inv"
                                                                        : ".weight_scale"),
                  {(out + kFp8ScaleBlock - 1) / kFp8ScaleBlock,
                   (in + kFp8ScaleBlock - 1) / kFp8ScaleBlock},
                  &p.block_scale);
        break;
    }
    if (f.source == Fp8Config::Source::kFbgemm) {
      if (ld.has(module + ".input_scale_ub")) ld.vec(module + ".input_scale_ub", 1, &p.in_scale);
    } else if (f.static_activations) {
      ld.vec(module + ".input_scale", 1, &p.in_scale);
    }
  };
  // A mixture of experts' gates (the router, Qwen2-MoE's shared-expert gate) stay as stored.
  auto unquantized_gate = [&](const std::string& module) {
    check(gguf || !f.quantizes(module),
          "{}: the config's quantization_config quantizes {}, a mixture-of-experts gate: FP8 "
          "gates are not implemented (published FP8 checkpoints keep them unquantized: list it "
          "in ignore / modules_to_not_convert)",
          source.path(), module);
  };
  auto linear = [&](Linear& l, int i, const char* g, const char* h, int64_t out, int64_t in,
                    bool bias, std::function<void(HostTensor&)> fixup = {}) {
    ld.tensor(n.layer(i, fmt::format("{}.weight", g).c_str(), fmt::format("{}.weight", h).c_str()),
              {out, in}, &l.w, std::move(fixup));
    plan_fp8(l, fmt::format("model.layers.{}.{}", i, h), out, in);
    if (bias) {
      ld.vec(n.layer(i, fmt::format("{}.bias", g).c_str(), fmt::format("{}.bias", h).c_str()), out,
             &l.bias);
    }
  };

  ModelWeights w;
  ld.tensor(n.global("token_embd.weight", "model.embed_tokens.weight"), {c.vocab_size, c.dim},
            &w.tok_embd);
  w.layers.resize(c.n_layers);  // no resize below: jobs hold pointers into it
  // The checkpoint's FP8 KV scales as stored (K, V), spread over the KV heads after the read.
  std::vector<std::array<std::vector<float>, 2>> kv_read(static_cast<size_t>(c.n_layers));
  // GGUF "llama" files (Mixtral included) store q/k rows permuted for llama.cpp's interleaved
  // RoPE; llama.cpp runs qwen2/qwen3/qwen2moe/qwen3moe/olmoe with NeoX RoPE, unpermuted.
  const bool permuted = gguf && (c.arch == ModelArch::kLlama || c.arch == ModelArch::kMistral ||
                                 c.arch == ModelArch::kMixtral);
  std::function<void(HostTensor&)> unpermute_q, unpermute_k;
  if (permuted) {
    unpermute_q = [&c](HostTensor& t) { unpermute_rows(t, c.n_heads, c.head_dim); };
    unpermute_k = [&c](HostTensor& t) { unpermute_rows(t, c.n_kv_heads, c.head_dim); };
  }
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[i];
    ld.vec(n.layer(i, "attn_norm.weight", "input_layernorm.weight"), c.dim, &l.attn_norm);
    linear(l.wq, i, "attn_q", "self_attn.q_proj", c.q_dim(), c.dim, c.qkv_bias, unpermute_q);
    linear(l.wk, i, "attn_k", "self_attn.k_proj", c.kv_dim(), c.dim, c.qkv_bias, unpermute_k);
    linear(l.wv, i, "attn_v", "self_attn.v_proj", c.kv_dim(), c.dim, c.qkv_bias);
    linear(l.wo, i, "attn_output", "self_attn.o_proj", c.dim, c.q_dim(), false);
    if (c.qk_norm) {
      ld.vec(n.layer(i, "attn_q_norm.weight", "self_attn.q_norm.weight"), c.q_norm_dim(),
             &l.q_norm);
      ld.vec(n.layer(i, "attn_k_norm.weight", "self_attn.k_norm.weight"), c.k_norm_dim(),
             &l.k_norm);
    }
    if (!gguf && f.kv_scales != Fp8Config::KvScales::kNone) {
      const int64_t per = f.kv_scales == Fp8Config::KvScales::kHead ? c.n_kv_heads : 1;
      ld.scales(fmt::format("model.layers.{}.self_attn.k_scale", i), per, &kv_read[i][0]);
      ld.scales(fmt::format("model.layers.{}.self_attn.v_scale", i), per, &kv_read[i][1]);
    }
    ld.vec(n.layer(i, "ffn_norm.weight", "post_attention_layernorm.weight"), c.dim, &l.ffn_norm);
    if (c.moe.active() && gguf) {
      load_gguf_experts(ld, c, i, l);
    } else if (c.moe.active()) {
      const MoeNames mn = moe_names(c.arch);
      const int64_t fe = c.moe.expert_ffn_dim;
      auto hf = [&](const std::string& rest) { return fmt::format("model.layers.{}.{}", i, rest); };
      auto proj = [&](Linear& lin, const std::string& module, int64_t out, int64_t in) {
        ld.tensor(hf(module + ".weight"), {out, in}, &lin.w);
        plan_fp8(lin, hf(module), out, in);
      };
      auto mlp = [&](MlpWeights& m, const std::string& prefix, const char* g, const char* u,
                     const char* d, int64_t ffn) {
        proj(m.w_gate, fmt::format("{}.{}", prefix, g), ffn, c.dim);
        proj(m.w_up, fmt::format("{}.{}", prefix, u), ffn, c.dim);
        proj(m.w_down, fmt::format("{}.{}", prefix, d), c.dim, ffn);
      };
      unquantized_gate(hf(mn.block + ".gate"));
      ld.tensor(hf(mn.block + ".gate.weight"), {c.moe.n_experts, c.dim}, &l.router.w);
      l.experts.resize(static_cast<size_t>(c.moe.n_experts));  // no resize below (jobs)
      for (int32_t e = 0; e < c.moe.n_experts; ++e) {
        mlp(l.experts[e], fmt::format("{}.experts.{}", mn.block, e), mn.gate, mn.up, mn.down, fe);
      }
      if (c.moe.shared_expert_ffn_dim > 0) {
        mlp(l.shared_expert, "mlp.shared_expert", "gate_proj", "up_proj", "down_proj",
            c.moe.shared_expert_ffn_dim);
        unquantized_gate(hf("mlp.shared_expert_gate"));
        ld.tensor(hf("mlp.shared_expert_gate.weight"), {1, c.dim}, &l.shared_expert_gate.w);
      }
    } else {
      linear(l.w_gate, i, "ffn_gate", "mlp.gate_proj", c.ffn_dim, c.dim, false);
      linear(l.w_up, i, "ffn_up", "mlp.up_proj", c.ffn_dim, c.dim, false);
      linear(l.w_down, i, "ffn_down", "mlp.down_proj", c.dim, c.ffn_dim, false);
    }
  }
  ld.vec(n.global("output_norm.weight", "model.norm.weight"), c.dim, &w.out_norm);
  const std::string head = n.global("output.weight", "lm_head.weight");
  if (!c.tied_embeddings || ld.has(head)) ld.tensor(head, {c.vocab_size, c.dim}, &w.lm_head.w);
  if (gguf && ld.has("rope_freqs.weight")) {
    ld.vec("rope_freqs.weight", c.head_dim / 2, &w.rope_freq_factors);
  }
  ld.check_all_used(c, naming);
  ld.run();
  for (Fp8Plan& p : fp8) pack_fp8(p, c, source.path());
  for (int i = 0; i < c.n_layers; ++i) {
    if (kv_read[i][0].empty()) continue;
    std::vector<float>& out = w.layers[i].kv_cache_scales;
    out.resize(static_cast<size_t>(2 * c.n_kv_heads));
    for (int kv = 0; kv < 2; ++kv) {
      const std::vector<float>& v = kv_read[i][kv];
      for (int32_t h = 0; h < c.n_kv_heads; ++h) {
        const float s = v[v.size() == 1 ? 0 : static_cast<size_t>(h)];
        check(std::isfinite(s) && s > 0.0f,
              "{}: model.layers.{}.self_attn.{}_scale holds {} (KV scales must be finite and > 0)",
              source.path(), i, kv == 0 ? 'k' : 'v', s);
        out[static_cast<size_t>(kv * c.n_kv_heads + h)] = s;
      }
    }
  }
  return w;
}

void dequantize_weights(ModelWeights& w) {
  dequantize_tensor(w.tok_embd);
  for (LayerWeights& l : w.layers) {
    for (Linear* lin : l.matrices()) dequantize_tensor(lin->w);
  }
  dequantize_tensor(w.lm_head.w);
}

}  // namespace detllm
