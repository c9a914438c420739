// ModelConfig::from_gguf: GGUF metadata under the architecture's namespace ("llama.", "qwen2.",
// ...). Every key there is read, skipped by name, or refused by name: a setting that changes
// numerics and that is not implemented (sliding windows, soft-capping, partial RoPE, sigmoid
// expert gating, ALiBi, yarn) is never defaulted. Integers are range-checked in 64 bits before narrowing.
// Other namespaces (general., tokenizer., quantize.) describe the file, not the forward pass.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>
#include <string_view>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/config.h"

namespace detllm {
namespace {

// Keys under "<arch>." read below, or that do not change the forward pass.
const std::set<std::string_view> kKnownArchKeys = {
    "context_length", "embedding_length", "block_count", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
    "attention.key_length", "attention.value_length", "rope.freq_base", "rope.dimension_count",
    "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
    "rope.scaling.finetuned", "vocab_size", "expert_count", "expert_used_count",
    "attention.causal", "expert_feed_forward_length", "expert_shared_feed_forward_length",
    "expert_weights_norm", "expert_weights_scale", "expert_gating_func",
    "leading_dense_block_count",
};

class GgufConfigReader {
 public:
  GgufConfigReader(const GgufFile& g, std::string arch) : g_(g), arch_(std::move(arch)) {}
  std::string key(std::string_view k) const { return arch_ + "." + std::string(k); }
  bool has(std::string_view k) const { return g_.has_key(key(k)); }
  int64_t integer(std::string_view k, int64_t lo, int64_t hi) const {
    const int64_t v = g_.get_int(key(k));
    check(v >= lo && v <= hi, "{}: GGUF metadata {} = {} is out of the supported range [{}, {}]",
          g_.path(), key(k), v, lo, hi);
    return v;
  }
  int64_t integer_or(std::string_view k, int64_t fallback, int64_t lo, int64_t hi) const {
    return has(k) ? integer(k, lo, hi) : fallback;
  }
  bool boolean(std::string_view k) const { return g_.get_bool(key(k)); }
  const std::string& path() const { return g_.path(); }
  double number(std::string_view k) const {
    const double v = g_.get_float(key(k));
    check(std::isfinite(v), "{}: GGUF metadata {} is not finite", g_.path(), key(k));
    return v;
  }
  [[noreturn]] void refuse(std::string_view k, const std::string& value,
                           std::string_view why) const {
    throw_error("{}: GGUF metadata {} = {} is not supported: {}", g_.path(), key(k), value, why);
  }
  // Every key in the architecture's namespace that is not known is refused by name.
  void refuse_unknown() const {
    const std::string prefix = arch_ + ".";
    for (const auto& [k, v] : g_.metadata()) {
      if (k.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string_view rest = std::string_view(k).substr(prefix.size());
      if (kKnownArchKeys.count(rest)) continue;
      throw_error("{}: GGUF metadata key '{}' is not supported: detllm does not know what it "
                  "does to the forward pass, so it refuses the model rather than guess "
                  "(docs/models.md lists the supported keys)",
                  g_.path(), k);
    }
  }

 private:
  const GgufFile& g_;
  std::string arch_;
};

// Mixture of experts, as llama.cpp reads it (src/models/<arch>.cpp there): expert_count and
// expert_used_count; the experts' width from expert_feed_forward_length (qwen2moe, qwen3moe;
// absent: llama.cpp's fallback feed_forward_length / expert_used_count) or
// feed_forward_length (llama = Mixtral, olmoe); Qwen2-MoE's shared expert from
// expert_shared_feed_forward_length (absent: feed_forward_length). Whether the k weights are
// renormalised is fixed by the architecture in llama.cpp — qwen3moe and llama yes, qwen2moe
// and olmoe no — and its converters do not write expert_weights_norm for these; a file that
// states the opposite of the fixed rule is refused (llama.cpp would ignore the key).
void read_gguf_moe(const GgufConfigReader& r, ModelConfig& c) {
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  const bool moe_arch = c.arch == ModelArch::kQwen3Moe || c.arch == ModelArch::kQwen2Moe ||
                        c.arch == ModelArch::kOlmoe;
  const int64_t n_experts = r.integer_or("expert_count", 0, 0, kMaxInt);
  const int64_t n_used = r.integer_or("expert_used_count", 0, 0, kMaxInt);
  if (n_experts == 0 && !moe_arch) {
    if (n_used != 0) {
      r.refuse("expert_used_count", std::to_string(n_used), "the file declares no experts");
    }
    return;  // a dense model
  }
  if (c.arch == ModelArch::kMistral) {
    r.refuse("expert_count", std::to_string(n_experts),
             "mixture-of-experts files of the mistral architecture are not supported (llama.cpp "
             "writes Mixtral as llama)");
  }
  if (c.arch == ModelArch::kLlama) c.arch = ModelArch::kMixtral;
  check(n_experts >= 1 && n_experts <= 1024, "{}: GGUF metadata {} = {} is out of the supported "
        "range [1, 1024] for the mixture-of-experts architecture {}", r.path(),
        r.key("expert_count"), n_experts, model_arch_name(c.arch));
  if (n_used < 1 || n_used > n_experts) {
    r.refuse("expert_used_count", std::to_string(n_used),
             fmt::format("each token uses between 1 and expert_count = {} experts", n_experts));
  }
  MoeConfig& m = c.moe;
  m.n_experts = static_cast<int32_t>(n_experts);
  m.n_experts_used = static_cast<int32_t>(n_used);
  const bool qwen = c.arch == ModelArch::kQwen3Moe || c.arch == ModelArch::kQwen2Moe;
  m.expert_ffn_dim = static_cast<int32_t>(
      qwen ? r.integer_or("expert_feed_forward_length", c.ffn_dim / n_used, 1, 1 << 18)
           : c.ffn_dim);
  if (!qwen && r.has("expert_feed_forward_length") &&
      r.integer("expert_feed_forward_length", 1, 1 << 18) != c.ffn_dim) {
    r.refuse("expert_feed_forward_length",
             std::to_string(r.integer("expert_feed_forward_length", 1, 1 << 18)),
             fmt::format("{}'s experts are feed_forward_length = {} wide in llama.cpp",
                         model_arch_name(c.arch), c.ffn_dim));
  }
  if (c.arch == ModelArch::kQwen2Moe) {
    m.shared_expert_ffn_dim = static_cast<int32_t>(
        r.integer_or("expert_shared_feed_forward_length", c.ffn_dim, 1, 1 << 18));
  } else if (r.has("expert_shared_feed_forward_length")) {
    r.refuse("expert_shared_feed_forward_length",
             std::to_string(r.integer("expert_shared_feed_forward_length", 0, kMaxInt)),
             fmt::format("{} has no shared expert", model_arch_name(c.arch)));
  }
  m.renormalize = c.arch == ModelArch::kQwen3Moe || c.arch == ModelArch::kMixtral;
  if (r.has("expert_weights_norm") && r.boolean("expert_weights_norm") != m.renormalize) {
    r.refuse("expert_weights_norm", m.renormalize ? "false" : "true",
             fmt::format("llama.cpp {} the k expert weights of {} whatever this key says, so the "
                         "file is ambiguous (the architecture's rule: {})",
                         m.renormalize ? "renormalises" : "does not renormalise",
                         model_arch_name(c.arch), m.renormalize ? "true" : "false"));
  }
  if (r.has("expert_weights_scale")) {
    const double s = r.number("expert_weights_scale");
    if (s != 0.0 && s != 1.0) {  // llama.cpp: 0 means unset, i.e. 1
      r.refuse("expert_weights_scale", fmt::format("{}", s),
               "scaled expert weights are not implemented (supported: 1)");
    }
  }
  if (r.has("expert_gating_func")) {
    const int64_t f = r.integer("expert_gating_func", 0, kMaxInt);
    if (f != 1) {  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
      r.refuse("expert_gating_func", std::to_string(f),
               "only the softmax router (1) is implemented (2 is sigmoid)");
    }
  }
  if (r.has("leading_dense_block_count")) {
    const int64_t d = r.integer("leading_dense_block_count", 0, kMaxInt);
    if (d != 0) {
      r.refuse("leading_dense_block_count", std::to_string(d),
               "dense-MLP layers in a mixture-of-experts model are not implemented (supported: "
               "0, every layer a mixture of experts)");
    }
  }
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  ModelConfig c;
  if (arch == "llama") {
    c.arch = ModelArch::kLlama;
  } else if (arch == "mistral") {
    c.arch = ModelArch::kMistral;
  } else if (arch == "qwen2") {
    c.arch = ModelArch::kQwen2;
    c.qkv_bias = true;
  } else if (arch == "qwen3") {
    c.arch = ModelArch::kQwen3;
    c.qk_norm = true;
  } else if (arch == "qwen3moe") {
    c.arch = ModelArch::kQwen3Moe;
    c.qk_norm = true;
  } else if (arch == "qwen2moe") {
    c.arch = ModelArch::kQwen2Moe;
    c.qkv_bias = true;
  } else if (arch == "olmoe") {
    c.arch = ModelArch::kOlmoe;
    c.qk_norm = true;
    c.qk_norm_full = true;
  } else {
    throw_error(
        "{}: unsupported architecture '{}' (supported: llama (Mixtral when it has "
        "expert_count), mistral, qwen2, qwen3, qwen3moe, qwen2moe, olmoe)",
        g.path(), arch);
  }
  const GgufConfigReader r(g, arch);
  r.refuse_unknown();
  if (g.has_key("split.count") && g.get_int("split.count") > 1) {
    throw_error("{}: split GGUF files ({} parts) are not supported: merge them first with "
                "llama.cpp's gguf-split --merge",
                g.path(), g.get_int("split.count"));
  }
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  c.n_layers = static_cast<int32_t>(r.integer("block_count", 1, 1024));
  c.dim = static_cast<int32_t>(r.integer("embedding_length", 1, 1 << 16));
  c.ffn_dim = static_cast<int32_t>(r.integer("feed_forward_length", 1, 1 << 18));
  c.n_heads = static_cast<int32_t>(r.integer("attention.head_count", 1, 1024));
  c.n_kv_heads = static_cast<int32_t>(r.integer_or("attention.head_count_kv", c.n_heads, 1, 1024));
  c.head_dim = static_cast<int32_t>(r.integer_or("attention.key_length", c.dim / c.n_heads, 1, 512));
  if (r.has("attention.value_length")) {
    const int64_t v = r.integer("attention.value_length", 1, 512);
    if (v != c.head_dim) {
      r.refuse("attention.value_length", std::to_string(v),
               fmt::format("value heads of another size than key heads ({}) are not implemented",
                           c.head_dim));
    }
  }
  if (r.has("rope.dimension_count")) {
    const int64_t v = r.integer("rope.dimension_count", 1, 1024);
    if (v != c.head_dim) {
      r.refuse("rope.dimension_count", std::to_string(v),
               fmt::format("partial RoPE is not implemented (RoPE covers the whole head of {})",
                           c.head_dim));
    }
  }
  read_gguf_moe(r, c);
  if (r.has("attention.causal") && !g.get_bool(r.key("attention.causal"))) {
    r.refuse("attention.causal", "false", "only causal attention is implemented");
  }
  c.max_position = static_cast<int32_t>(r.integer("context_length", 1, kMaxInt));
  c.rms_eps = static_cast<float>(r.number("attention.layer_norm_rms_epsilon"));
  // Absent: llama.cpp's default base (10000), which is also every supported architecture's.
  if (r.has("rope.freq_base")) c.rope_theta = static_cast<float>(r.number("rope.freq_base"));
  if (r.has("rope.scaling.type")) {
    const std::string type = g.get_string(r.key("rope.scaling.type"));
    if (type == "linear") {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      check(r.has("rope.scaling.factor"), "{}: GGUF metadata {} is linear but {} is missing",
            g.path(), r.key("rope.scaling.type"), r.key("rope.scaling.factor"));
      c.rope_scaling.factor = static_cast<float>(r.number("rope.scaling.factor"));
    } else if (type != "none") {
      r.refuse("rope.scaling.type", "'" + type + "'",
               "this RoPE scaling is not implemented (supported: none, linear; Llama 3.1 "
               "scaling comes as the rope_freqs tensor)");
    }
  }
  if (g.has_key(r.key("vocab_size"))) {
    c.vocab_size = static_cast<int32_t>(r.integer("vocab_size", 1, 1 << 24));
  } else if (g.has_tensor("token_embd.weight")) {
    const int64_t v = g.tensor_shape("token_embd.weight").at(0);
    check(v > 0 && v <= (1 << 24), "{}: token_embd.weight has {} rows, out of range", g.path(), v);
    c.vocab_size = static_cast<int32_t>(v);
  }
  c.tied_embeddings = !g.has_tensor("output.weight");
  c.validate(g.path());
  return c;
}

}  // namespace detllm
