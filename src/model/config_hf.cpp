// ModelConfig::from_hf_config: a Hugging Face config.json, in both formats transformers writes
// (≥ 5: `rope_parameters` and `dtype`; earlier: `rope_theta` + `rope_scaling` and
// `torch_dtype`). Every key is either read, skipped by name (kIgnoredKeys: no effect on the
// forward pass), or refused by name: a numerics setting we do not implement never falls back to
// a default. Where a key is absent, the architecture's own default applies, as transformers
// documents it (kDefaults; tests/model/config_test.cpp checks the table against the defaults
// transformers itself writes, tests/data/loaders/hf_config_defaults.json).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

#include "core/error.h"
#include "model/config.h"

namespace detllm {
namespace {

using nlohmann::json;

// transformers' defaults for each supported model_type (configuration_{llama,mistral,qwen2,
// qwen3}.py in transformers 5.x). -1: derived (num_key_value_heads = num_attention_heads,
// head_dim = hidden_size / num_attention_heads). sliding_window 0: none.
struct ArchDefaults {
  std::string_view model_type;
  ModelArch arch;
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads, head_dim, max_position_embeddings;
  double rms_norm_eps, rope_theta;
  int64_t sliding_window;   // Mistral: on by default; Qwen: only with use_sliding_window
  int64_t max_window_layers;  // Qwen2/3: layers from this index on use the window
  bool qkv_bias;            // fixed by the architecture (Qwen2), not by a key
  bool qk_norm;
};

constexpr std::array<ArchDefaults, 8> kDefaults{{
    {"llama", ModelArch::kLlama, 32000, 4096, 11008, 32, 32, -1, -1, 2048, 1e-6, 10000.0, 0, 0,
     false, false},
    {"mistral", ModelArch::kMistral, 32000, 4096, 14336, 32, 32, 8, -1, 4096 * 32, 1e-6, 10000.0,
     4096, 0, false, false},
    {"qwen2", ModelArch::kQwen2, 151936, 4096, 22016, 32, 32, 32, -1, 32768, 1e-6, 10000.0, 4096,
     28, true, false},
    {"qwen3", ModelArch::kQwen3, 151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, 10000.0, 4096,
     28, false, true},
    {"qwen3_moe", ModelArch::kQwen3Moe, 151936, 2048, 6144, 24, 32, 4, -1, 32768, 1e-6, 10000.0, 0,
     28, false, true},
    {"mixtral", ModelArch::kMixtral, 32000, 4096, 14336, 32, 32, 8, -1, 131072, 1e-5, 1000000.0, 0,
     0, false, false},
    {"qwen2_moe", ModelArch::kQwen2Moe, 151936, 2048, 5632, 24, 16, 16, -1, 32768, 1e-6, 10000.0, 0,
     28, true, false},
    {"olmoe", ModelArch::kOlmoe, 50304, 2048, 2048, 16, 16, -1, -1, 4096, 1e-5, 10000.0, 0, 0,
     false, true},
}};

// The mixture-of-experts defaults (configuration_{qwen3_moe,mixtral,qwen2_moe,olmoe}.py).
// expert_ffn -1: Mixtral's and OLMoE's experts are intermediate_size wide (no
// moe_intermediate_size key).
struct MoeDefaults {
  ModelArch arch;
  int64_t n_experts, n_experts_used, expert_ffn, shared_expert_ffn;
  bool norm_topk_prob;  // the default of norm_topk_prob; Mixtral has no key and always renormalises
};
constexpr std::array<MoeDefaults, 4> kMoeDefaults{{
    {ModelArch::kQwen3Moe, 128, 8, 768, 0, false},
    {ModelArch::kMixtral, 8, 2, -1, 0, true},
    {ModelArch::kQwen2Moe, 60, 4, 1408, 5632, false},
    {ModelArch::kOlmoe, 64, 8, -1, 0, false},
}};

// Keys that do not change the forward pass: generation defaults, token ids, training-only
// settings, bookkeeping. Anything not read below and not listed here is refused.
const std::set<std::string_view> kIgnoredKeys = {
    "architectures",
    "transformers_version",
    "_name_or_path",
    "name_or_path",
    "model_type",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "initializer_range",
    "use_cache",
    "attention_dropout",
    "pretraining_tp",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "use_return_dict",
    "torchscript",
    "use_bfloat16",
    "tf_legacy_loss",
    "pruned_heads",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "is_decoder",
    "add_cross_attention",
    "tie_encoder_decoder",
    "cross_attention_hidden_size",
    "problem_type",
    "id2label",
    "label2id",
    "finetuning_task",
    "tokenizer_class",
    "prefix",
    "task_specific_params",
    "_attn_implementation",
    "_attn_implementation_autoset",
    "attn_implementation",
    "_commit_hash",
    // Generation defaults of old configs: requests carry their own sampling parameters.
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    // Mixture-of-experts training settings: the auxiliary load-balancing loss, returning router
    // logits, and the router input jitter that transformers applies only in training mode.
    "router_aux_loss_coef",
    "output_router_logits",
    "router_jitter_noise",
    // Fine-tuning tools' stamps.
    "unsloth_version",
    "unsloth_fixed",
};

std::string value_text(const json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

class HfConfigReader {
 public:
  HfConfigReader(const json& j, const std::string& path) : j_(j), path_(path) {}

  const json* find(std::string_view key) {
    read_.insert(std::string(key));
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool present(std::string_view key) { return find(key) != nullptr; }
  // The key's value even when it is JSON null; nullptr when absent.
  const json* raw(std::string_view key) {
    read_.insert(std::string(key));
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }

  // An integer in [lo, hi], range-checked before narrowing; the message quotes the value as
  // written. Integral floats (4096.0) are accepted.
  int64_t integer(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    return integer_value(*v, key, lo, hi);
  }
  int64_t integer_value(const json& v, std::string_view key, int64_t lo, int64_t hi) const {
    int64_t out = 0;
    bool ok = false;
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      ok = u <= static_cast<uint64_t>(hi);
      out = static_cast<int64_t>(std::min<uint64_t>(u, static_cast<uint64_t>(hi)));
    } else if (v.is_number_integer()) {
      out = v.get<int64_t>();
      ok = true;
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      check(std::isfinite(d) && d == std::floor(d), "{}: config.json field '{}' must be an "
            "integer, got {}", path_, key, value_text(v));
      ok = d >= static_cast<double>(lo) && d <= static_cast<double>(hi);
      out = ok ? static_cast<int64_t>(d) : 0;
    } else {
      throw_error("{}: config.json field '{}' must be an integer, got {}", path_, key,
                  value_text(v));
    }
    check(ok && out >= lo && out <= hi, "{}: config.json field '{}' = {} is out of the supported "
          "range [{}, {}]", path_, key, value_text(v), lo, hi);
    return out;
  }
  double number(const json& obj, std::string_view key, double fallback, const char* where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    check(it->is_number(), "{}: config.json field '{}{}' must be a number, got {}", path_, where,
          key, value_text(*it));
    const double d = it->get<double>();
    check(std::isfinite(d), "{}: config.json field '{}{}' is not finite", path_, where, key);
    return d;
  }
  double number(std::string_view key, double fallback) {
    find(key);
    return number(j_, key, fallback, "");
  }
  bool boolean(std::string_view key, bool fallback) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    check(v->is_boolean(), "{}: config.json field '{}' must be true or false, got {}", path_, key,
          value_text(*v));
    return v->get<bool>();
  }
  std::string string(std::string_view key, const std::string& fallback) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    check(v->is_string(), "{}: config.json field '{}' must be a string, got {}", path_, key,
          value_text(*v));
    return v->get<std::string>();
  }

