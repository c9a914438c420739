// ModelConfig::fp8_from_hf: a Hugging Face config.json's quantization_config for FP8
// checkpoints as they are published — compressed-tensors "float-quantized" (llm-compressor's
// FP8 / FP8_DYNAMIC / FP8_BLOCK schemes), fbgemm_fp8 (Meta's Llama 3.1 FP8) and transformers'
// fp8 (FineGrainedFP8Config: Qwen3-*-FP8, DeepSeek-V3). Every key is
// read, ignored by name (bookkeeping with no effect on the forward), or refused by name with
// why: a setting whose numerics are not the ones kernels/ref/fp8_linear.h computes never loads
// as something else. A per-tensor DYNAMIC activation scale is refused: it is a max over the
// whole batch, so a request's bits would depend on its neighbours.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string_view>

#include "core/error.h"
#include "model/config.h"

namespace detllm {
namespace {

using nlohmann::json;

// One JSON object of the quantization_config, its keys checked off as they are read.
class Section {
 public:
  Section(const json& j, std::string where, std::string path)
      : j_(j), where_(std::move(where)), path_(std::move(path)) {
    check(j.is_object(), "{}: config.json {} must be an object, got {}", path, where_, j.dump());
  }
  const json* find(std::string_view key) {
    read_.insert(std::string(key));
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  // True when the key is written, null included.
  bool present(std::string_view key) const { return j_.contains(key); }
  void ignore(std::initializer_list<std::string_view> keys) {
    for (auto k : keys) read_.insert(std::string(k));
  }
  [[noreturn]] void refuse(std::string_view key, const json& v, std::string_view why) const {
    throw_error("{}: config.json {}.{} = {} is not supported: {}", path_, where_, key, v.dump(),
                why);
  }
  std::string string(std::string_view key, const std::string& fallback) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    check(v->is_string(), "{}: config.json {}.{} must be a string, got {}", path_, where_, key,
          v->dump());
    return v->get<std::string>();
  }
  // A required value that must equal `want` (a string, number or bool), refused otherwise.
  void expect(std::string_view key, const json& want, std::string_view why) {
    const json* v = find(key);
    if (v == nullptr || *v != want) refuse(key, v ? *v : json(nullptr), why);
  }
  void refuse_unread() const {
    for (const auto& [k, v] : j_.items()) {
      if (read_.count(k) == 0) {
        refuse(k, v, "an unknown quantization key (detllm does not guess what it does)");
      }
    }
  }
  const std::string& where() const { return where_; }
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  std::string where_;
  std::string path_;
  std::set<std::string> read_;
};

// compressed-tensors' QuantizationArgs keys that do not change how a checkpoint computes
// (how the scales were found when it was made).
void ignore_bookkeeping(Section& s) { s.ignore({"observer", "observer_kwargs"}); }

// The QuantizationArgs every FP8 tensor here shares — 8-bit, float (E4M3), symmetric — each
// refused by name otherwise; `what` names the tensor ("weights", "activations", "KV caches"),
// and the bookkeeping keys are read.
void expect_e4m3_args(Section& s, std::string_view what) {
  s.expect("num_bits", 8, fmt::format("FP8 {} are 8-bit (num_bits 8)", what));
  s.expect("type", "float", fmt::format("only float (E4M3) {} are FP8", what));
  s.expect("symmetric", true, "FP8 scales are symmetric (no zero point)");
  ignore_bookkeeping(s);
}

void read_weights(Section& s, Fp8Config& f) {
  expect_e4m3_args(s, "weights");
  if (const json* v = s.find("dynamic"); v && *v != false) {
    s.refuse("dynamic", *v, "weight scales are stored in the checkpoint (dynamic false)");
  }
  if (const json* v = s.find("actorder")) s.refuse("actorder", *v, "activation reordering is GPTQ's");
  if (const json* v = s.find("group_size")) s.refuse("group_size", *v, "group scales are not FP8's");
  const std::string strategy = s.string("strategy", "");
  const json* blocks = s.find("block_structure");
  if (strategy == "channel") {
    f.weight_scales = Fp8Config::WeightScales::kChannel;
  } else if (strategy == "tensor") {
    f.weight_scales = Fp8Config::WeightScales::kTensor;
  } else if (strategy == "block") {
    f.weight_scales = Fp8Config::WeightScales::kBlock;
    if (blocks == nullptr || *blocks != json::array({128, 128})) {
      s.refuse("block_structure", blocks ? *blocks : json(nullptr),
               "block scales are implemented for 128x128 blocks");
    }
  } else {
    s.refuse("strategy", json(strategy), "FP8 weight scales per channel, tensor or 128x128 block");
  }
  if (blocks != nullptr && strategy != "block") {
    s.refuse("block_structure", *blocks, "block_structure goes with strategy block");
  }
  s.refuse_unread();
}

void read_input_activations(Section& s, Fp8Config& f) {
  expect_e4m3_args(s, "activations");
  for (const char* k : {"group_size", "block_structure", "actorder"}) {
    if (const json* v = s.find(k)) s.refuse(k, *v, "activations are quantized per token or by a static tensor scale");
  }
  const json* dyn = s.find("dynamic");
  check(dyn == nullptr || dyn->is_boolean(), "{}: config.json {}.dynamic must be true or false, "
        "got {}", s.path(), s.where(), dyn ? dyn->dump() : "null");
  const bool dynamic = dyn != nullptr && *dyn == true;
  const std::string strategy = s.string("strategy", "");
  if (dynamic && strategy == "token") {
    f.static_activations = false;  // row-local: one scale per token from its own amax
  } else if (!dynamic && (strategy == "tensor" || strategy.empty()) &&
             (dyn == nullptr || *dyn == false)) {
    f.static_activations = true;  // input_scale tensors, fixed at load
  } else if (dynamic && strategy == "tensor") {
    s.refuse("dynamic", *dyn, "a per-tensor DYNAMIC activation scale is the max over the whole "
             "batch, so a request's bits would depend on the requests beside it (use per-token "
             "dynamic scales, strategy token, or a static input_scale)");
  } else {
    s.refuse("strategy", json(strategy), "FP8 activations per token (dynamic) or per tensor "
             "(static input_scale)");
  }
  s.refuse_unread();
}

// compressed-tensors' kv_cache_scheme (llm-compressor's FP8 KV cache): E4M3 K and V with scales
// calibrated once and stored per layer as `self_attn.k_scale` / `v_scale` — one per tensor
// (strategy tensor) or per KV head (attn_head) — fixed whatever the batch, so they are the
// FP8 KV cache's scales (--kv-dtype fp8) in place of the ones bounded from the weights.
void read_kv_cache_scheme(Section& s, Fp8Config& f) {
  expect_e4m3_args(s, "KV caches");
  if (const json* v = s.find("dynamic"); v && *v != false) {
    s.refuse("dynamic", *v, "KV scales computed from the live batch would make a request's bits "
             "depend on its neighbours; the checkpoint's fixed k_scale / v_scale are implemented "
             "(dynamic false)");
  }
  for (const char* k : {"group_size", "block_structure", "actorder"}) {
    if (const json* v = s.find(k)) s.refuse(k, *v, "KV scales per tensor or per KV head");
  }
  const std::string strategy = s.string("strategy", "");
  if (strategy == "tensor") {
    f.kv_scales = Fp8Config::KvScales::kTensor;
  } else if (strategy == "attn_head") {
    f.kv_scales = Fp8Config::KvScales::kHead;
  } else {
    s.refuse("strategy", json(strategy), "KV scales per tensor (tensor) or per KV head "
             "(attn_head)");
  }
  s.refuse_unread();
}

void read_compressed_tensors(Section& q, Fp8Config& f) {
  f.source = Fp8Config::Source::kCompressedTensors;
  const std::string format = q.string("format", "");
  if (format != "float-quantized" && format != "naive-quantized") {
    q.refuse("format", json(format), "FP8 checkpoints are float-quantized");
  }
  const std::string status = q.string("quantization_status", "compressed");
  if (status != "compressed" && status != "frozen") {
    q.refuse("quantization_status", json(status), "the weights must be stored quantized");
  }
  // Bookkeeping of the compressor: no effect on the forward.
  q.ignore({"global_compression_ratio", "version", "quant_method"});
  if (const json* v = q.find("sparsity_config"); v && !v->empty()) {
    q.refuse("sparsity_config", *v, "sparse (2:4) weights are not implemented");
  }
  if (const json* v = q.find("transform_config"); v && !v->empty()) {
    q.refuse("transform_config", *v, "weight transforms (rotations) are not implemented");
  }
  if (const json* v = q.find("kv_cache_scheme")) {
    Section ks(*v, "quantization_config.kv_cache_scheme", q.path());
    read_kv_cache_scheme(ks, f);
  }
  if (const json* ig = q.find("ignore")) {
    check(ig->is_array(), "config.json quantization_config.ignore must be a list of module names");
    for (const json& m : *ig) {
      check(m.is_string(), "config.json quantization_config.ignore entries must be strings");
      const std::string name = m.get<std::string>();
      if (name.rfind("re:", 0) == 0) {
        q.refuse("ignore", m, "regular expressions in ignore are not implemented (list the "
                 "module names)");
      }
      f.ignore.push_back(name);
    }
  }
  const json* groups = q.find("config_groups");
  check(groups != nullptr && groups->is_object() && groups->size() == 1,
        "{}: config.json quantization_config.config_groups must hold exactly one group (one "
        "scheme for every Linear); got {}", q.path(), groups ? groups->dump() : "null");
  const auto it = groups->begin();
  Section g(*it, "quantization_config.config_groups." + it.key(), q.path());
  g.expect("targets", json::array({"Linear"}), "one scheme for every Linear layer");
  g.ignore({"format"});  // the same as the top-level format when given
  const json* w = g.find("weights");
  check(w != nullptr, "{}: config.json {}.weights is missing (FP8 weights need it)", q.path(),
        g.where());
  Section ws(*w, g.where() + ".weights", q.path());
  read_weights(ws, f);
  if (const json* a = g.find("input_activations")) {
    Section as(*a, g.where() + ".input_activations", q.path());
    read_input_activations(as, f);
  } else {
    g.refuse("input_activations", json(nullptr), "weight-only FP8 (activations unquantized) is "
             "not implemented");
  }
  if (const json* o = g.find("output_activations")) {
    g.refuse("output_activations", *o, "quantized outputs are not implemented");
  }
  g.refuse_unread();
  q.refuse_unread();
}

// A modules_to_not_convert list (transformers' fbgemm_fp8 and fp8): module names, subtrees
// or trailing names (Fp8Config::ignore). transformers also matches its entries as regular
// expressions; one that uses regex syntax is refused rather than read two ways.
void read_not_convert(Section& q, const char* key, Fp8Config& f) {
  const json* m = q.find(key);
  if (m == nullptr) return;
  check(m->is_array(), "{}: config.json quantization_config.{} must be a list of module names",
        q.path(), key);
  for (const json& e : *m) {
    check(e.is_string(), "{}: config.json quantization_config.{} entries must be strings",
          q.path(), key);
    const std::string name = e.get<std::string>();
    if (name.empty() || name.find_first_of("*?[]()^$\\+|{}") != std::string::npos) {
      q.refuse(key, e, "entries are module names (\"lm_head\", \"model.layers.0.mlp.gate\"), a "
               "subtree or a module's trailing names; regular expressions are not implemented");
    }
    f.ignore.push_back(name);
  }
}

// fbgemm_fp8 (transformers' FbgemmFp8Config): per-channel weight scales, activations dynamic
// per token with their amax capped at activation_scale_ub.
void read_fbgemm(Section& q, Fp8Config& f) {
  f.source = Fp8Config::Source::kFbgemm;
  f.weight_scales = Fp8Config::WeightScales::kChannel;
  q.ignore({"quant_method"});
  const json* ub = q.find("activation_scale_ub");
  check(ub != nullptr && ub->is_number() && std::isfinite(ub->get<double>()) &&
            ub->get<double>() > 0,
        "{}: config.json quantization_config.activation_scale_ub must be a positive number, got "
        "{}", q.path(), ub ? ub->dump() : "null");
  f.activation_bound = static_cast<float>(ub->get<double>());
  read_not_convert(q, "modules_to_not_convert", f);
  q.refuse_unread();
}

// transformers' quant_method "fp8" (FineGrainedFP8Config; Qwen3-*-FP8 and DeepSeek-V3 ship it):
// E4M3 weights with one `weight_scale_inv` per 128x128 block (a multiplier, despite the name:
// w = code · scale_inv), activations quantized dynamically per token and 128-column group.
void read_fine_grained(Section& q, Fp8Config& f) {
  f.source = Fp8Config::Source::kFineGrained;
  f.weight_scales = Fp8Config::WeightScales::kBlock;
  q.ignore({"quant_method"});
  std::string scheme = q.string("activation_scheme", "dynamic");
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (scheme != "dynamic") {
    q.refuse("activation_scheme", json(scheme), "static activation scales (activation_scale "
             "tensors) are not implemented for the fp8 format; dynamic per-token, per-128-column "
             "scales are");
  }
  // Absent: transformers' default, [128, 128]. null (per-tensor scales) and other blocks are
  // not implemented.
  const json* b = q.find("weight_block_size");
  if ((b == nullptr && q.present("weight_block_size")) ||
      (b != nullptr && *b != json::array({128, 128}))) {
    q.refuse("weight_block_size", b ? *b : json(nullptr),
             "block scales are implemented for 128x128 blocks");
  }
  if (const json* fmt = q.find("fmt"); fmt != nullptr && *fmt != "e4m3") {
    q.refuse("fmt", *fmt, "FP8 weights are E4M3 (fmt e4m3)");
  }
  if (const json* sf = q.find("scale_fmt"); sf != nullptr && *sf != "float") {
    q.refuse("scale_fmt", *sf, "activation scales are fp32 amax / 448 (scale_fmt float); "
             "power-of-two (ue8m0) scales are another arithmetic, not implemented");
  }
  if (const json* d = q.find("dequantize"); d != nullptr && *d != false) {
    q.refuse("dequantize", *d, "dequantize true runs the weights widened to bf16, another "
             "numerics than the FP8 arithmetic (load the FP8 checkpoint as stored)");
  }
  // ignored_layers: transformers' alias, read when modules_to_not_convert is not given.
  if (const json* il = q.find("ignored_layers"); il != nullptr && q.find("modules_to_not_convert")) {
    q.refuse("ignored_layers", *il, "give modules_to_not_convert or its alias ignored_layers, "
             "not both");
  }
  read_not_convert(q, "modules_to_not_convert", f);
  read_not_convert(q, "ignored_layers", f);
  f.ignore.push_back("lm_head");  // transformers never converts lm_head under this method
  q.refuse_unread();
}

}  // namespace

Fp8Config ModelConfig::fp8_from_hf(const nlohmann::json& q, const std::string& path) {
  Section s(q, "quantization_config", path);
  const std::string method = s.string("quant_method", "");
  Fp8Config f;
  if (method == "compressed-tensors") {
    read_compressed_tensors(s, f);
  } else if (method == "fbgemm_fp8") {
    read_fbgemm(s, f);
  } else if (method == "fp8") {
    read_fine_grained(s, f);
  } else {
    s.refuse("quant_method", json(method), "the quantized checkpoints detllm loads are FP8: "
             "compressed-tensors (float-quantized), fbgemm_fp8 and fp8 (or use bf16/fp16/fp32 "
             "safetensors, or a GGUF file)");
  }
  return f;
}

bool Fp8Config::quantizes(const std::string& module) const {
  if (!active()) return false;
  const bool by_name = source == Source::kCompressedTensors;  // its ignore lists exact names
  for (const std::string& e : ignore) {
    if (module == e) return false;
    if (by_name) continue;
    if (module.size() > e.size() && module.compare(0, e.size(), e) == 0 && module[e.size()] == '.')
      return false;  // a subtree
    if (module.size() > e.size() && module[module.size() - e.size() - 1] == '.' &&
        module.compare(module.size() - e.size(), e.size(), e) == 0)
      return false;  // trailing names
  }
  return true;
}

}  // namespace detllm
