// ModelConfig::from_gguf: GGUF metadata under the architecture's namespace ("llama.", "qwen2.",
// ...). Every key there is read, skipped by name, or refused by name: a setting that changes
// numerics and that is not implemented (sliding windows, soft-capping, partial RoPE, MoE,
// ALiBi, yarn) is never defaulted. Integers are range-checked in 64 bits before narrowing.
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
    "attention.causal",
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
  } else {
    throw_error("{}: unsupported architecture '{}' (supported: llama, mistral, qwen2, qwen3)",
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
  for (const char* k : {"expert_count", "expert_used_count"}) {
    if (r.has(k) && r.integer(k, 0, kMaxInt) != 0) {
      r.refuse(k, std::to_string(r.integer(k, 0, kMaxInt)),
               "mixture-of-experts GGUF files are not "
               "supported yet (load the model's Hugging Face checkpoint instead)");
    }
  }
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