  // Every top-level key neither read nor ignored is refused by name.
  void refuse_unread() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (read_.count(it.key()) || kIgnoredKeys.count(it.key())) continue;
      throw_error("{}: config.json key '{}' (= {}) is not supported: detllm does not know what it "
                  "does to the forward pass, so it refuses the model rather than guess "
                  "(supported keys: docs/models.md)",
                  path_, it.key(), value_text(it.value()));
    }
  }
  [[noreturn]] void refuse(std::string_view key, const json& v, std::string_view why) const {
    throw_error("{}: config.json {} = {} is not supported: {}", path_, key, value_text(v), why);
  }
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  const std::string& path_;
  std::set<std::string, std::less<>> read_;
};

// One RoPE description, from either format: {rope_type, rope_theta, factor, ...}.
struct RopeSpec {
  std::string type = "default";
  double theta = 0;  // 0: absent
  RopeScaling scaling;
};

// Parses a flat rope object: transformers ≥ 5's `rope_parameters`, or the earlier
// `rope_scaling` (which carries no rope_theta). `where` names it for messages.
RopeSpec parse_rope_object(HfConfigReader& r, const json& o, const std::string& where,
                           int64_t max_position) {
  check(o.is_object(), "{}: config.json field '{}' must be an object, got {}", r.path(), where,
        value_text(o));
  RopeSpec s;
  const auto type_of = [&](const char* key) -> std::string {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return "";
    check(it->is_string(), "{}: config.json field '{}.{}' must be a string", r.path(), where,
          key);
    return it->get<std::string>();
  };
  std::string type = type_of("rope_type");
  const std::string legacy = type_of("type");
  if (type.empty()) type = legacy;
  check(legacy.empty() || legacy == type, "{}: config.json '{}' has rope_type '{}' and type '{}'",
        r.path(), where, type, legacy);
  if (type.empty()) type = "default";
  s.type = type;
  std::set<std::string_view> allowed = {"rope_type", "type", "rope_theta"};
  const std::string w = where + ".";
  if (type == "default") {
    // Some writers record the pretraining context here; it changes nothing for default RoPE.
    allowed.insert("original_max_position_embeddings");
  } else if (type == "linear") {
    s.scaling.type = RopeScaling::Type::kLinear;
    allowed.insert({"factor", "original_max_position_embeddings"});
    check(o.contains("factor"), "{}: config.json '{}' (linear) lacks 'factor'", r.path(), where);
    s.scaling.factor = static_cast<float>(r.number(o, "factor", 1.0, w.c_str()));
  } else if (type == "llama3") {
    s.scaling.type = RopeScaling::Type::kLlama3;
    allowed.insert({"factor", "low_freq_factor", "high_freq_factor",
                    "original_max_position_embeddings"});
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor",
                          "original_max_position_embeddings"}) {
      check(o.contains(k) && !o[k].is_null(), "{}: config.json '{}' (llama3) lacks '{}'",
            r.path(), where, k);
    }
    s.scaling.factor = static_cast<float>(r.number(o, "factor", 1.0, w.c_str()));
    s.scaling.low_freq_factor = static_cast<float>(r.number(o, "low_freq_factor", 1.0, w.c_str()));
    s.scaling.high_freq_factor =
        static_cast<float>(r.number(o, "high_freq_factor", 4.0, w.c_str()));
    s.scaling.original_max_position = static_cast<int32_t>(r.integer_value(
        o["original_max_position_embeddings"], w + "original_max_position_embeddings", 1,
        std::max<int64_t>(max_position, 1) * 1024));
  } else if (type == "dynamic") {
    r.refuse(where + ".rope_type", json(type),
             "dynamic NTK scaling recomputes the frequencies from the current sequence length, "
             "so the same token would get different bits in a short and a long sequence "
             "(supported: default, linear, llama3)");
  } else {
    r.refuse(where + ".rope_type", json(type),
             "this RoPE type is not implemented (supported: default, linear, llama3)");
  }
  for (auto it = o.begin(); it != o.end(); ++it) {
    if (it->is_null() || allowed.count(it.key())) continue;
    if (it.key() == "partial_rotary_factor" && it->is_number() && it->get<double>() == 1.0) {
      continue;
    }
    r.refuse(where + "." + it.key(), it.value(),
             "this RoPE parameter is not implemented for rope_type '" + type + "'");
  }
  if (o.contains("rope_theta") && !o["rope_theta"].is_null()) {
    s.theta = r.number(o, "rope_theta", 0, w.c_str());
  }
  return s;
}

bool same_rope(const RopeSpec& a, const RopeSpec& b) {
  return a.type == b.type && a.theta == b.theta && a.scaling.factor == b.scaling.factor &&
         a.scaling.low_freq_factor == b.scaling.low_freq_factor &&
         a.scaling.high_freq_factor == b.scaling.high_freq_factor &&
         a.scaling.original_max_position == b.scaling.original_max_position;
}

// The RoPE settings: `rope_parameters` (transformers ≥ 5), else `rope_theta` + `rope_scaling`.
// A config with both must say the same thing in both.
RopeSpec read_rope(HfConfigReader& r, const ArchDefaults& d, int64_t max_position) {
  std::optional<RopeSpec> modern, old;
  if (const json* p = r.find("rope_parameters")) {
    const json* flat = p;
    if (p->is_object() && !p->contains("rope_type") && !p->contains("rope_theta") &&
        !p->contains("type") && !p->empty()) {
      // Per-layer-type form ({"full_attention": {...}, ...}): all layers here are full.
      for (auto it = p->begin(); it != p->end(); ++it) {
        if (it.key() != "full_attention") {
          r.refuse("rope_parameters." + it.key(), it.value(),
                   "per-layer-type RoPE is supported only for 'full_attention' layers");
        }
      }
      flat = &(*p)["full_attention"];
    }
    modern = parse_rope_object(r, *flat, "rope_parameters", max_position);
  }
  const json* scaling = r.find("rope_scaling");
  const bool has_theta = r.present("rope_theta");
  if (scaling != nullptr || has_theta) {
    old = scaling ? parse_rope_object(r, *scaling, "rope_scaling", max_position) : RopeSpec{};
    check(!scaling || !scaling->contains("rope_theta") || !has_theta ||
              (*scaling)["rope_theta"] == *r.find("rope_theta"),
          "{}: config.json rope_theta and rope_scaling.rope_theta differ", r.path());
    if (has_theta) old->theta = r.number("rope_theta", 0);
  }
  RopeSpec s;
  if (modern && old) {
    RopeSpec m = *modern, o = *old;
    if (m.theta == 0) m.theta = o.theta;
    if (o.theta == 0) o.theta = m.theta;
    // A lone rope_theta beside rope_parameters only has to agree on the base.
    const bool same = scaling == nullptr ? m.theta == o.theta : same_rope(m, o);
    check(same, "{}: config.json rope_parameters and rope_theta/rope_scaling describe different "
          "RoPE settings; remove one of them", r.path());
    s = m;
  } else if (modern) {
    s = *modern;
  } else if (old) {
    s = *old;
  }
  if (s.theta == 0) s.theta = d.rope_theta;  // the architecture's documented default
  return s;
}

std::string read_dtype(HfConfigReader& r) {
  const std::string dtype = r.string("dtype", "");
  const std::string torch_dtype = r.string("torch_dtype", "");
  check(dtype.empty() || torch_dtype.empty() || dtype == torch_dtype,
        "{}: config.json dtype '{}' and torch_dtype '{}' differ", r.path(), dtype, torch_dtype);
  const std::string v = dtype.empty() ? torch_dtype : dtype;
  if (!v.empty() && v != "float32" && v != "float16" && v != "bfloat16") {
    r.refuse(dtype.empty() ? "torch_dtype" : "dtype", json(v),
             "supported checkpoint dtypes: float32, float16, bfloat16");
  }
  return v;
}

// The sliding window in effect for any layer, 0 if none. Attention here is full, which equals
// sliding-window attention for sequences no longer than the window: the usable context is
// capped to the window (from_hf_config), so no result differs from the reference.
int64_t read_sliding_window(HfConfigReader& r, const ArchDefaults& d, int64_t n_layers) {
  const bool qwen = d.arch == ModelArch::kQwen2 || d.arch == ModelArch::kQwen3 ||
                    d.arch == ModelArch::kQwen2Moe || d.arch == ModelArch::kQwen3Moe;
  bool use = d.arch == ModelArch::kMistral || d.arch == ModelArch::kMixtral;
  if (qwen) use = r.boolean("use_sliding_window", false);
  // Absent: the architecture's default window; JSON null or 0 (transformers tests its
  // truthiness; Qwen2-MoE writes 0): none.
  int64_t window = d.sliding_window;
  if (const json* raw = r.raw("sliding_window")) {
    window = raw->is_null() ? 0 : r.integer_value(*raw, "sliding_window", 0, int64_t{1} << 31);
  }
  if (d.arch == ModelArch::kLlama && window > 0) {
    r.refuse("sliding_window", *r.raw("sliding_window"),
             "Llama has no sliding-window attention");
  }
  int64_t first_sliding = qwen ? r.integer("max_window_layers", d.max_window_layers, 0, 1 << 20)
                               : 0;
  bool any_sliding = use && window > 0 && first_sliding < n_layers;
  if (const json* lt = r.find("layer_types")) {
    check(lt->is_array() && static_cast<int64_t>(lt->size()) == n_layers,
          "{}: config.json layer_types must list one type per layer ({})", r.path(), n_layers);
    any_sliding = false;
    for (const auto& t : *lt) {
      if (t == "sliding_attention") {
        any_sliding = true;
      } else if (t != "full_attention") {
        r.refuse("layer_types", t, "supported layer types: full_attention, sliding_attention");
      }
    }
    check(!any_sliding || window > 0, "{}: config.json layer_types has sliding_attention layers "
          "but no sliding_window", r.path());
  }
  return any_sliding ? window : 0;
}

// The mixture-of-experts keys of a MoE architecture. Layers are all sparse here: a dense MLP
// between them (decoder_sparse_step > 1, mlp_only_layers) is refused by name.
MoeConfig read_moe(HfConfigReader& r, ModelArch arch, int64_t ffn_dim) {
  const auto* d = std::find_if(kMoeDefaults.begin(), kMoeDefaults.end(),
                               [&](const MoeDefaults& m) { return m.arch == arch; });
  MoeConfig m;
  if (d == kMoeDefaults.end()) return m;
  // transformers >= 5 writes num_local_experts for Qwen3-MoE, the hub's configs num_experts.
  const json* a = r.find("num_experts");
  const json* b = r.find("num_local_experts");
  if (a && b && *a != *b) {
    r.refuse("num_experts", *a, "num_local_experts says " + value_text(*b) + "; remove one");
  }
  const int64_t n_experts =
      r.integer(a ? "num_experts" : "num_local_experts", d->n_experts, 1, 1024);
  m.n_experts = static_cast<int32_t>(n_experts);
  m.n_experts_used =
      static_cast<int32_t>(r.integer("num_experts_per_tok", d->n_experts_used, 1, n_experts));
  if (arch == ModelArch::kMixtral) {
    m.expert_ffn_dim = static_cast<int32_t>(ffn_dim);
    m.renormalize = true;  // softmax over the chosen experts' logits
    return m;
  }
  if (arch == ModelArch::kOlmoe) {  // every layer sparse, experts intermediate_size wide
    m.expert_ffn_dim = static_cast<int32_t>(ffn_dim);
    m.renormalize = r.boolean("norm_topk_prob", d->norm_topk_prob);
    return m;
  }
  m.expert_ffn_dim =
      static_cast<int32_t>(r.integer("moe_intermediate_size", d->expert_ffn, 1, 1 << 18));
  m.renormalize = r.boolean("norm_topk_prob", d->norm_topk_prob);
  if (const int64_t step = r.integer("decoder_sparse_step", 1, 1, 1024); step != 1) {
    r.refuse("decoder_sparse_step", json(step),
             "layers with a dense MLP between the sparse ones "
             "are not implemented (supported: 1, every layer a mixture of experts)");
  }
  if (const json* v = r.find("mlp_only_layers"); v && !(v->is_array() && v->empty())) {
    r.refuse("mlp_only_layers", *v,
             "dense-MLP layers in a mixture-of-experts model are not "
             "implemented (supported: [])");
  }
  if (arch == ModelArch::kQwen2Moe) {
    m.shared_expert_ffn_dim = static_cast<int32_t>(
        r.integer("shared_expert_intermediate_size", d->shared_expert_ffn, 1, 1 << 18));
    if (const json* v = r.find("qkv_bias"); v && *v != json(true)) {
      r.refuse("qkv_bias", *v, "Qwen2-MoE here has its q/k/v biases (supported: true)");
    }
  }
  return m;
}

}  // namespace

ModelConfig ModelConfig::from_hf_config(const json& j, const std::string& path) {
  check(j.is_object(), "{}: config.json is not a JSON object", path);
  HfConfigReader r(j, path);
  const std::string type = r.string("model_type", "");
  check(!type.empty(), "{}: config.json lacks the field 'model_type'", path);
  const auto* d = std::find_if(kDefaults.begin(), kDefaults.end(),
                               [&](const ArchDefaults& a) { return a.model_type == type; });
  if (d == kDefaults.end()) {
    throw_error(
        "{}: unsupported model_type '{}' (supported: llama, mistral, qwen2, qwen3, "
        "qwen3_moe, mixtral, qwen2_moe, olmoe)",
        path, type);
  }
  ModelConfig c;
  c.arch = d->arch;
  c.qk_norm = d->qk_norm;
  c.qk_norm_full = d->arch == ModelArch::kOlmoe;
  c.qkv_bias = d->qkv_bias;
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  c.vocab_size = static_cast<int32_t>(r.integer("vocab_size", d->vocab_size, 1, 1 << 24));
  c.dim = static_cast<int32_t>(r.integer("hidden_size", d->hidden_size, 1, 1 << 16));
  c.n_layers = static_cast<int32_t>(r.integer("num_hidden_layers", d->num_hidden_layers, 1, 1024));
  c.n_heads =
      static_cast<int32_t>(r.integer("num_attention_heads", d->num_attention_heads, 1, 1024));
  c.n_kv_heads = static_cast<int32_t>(r.integer(
      "num_key_value_heads", d->num_key_value_heads < 0 ? c.n_heads : d->num_key_value_heads, 1,
      1024));
  c.head_dim = static_cast<int32_t>(
      r.integer("head_dim", d->head_dim < 0 ? c.dim / c.n_heads : d->head_dim, 1, 512));
  c.ffn_dim = static_cast<int32_t>(r.integer("intermediate_size", d->intermediate_size, 1, 1 << 18));
  c.max_position = static_cast<int32_t>(
      r.integer("max_position_embeddings", d->max_position_embeddings, 1, kMaxInt));
  c.rms_eps = static_cast<float>(r.number("rms_norm_eps", d->rms_norm_eps));
  c.tied_embeddings = r.boolean("tie_word_embeddings", false);
  c.checkpoint_dtype = read_dtype(r);

  const RopeSpec rope = read_rope(r, *d, c.max_position);
  c.rope_theta = static_cast<float>(rope.theta);
  c.rope_scaling = rope.scaling;

  // Settings that change numerics and that this engine does not implement: refused by name.
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu" && act != "swish") {
    r.refuse("hidden_act", json(act), "the MLP here is SwiGLU (supported: silu)");
  }
  // transformers' Llama and Qwen3 read attention_bias (a bias on q, k, v *and* o; o has none
  // here) and Llama reads mlp_bias; Mistral and Qwen2 ignore both keys (Qwen2's q/k/v bias is
  // fixed by the architecture), so there they change nothing.
  const bool attention_bias = r.boolean("attention_bias", false);
  const bool mlp_bias = r.boolean("mlp_bias", false);
  if (attention_bias && (d->arch == ModelArch::kLlama || d->arch == ModelArch::kQwen3 ||
                         d->arch == ModelArch::kQwen3Moe || d->arch == ModelArch::kOlmoe)) {
    r.refuse("attention_bias", json(true), "a bias on the attention output projection is not "
             "implemented");
  }
  if (mlp_bias && d->arch == ModelArch::kLlama) {
    r.refuse("mlp_bias", json(true), "MLP biases are not implemented");
  }
  if (const json* v = r.find("partial_rotary_factor"); v && !(v->is_number() && *v == 1.0)) {
    r.refuse("partial_rotary_factor", *v, "RoPE is applied to the whole head here (only 1.0)");
  }
  for (const char* k : {"logit_softcapping", "final_logit_softcapping", "attn_logit_softcapping"}) {
    if (const json* v = r.find(k)) r.refuse(k, *v, "logit soft-capping is not implemented");
  }
  if (const json* v = r.find("quantization_config")) c.fp8 = fp8_from_hf(*v, path);
  if (const json* v = r.find("auto_map")) {
    r.refuse("auto_map", *v, "the checkpoint brings its own modelling code");
  }
  if (d->arch == ModelArch::kOlmoe) {
    // OLMoE clamps q, k and v to ±clip_qkv when set (null: off).
    if (const json* v = r.find("clip_qkv")) {
      r.refuse("clip_qkv", *v, "clipping q/k/v is not implemented (supported: null)");
    }
    // Its q_norm is hidden_size wide, so the heads must fill hidden_size exactly.
    if (c.q_dim() != c.dim) {
      r.refuse("head_dim", json(c.head_dim),
               "OLMoE's q norm spans hidden_size, so num_attention_heads × head_dim must equal "
               "hidden_size");
    }
  }
  c.moe = read_moe(r, d->arch, c.ffn_dim);
  const int64_t window = read_sliding_window(r, *d, c.n_layers);
  c.sliding_window = static_cast<int32_t>(std::min<int64_t>(window, kMaxInt));
  if (window > 0 && window < c.max_position) c.max_position = static_cast<int32_t>(window);
  r.refuse_unread();
  c.validate(path);
  return c;
}

}  // namespace detllm
