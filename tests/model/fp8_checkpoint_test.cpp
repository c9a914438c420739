// FP8 checkpoints as they are published (scripts/ref/fp8_checkpoints.py writes tiny ones under
// tests/data/fp8/: compressed-tensors per-channel + dynamic per-token activations, per-tensor
// weight scales + static input_scale, 128x128 block scales, fbgemm_fp8, transformers' fp8
// (dense Qwen3 and Qwen3-MoE), a compressed-tensors Qwen3-MoE, and two with FP8 KV scales
// stored — kv_cache_scheme per tensor and per KV head): they load as FP8
// rows (model/config_fp8.cpp, llama_weights.cpp), their logits match transformers' forward with
// the FP8 arithmetic emulated in torch within a stated tolerance, every quantization key that
// detllm does not implement is refused by name, and scales of the wrong shape or value are
// refused naming the tensor. `--quantization fp8` (model/fp8_weights.h) is checked here too.
// Run: build/tests/test_model --gtest_filter='Fp8*'
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "conformance/delegating_ops.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "formats/dequant.h"
#include "formats/safetensors.h"
#include "kernels/ref/fp8_linear.h"
#include "kernels/ops.h"
#include "model/fp8_weights.h"
#include "model/checkpoint_test_util.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/solo_runner.h"

namespace detllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kData = fs::path(DETLLM_SOURCE_DIR) / "tests" / "data" / "fp8";
const char* const kCases[] = {"ct_channel", "ct_static", "ct_block", "fbgemm", "fp8_dense",
                              "fp8_moe",    "ct_moe",    "ct_kv",    "ct_kv_head"};

// The checkpoints whose quantization_config has a kv_cache_scheme: their reference rounds K
// and V with the stored scales, so they run with an FP8 KV cache.
bool has_kv_scheme(const LoadedModel& m) {
  return m.config.fp8.kv_scales != Fp8Config::KvScales::kNone;
}

// |ours - reference| <= kAbsTol + kRelTol |reference|. Both compute the same FP8 arithmetic;
// they differ only in the order of the fp32 sums (torch's matmul vs k ascending), which could
// move an activation across an E4M3 rounding boundary downstream (a step of 1/16 relative in
// one element). Measured over the four checkpoints and every logit: 5.96e-7 (2026-12-07, CPU
// backend, 2 threads; no boundary was crossed); the bound is ~17x that. The same weights
// without the activation rounding (the dequantized fp32 forward) are 1.6e-2 away, a weight
// scale on the wrong rows further still.
constexpr float kAbsTol = 1e-5f;
constexpr float kRelTol = 1e-5f;
// Once an activation does cross an E4M3 rounding boundary (one element moves by a step of 1/16
// relative), the positions from there on carry it through attention: within kCrossTol of the
// reference, at most one sequence per checkpoint. Measured: one crossing over the seven
// checkpoints (ct_moe, first sequence, position 19, worst 2.2e-3 afterwards; its routers'
// top-2 margins there are 5e-3 and 2.6e-2, so no expert changed), 2026-12-07, CPU backend, 2
// threads. The wrong arithmetics below stay outside it (1.6e-2, 4.1e-2).
constexpr float kCrossTol = 5e-3f;

using checkpoint_testing::all_logits;
using checkpoint_testing::load;
using checkpoint_testing::Loaded;
using checkpoint_testing::read_f32;
using checkpoint_testing::read_json;

// A copy of checkpoint `c` whose config.json is `edit`ed (the safetensors file linked).
fs::path edited(const std::string& c, const std::function<void(json&)>& edit) {
  const fs::path dir = fs::temp_directory_path() /
                       ("detllm_fp8_" + c + "_" + std::to_string(::getpid()) + "_" +
                        std::to_string(std::rand()));
  fs::create_directories(dir);
  fs::create_symlink(fs::absolute(kData / c / "model.safetensors"), dir / "model.safetensors");
  json cfg = read_json(kData / c / "config.json");
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump(2);
  return dir;
}

// load_model's error for checkpoint c with its config edited; "" when it loads.
std::string load_error(const std::string& c, const std::function<void(json&)>& edit) {
  const fs::path dir = edited(c, edit);
  std::string what;
  try {
    load_model(dir.string());
  } catch (const Error& e) {
    what = e.what();
  }
  fs::remove_all(dir);
  return what;
}

json& group(json& cfg) { return cfg["quantization_config"]["config_groups"]["group_0"]; }

TEST(Fp8Checkpoint, LoadsAsFp8Rows) {
  const struct {
    const char* c;
    DType dt;
    const char* class_name;
  } want[] = {{"ct_channel", DType::kF8E4M3, "fp8=channel/token"},
              {"ct_static", DType::kF8E4M3, "fp8=channel/static"},
              {"ct_block", DType::kF8E4M3B128, "fp8=block128/token"},
              {"fbgemm", DType::kF8E4M3, "fp8=channel/token-bounded"},
              {"fp8_dense", DType::kF8E4M3G128, "fp8=block128/token-group128"},
              {"fp8_moe", DType::kF8E4M3G128, "fp8=block128/token-group128"},
              {"ct_moe", DType::kF8E4M3, "fp8=channel/token"},
              {"ct_kv", DType::kF8E4M3, "fp8=channel/token"},
              {"ct_kv_head", DType::kF8E4M3, "fp8=channel/token"}};
  for (const auto& w : want) {
    SCOPED_TRACE(w.c);
    const auto m = load_model((kData / w.c).string());
    ASSERT_TRUE(m->config.fp8.active());
    size_t n_fp8 = 0;
    for (const LayerWeights& l : m->weights.layers) {
      for (const Linear* lin : l.matrices()) {
        if (lin->w.empty()) continue;  // a MoE layer's dense MLP
        if (lin == &l.router) {  // the router is in ignore / modules_to_not_convert
          EXPECT_EQ(lin->w.dtype, DType::kF32);
          continue;
        }
        EXPECT_EQ(lin->w.dtype, w.dt);
        ++n_fp8;
      }
      if (m->config.moe.active()) {
        EXPECT_FALSE(l.router.w.empty());
        EXPECT_EQ(l.experts.size(), static_cast<size_t>(m->config.moe.n_experts));
      }
    }
    EXPECT_EQ(n_fp8, static_cast<size_t>(m->config.n_layers) *
                         (4 + 3 * std::max<size_t>(1, static_cast<size_t>(m->config.moe.n_experts))));
    EXPECT_EQ(fp8_class_name(m->weights), w.class_name);
    // lm_head is in ignore / modules_to_not_convert: kept as stored.
    EXPECT_FALSE(dtype_is_fp8(m->weights.lm_head.w.dtype));
    EXPECT_FALSE(dtype_is_fp8(m->weights.tok_embd.dtype));
  }
  const auto st = load_model((kData / "ct_static").string());
  const uint8_t* row = st->weights.layers[0].wq.w.raw.data();
  EXPECT_GT(fp8_row_input_scale(row), 0.0f) << "the static input_scale is in every row";
  const auto fb = load_model((kData / "fbgemm").string());
  EXPECT_EQ(fp8_row_act_bound(fb->weights.layers[0].wq.w.raw.data()), 2.0f);
}

TEST(Fp8Checkpoint, LogitsMatchTransformersWithTheFp8Arithmetic) {
  float worst = 0;
  for (const char* c : kCases) {
    SCOPED_TRACE(c);
    const fs::path dir = kData / c;
    const json g = read_json(dir / "golden.json");
    const std::vector<float> ref = read_f32(dir / "logits.f32");
    const Loaded l = load(dir, has_kv_scheme(*load_model(dir.string(), {}, LoadParts::kConfigOnly)));
    const size_t vocab = static_cast<size_t>(l.model->config.vocab_size);
    size_t offset = 0, crossings = 0;
    float case_worst = 0;
    for (const auto& s : g["sequences"]) {
      const auto ids = s["tokens"].get<std::vector<int32_t>>();
      const std::vector<float> ours = all_logits(l, ids);
      ASSERT_LE(offset + ours.size(), ref.size());
      size_t crossed_at = ours.size();  // first element past the tight tolerance
      for (size_t i = 0; i < ours.size(); ++i) {
        const float theirs = ref[offset + i];
        const float diff = std::fabs(ours[i] - theirs);
        case_worst = std::max(case_worst, diff);
        if (crossed_at == ours.size() && diff > kAbsTol + kRelTol * std::fabs(theirs)) {
          crossed_at = i;
          ++crossings;
          std::printf("%s: an E4M3 boundary crossing at position %zu\n", c, i / vocab);
        }
        ASSERT_LE(diff, (i < crossed_at ? kAbsTol : kCrossTol) + kRelTol * std::fabs(theirs))
            << "position " << i / vocab << " token " << i % vocab << ": ours " << ours[i]
            << ", reference " << theirs;
      }
      offset += ours.size();
    }
    EXPECT_EQ(offset, ref.size());
    EXPECT_LE(crossings, 1u) << "more than one sequence crossed an E4M3 rounding boundary";
    std::printf("%s: worst |ours - reference| logit difference %.3g\n", c, case_worst);
    worst = std::max(worst, case_worst);
  }
  std::printf("worst over the FP8 checkpoints: %.3g\n", worst);
}

// The same checkpoint with its FP8 arithmetic replaced by the dequantized fp32 matmul (weights
// decoded, activations NOT rounded) is far from the reference: the tolerance above is tight
// enough to tell the FP8 class from a plain dequantized forward.
TEST(Fp8Checkpoint, DequantizedForwardIsOutsideTheTolerance) {
  for (const char* c : {"ct_channel", "fp8_moe", "ct_moe"}) {
    SCOPED_TRACE(c);
    const fs::path dir = kData / c;
    const json g = read_json(dir / "golden.json");
    const std::vector<float> ref = read_f32(dir / "logits.f32");
    Loaded l;
    l.model = load_model(dir.string());
    dequantize_weights(l.model->weights);
    l.ops = kernels::make_cpu_ops(2);
    l.llama = std::make_unique<LlamaModel>(l.model->config, l.model->weights, *l.ops);
    const auto ids = g["sequences"][0]["tokens"].get<std::vector<int32_t>>();
    const std::vector<float> ours = all_logits(l, ids);
    float worst = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      worst = std::max(worst, std::fabs(ours[i] - ref[i]) - kRelTol * std::fabs(ref[i]));
    }
    std::printf("%s, dequantized forward: worst excess over the relative tolerance %.3g\n", c,
                worst);
    EXPECT_GT(worst, kCrossTol);
  }
}

// transformers' fp8 checkpoints computed with one activation scale per token (the same bytes
// read as kF8E4M3B128 rows) instead of one per 128 columns: outside the tolerance, so the test
// above tells the two arithmetics apart.
// (fp8_dense: its down_proj rows span two groups. fp8_moe's projections are all 128 wide —
// one group, where the two rules differ only in rounding order — so it is not a case here.)
TEST(Fp8Checkpoint, Fp8FormatWithPerTokenScalesIsOutsideTheTolerance) {
  for (const char* c : {"fp8_dense"}) {
    SCOPED_TRACE(c);
    const fs::path dir = kData / c;
    const json g = read_json(dir / "golden.json");
    const std::vector<float> ref = read_f32(dir / "logits.f32");
    Loaded l;
    l.model = load_model(dir.string());
    for (LayerWeights& layer : l.model->weights.layers) {
      for (Linear* lin : layer.matrices()) {
        if (lin->w.dtype == DType::kF8E4M3G128) lin->w.dtype = DType::kF8E4M3B128;
      }
    }
    l.ops = kernels::make_cpu_ops(2);
    l.llama = std::make_unique<LlamaModel>(l.model->config, l.model->weights, *l.ops);
    const auto ids = g["sequences"][0]["tokens"].get<std::vector<int32_t>>();
    const std::vector<float> ours = all_logits(l, ids);
    float worst = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      worst = std::max(worst, std::fabs(ours[i] - ref[i]) - kRelTol * std::fabs(ref[i]));
    }
    std::printf("%s with per-token activation scales: worst excess over the relative "
                "tolerance %.3g\n", c, worst);
    EXPECT_GT(worst, kCrossTol);
  }
}

// transformers' fp8 format: every key of FineGrainedFP8Config read or refused by name, a
// quantized router refused naming the module, in both formats.
TEST(Fp8Checkpoint, Fp8FormatKeysAndQuantizedRoutersAreRefusedByName) {
  auto qc = [](json& c) -> json& { return c["quantization_config"]; };
  const struct {
    const char* name;
    const char* case_;
    std::function<void(json&)> edit;
    const char* must_say;
  } cases[] = {
      {"static activations", "fp8_dense",
       [&](json& c) { qc(c)["activation_scheme"] = "static"; }, "activation_scheme"},
      {"64x64 blocks", "fp8_dense",
       [&](json& c) { qc(c)["weight_block_size"] = json::array({64, 64}); }, "weight_block_size"},
      {"no blocks (per-tensor)", "fp8_dense",
       [&](json& c) { qc(c)["weight_block_size"] = nullptr; }, "weight_block_size"},
      {"e5m2", "fp8_dense", [&](json& c) { qc(c)["fmt"] = "e5m2"; }, "fmt"},
      {"power-of-two scales", "fp8_dense", [&](json& c) { qc(c)["scale_fmt"] = "ue8m0"; },
       "scale_fmt"},
      {"dequantize", "fp8_dense", [&](json& c) { qc(c)["dequantize"] = true; }, "dequantize"},
      {"unknown key", "fp8_dense", [&](json& c) { qc(c)["mystery"] = 1; },
       "quantization_config.mystery"},
      {"both lists", "fp8_moe",
       [&](json& c) { qc(c)["ignored_layers"] = json::array({"lm_head"}); }, "ignored_layers"},
      {"regex in modules_to_not_convert", "fp8_moe",
       [&](json& c) { qc(c)["modules_to_not_convert"] = json::array({"lm_head", "re:.*gate$"}); },
       "modules_to_not_convert"},
      {"a quantized router (fp8)", "fp8_moe",
       [&](json& c) { qc(c)["modules_to_not_convert"] = json::array({"lm_head"}); },
       "model.layers.0.mlp.gate"},
      {"a quantized router (compressed-tensors)", "ct_moe",
       [&](json& c) { qc(c)["ignore"] = json::array({"lm_head"}); }, "model.layers.0.mlp.gate"},
      {"block scales named weight_scale_inv", "ct_block",
       [&](json& c) {
         c["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
                                     {"weight_block_size", json::array({128, 128})}};
       },
       "weight_scale_inv"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string err = load_error(c.case_, c.edit);
    EXPECT_NE(err.find(c.must_say), std::string::npos) << "error: '" << err << "'";
  }
  // Read, not refused: the defaults written out, transformers' alias ignored_layers, the routers
  // named by their trailing names, and a subtree.
  EXPECT_EQ(load_error("fp8_dense", [&](json& c) {
              qc(c)["weight_block_size"] = json::array({128, 128});
              qc(c)["scale_fmt"] = "float";
              qc(c)["dequantize"] = false;
              qc(c)["activation_scheme"] = "DYNAMIC";
            }), "");
  EXPECT_EQ(load_error("fp8_moe", [&](json& c) {
              qc(c).erase("modules_to_not_convert");
              qc(c)["ignored_layers"] = json::array({"lm_head", "mlp.gate"});
            }), "");
  // A subtree kept unquantized: its weights are FP8 in the file, so their scales go unused and
  // the loader refuses them by name rather than read codes as weights.
  const std::string err = load_error("fp8_dense", [&](json& c) {
    qc(c)["modules_to_not_convert"] = json::array({"model.layers.1"});
  });
  EXPECT_NE(err.find("model.layers.1."), std::string::npos) << err;
  EXPECT_NE(err.find("not used"), std::string::npos) << err;
}

TEST(Fp8Checkpoint, EveryUnimplementedKeyIsRefusedByName) {
  const struct {
    const char* name;
    const char* case_;
    std::function<void(json&)> edit;
    const char* must_say;
  } cases[] = {
      {"per-tensor dynamic activations", "ct_channel",
       [](json& c) { group(c)["input_activations"]["strategy"] = "tensor"; },
       "per-tensor DYNAMIC activation scale"},
      {"int weights", "ct_channel",
       [](json& c) { group(c)["weights"]["type"] = "int"; }, "weights.type"},
      {"4-bit", "ct_channel", [](json& c) { group(c)["weights"]["num_bits"] = 4; },
       "weights.num_bits"},
      {"group strategy", "ct_channel",
       [](json& c) { group(c)["weights"]["strategy"] = "group"; }, "weights.strategy"},
      {"asymmetric", "ct_channel", [](json& c) { group(c)["weights"]["symmetric"] = false; },
       "weights.symmetric"},
      {"dynamic weights", "ct_channel", [](json& c) { group(c)["weights"]["dynamic"] = true; },
       "weights.dynamic"},
      {"64x64 blocks", "ct_block",
       [](json& c) { group(c)["weights"]["block_structure"] = json::array({64, 64}); },
       "block_structure"},
      {"output activations", "ct_channel",
       [](json& c) { group(c)["output_activations"] = group(c)["input_activations"]; },
       "output_activations"},
      {"weight-only", "ct_channel", [](json& c) { group(c).erase("input_activations"); },
       "input_activations"},
      {"kv scales from the live batch", "ct_kv",
       [](json& c) { c["quantization_config"]["kv_cache_scheme"]["dynamic"] = true; },
       "kv_cache_scheme.dynamic"},
      {"kv scales per channel", "ct_kv",
       [](json& c) { c["quantization_config"]["kv_cache_scheme"]["strategy"] = "channel"; },
       "kv_cache_scheme.strategy"},
      {"int kv cache", "ct_kv",
       [](json& c) { c["quantization_config"]["kv_cache_scheme"]["type"] = "int"; },
       "kv_cache_scheme.type"},
      {"asymmetric kv cache", "ct_kv",
       [](json& c) { c["quantization_config"]["kv_cache_scheme"]["symmetric"] = false; },
       "kv_cache_scheme.symmetric"},
      {"unknown kv cache key", "ct_kv",
       [](json& c) { c["quantization_config"]["kv_cache_scheme"]["mystery"] = 1; },
       "kv_cache_scheme.mystery"},
      {"kv cache scheme without its scales", "ct_channel",
       [](json& c) {
         c["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"},
                                                        {"symmetric", true},
                                                        {"strategy", "tensor"},
                                                        {"dynamic", false}};
       },
       "self_attn.k_scale"},
      {"kv scales stored without the scheme", "ct_kv",
       [](json& c) { c["quantization_config"]["kv_cache_scheme"] = nullptr; },
       "kv_cache_scheme, as self_attn.k_scale"},
      {"per-head kv scales read as one per tensor", "ct_kv_head",
       [](json& c) { c["quantization_config"]["kv_cache_scheme"]["strategy"] = "tensor"; },
       "k_scale' has shape 2x1x1"},
      {"sparsity", "ct_channel",
       [](json& c) { c["quantization_config"]["sparsity_config"] = {{"format", "sparse-24"}}; },
       "sparsity_config"},
      {"regex ignore", "ct_channel",
       [](json& c) { c["quantization_config"]["ignore"] = json::array({"re:.*lm_head"}); },
       "ignore"},
      {"unknown key", "ct_channel", [](json& c) { c["quantization_config"]["mystery"] = 1; },
       "quantization_config.mystery"},
      {"unknown weights key", "ct_channel",
       [](json& c) { group(c)["weights"]["mystery"] = 1; }, "weights.mystery"},
      {"format", "ct_channel",
       [](json& c) { c["quantization_config"]["format"] = "pack-quantized"; }, "format"},
      {"two groups", "ct_channel",
       [](json& c) {
         c["quantization_config"]["config_groups"]["group_1"] = group(c);
       },
       "config_groups"},
      {"gptq", "ct_channel",
       [](json& c) { c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}}; },
       "quant_method"},
      {"lm_head quantized", "ct_channel",
       [](json& c) { c["quantization_config"]["ignore"] = json::array(); }, "lm_head"},
      {"fbgemm without a bound", "fbgemm",
       [](json& c) { c["quantization_config"].erase("activation_scale_ub"); },
       "activation_scale_ub"},
      {"fbgemm unknown key", "fbgemm",
       [](json& c) { c["quantization_config"]["mystery"] = true; }, "mystery"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string err = load_error(c.case_, c.edit);
    EXPECT_NE(err.find(c.must_say), std::string::npos) << "error: '" << err << "'";
  }
  // The unedited configs load (the edits above, not the files, are what is refused).
  for (const char* c : kCases) EXPECT_EQ(load_error(c, [](json&) {}), "") << c;
}

TEST(Fp8Checkpoint, ScalesOfTheWrongShapeOrKindAreRefusedNamingTheTensor) {
  // Per-channel scales (64, 1) read as 128x128 block scales (1, 1), and as one tensor scale.
  std::string err = load_error("ct_channel", [](json& c) {
    group(c)["weights"]["strategy"] = "block";
    group(c)["weights"]["block_structure"] = json::array({128, 128});
  });
  EXPECT_NE(err.find("weight_scale"), std::string::npos) << err;
  EXPECT_NE(err.find("shape"), std::string::npos) << err;
  err = load_error("ct_channel", [](json& c) { group(c)["weights"]["strategy"] = "tensor"; });
  EXPECT_NE(err.find("weight_scale"), std::string::npos) << err;
  // Static activations declared, but the file has no input_scale.
  err = load_error("ct_channel", [](json& c) {
    group(c)["input_activations"]["dynamic"] = false;
    group(c)["input_activations"]["strategy"] = "tensor";
  });
  EXPECT_NE(err.find("input_scale"), std::string::npos) << err;
  // The static checkpoint read as dynamic: its input_scale tensors would be dropped — refused.
  err = load_error("ct_static", [](json& c) {
    group(c)["input_activations"]["dynamic"] = true;
    group(c)["input_activations"]["strategy"] = "token";
  });
  EXPECT_NE(err.find("input_scale"), std::string::npos) << err;
  EXPECT_NE(err.find("not used"), std::string::npos) << err;
  // FP8 codes without a quantization_config: the loader does not guess their scales.
  err = load_error("ct_channel", [](json& c) { c.erase("quantization_config"); });
  EXPECT_NE(err.find("weight_scale"), std::string::npos) << err;
}

TEST(Fp8Checkpoint, QuantizationAtLoadMakesPerChannelRows) {
  // The bf16 tiny checkpoint of the HF tests, quantized as --quantization fp8 does.
  auto m = load_model((fs::path(DETLLM_SOURCE_DIR) / "tests/data/loaders/hf_v5/llama31").string());
  const HostTensor before = m->weights.layers[0].wq.w;
  quantize_weights_fp8(m->weights, m->config);
  const HostTensor& q = m->weights.layers[0].wq.w;
  ASSERT_EQ(q.dtype, DType::kF8E4M3);
  EXPECT_FALSE(dtype_is_fp8(m->weights.lm_head.w.dtype));
  // Each row: s = max|w| / 448, and the codes decode within half an E4M3 step of w.
  HostTensor w = before;
  dequantize_tensor(w);
  const int64_t cols = q.shape[1], rb = dtype_row_bytes(q.dtype, cols);
  std::vector<float> back(static_cast<size_t>(cols));
  for (int64_t r = 0; r < q.shape[0]; ++r) {
    const uint8_t* row = q.raw.data() + r * rb;
    float amax = 0;
    for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(w.data[r * cols + k]));
    ASSERT_EQ(fp8_row_weight_scale(row, 0), amax / 448.0f);
    EXPECT_EQ(fp8_row_input_scale(row), 0.0f);
    dequantize_row(q.dtype, row, back.data(), cols);
    for (int64_t k = 0; k < cols; ++k) {
      ASSERT_LE(std::fabs(back[k] - w.data[r * cols + k]), amax / 16.0f);
    }
  }
  EXPECT_THROW(quantize_weights_fp8(m->weights, m->config), Error);  // FP8 already
}

// A Mixtral / Qwen2-MoE checkpoint written as compressed-tensors FP8 (per-channel weights,
// dynamic per-token activations) from the bf16 tiny one: every projection, every expert's and
// the shared expert's included, as F8_E4M3 codes + weight_scale (out, 1) made by the rule of
// --quantization fp8 (ref::fp8_quantize_weight_row); the rest as F32 (the bf16 values exactly);
// the routers (and Qwen2-MoE's shared-expert gate) in ignore. Loading it gives the rows
// --quantization fp8 makes of the bf16 checkpoint, byte for byte, so the logits are the same
// bits: the loader finds every expert by its published name (block_sparse_moe.experts.E.w1/w3/w2,
// mlp.experts.E.*_proj, mlp.shared_expert.*).
fs::path write_ct_fp8_moe(const fs::path& src, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() /
                       ("detllm_fp8moe_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto st = SafetensorsFile::open((src / "model.safetensors").string());
  json header = json::object();
  std::string data;
  std::vector<std::string> ignore = {"lm_head"};
  auto put = [&](const std::string& name, const char* dtype, std::vector<int64_t> shape,
                 const void* bytes, size_t n) {
    header[name] = {{"dtype", dtype}, {"shape", shape},
                    {"data_offsets", {data.size(), data.size() + n}}};
    data.append(static_cast<const char*>(bytes), n);
  };
  auto projection = [](const std::string& n) {
    if (n.find("layers.") == std::string::npos || n.size() < 7 ||
        n.compare(n.size() - 7, 7, ".weight") != 0)
      return false;
    for (const char* p : {"_proj.weight", ".w1.weight", ".w2.weight", ".w3.weight"})
      if (n.find(p) != std::string::npos) return true;
    return false;
  };
  for (const std::string& name : st->tensor_names()) {
    const HostTensor t = st->load_f32(name);
    const std::string module = name.substr(0, name.rfind('.'));
    if ((module.ends_with(".gate") || module.ends_with("shared_expert_gate")) &&
        name.ends_with(".weight"))
      ignore.push_back(module);
    if (!projection(name)) {
      put(name, "F32", t.shape, t.data.data(), t.data.size() * 4);
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const int64_t rb = dtype_row_bytes(DType::kF8E4M3, cols);
    std::vector<uint8_t> row(static_cast<size_t>(rb)), codes;
    std::vector<float> scales;
    for (int64_t r = 0; r < rows; ++r) {
      kernels::ref::fp8_quantize_weight_row(t.data.data() + r * cols, cols, row.data());
      scales.push_back(fp8_row_weight_scale(row.data(), 0));
      const uint8_t* c = fp8_row_codes(DType::kF8E4M3, row.data(), cols);
      codes.insert(codes.end(), c, c + cols);
    }
    put(name, "F8_E4M3", t.shape, codes.data(), codes.size());
    put(module + ".weight_scale", "F32", {rows, 1}, scales.data(), scales.size() * 4);
  }
  const std::string h = header.dump();
  const uint64_t hn = h.size();
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&hn), 8);
  out << h << data;
  json cfg = read_json(src / "config.json");
  json q = read_json(kData / "ct_moe" / "config.json")["quantization_config"];
  q["ignore"] = ignore;
  cfg["quantization_config"] = q;
  std::ofstream(dir / "config.json") << cfg.dump(2);
  return dir;
}

TEST(Fp8Checkpoint, MixtralAndQwen2MoeExpertsLoadAsTheRowsQuantizationMakes) {
  for (const char* c : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    SCOPED_TRACE(c);
    const fs::path src = fs::path(DETLLM_SOURCE_DIR) / "tests/data/loaders/hf_v5" / c;
    const fs::path dir = write_ct_fp8_moe(src, c);
    Loaded file = load(dir);
    ASSERT_TRUE(file.model->config.fp8.active());
    Loaded at_load;
    at_load.model = load_model(src.string());
    quantize_weights_fp8(at_load.model->weights, at_load.model->config);
    at_load.ops = kernels::make_cpu_ops(2);
    at_load.llama = std::make_unique<LlamaModel>(at_load.model->config, at_load.model->weights,
                                                 *at_load.ops);
    size_t n_experts = 0;
    for (size_t i = 0; i < file.model->weights.layers.size(); ++i) {
      const auto a = file.model->weights.layers[i].matrices();
      const auto b = at_load.model->weights.layers[i].matrices();
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) {
        EXPECT_EQ(a[j]->w.dtype, b[j]->w.dtype) << "matrix " << j;
        EXPECT_EQ(a[j]->w.raw, b[j]->w.raw) << "matrix " << j;
      }
      n_experts += file.model->weights.layers[i].experts.size();
      EXPECT_FALSE(dtype_is_fp8(file.model->weights.layers[i].router.w.dtype));
    }
    EXPECT_GT(n_experts, 0u);
    const json g = read_json(src / "golden.json");
    const auto ids = g["sequences"][0]["tokens"].get<std::vector<int32_t>>();
    const std::vector<float> x = all_logits(file, ids), y = all_logits(at_load, ids);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
    file.llama.reset();  // before the ops and weights it uses
    file.ops.reset();
    file.model.reset();
    fs::remove_all(dir);
  }
}

// --quantization fp8 on a mixture of experts: every expert's projections become FP8 rows, the
// router stays as stored; the logits move (the arithmetic changed) but stay close.
TEST(Fp8Checkpoint, QuantizationAtLoadCoversTheExpertsNotTheRouter) {
  const fs::path dir = fs::path(DETLLM_SOURCE_DIR) / "tests/data/loaders/hf_v5/qwen3_moe";
  const json g = read_json(dir / "golden.json");
  const auto ids = g["sequences"][0]["tokens"].get<std::vector<int32_t>>();
  Loaded plain = load(dir);
  const std::vector<float> a = all_logits(plain, ids);
  Loaded l;
  l.model = load_model(dir.string());
  quantize_weights_fp8(l.model->weights, l.model->config);
  for (const LayerWeights& layer : l.model->weights.layers) {
    EXPECT_FALSE(dtype_is_fp8(layer.router.w.dtype));
    ASSERT_FALSE(layer.experts.empty());
    for (const MlpWeights& e : layer.experts) {
      EXPECT_EQ(e.w_gate.w.dtype, DType::kF8E4M3);
      EXPECT_EQ(e.w_up.w.dtype, DType::kF8E4M3);
      EXPECT_EQ(e.w_down.w.dtype, DType::kF8E4M3);
    }
  }
  EXPECT_EQ(fp8_class_name(l.model->weights), "fp8=channel/token");
  l.ops = kernels::make_cpu_ops(2);
  l.llama = std::make_unique<LlamaModel>(l.model->config, l.model->weights, *l.ops);
  const std::vector<float> b = all_logits(l, ids);
  float diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i]));
  std::printf("--quantization fp8 on qwen3_moe moves the logits by at most %.3g\n", diff);
  EXPECT_GT(diff, 0.0f);
  EXPECT_LT(diff, 0.5f);
}

// Records, per appended K/V value, |value| / (448 · its head's scale): at most 1 when the
// scales bound every value (nothing saturates).
class KvRatioOps final : public conformance::DelegatingOps {
 public:
  KvRatioOps()
      : DelegatingOps(kernels::make_cpu_ops(2, CpuActivations::kF32, /*kv_fp8=*/true), "ratio") {}
  void kv_append(const float* k, const float* v, const kernels::StepBatch& b,
                 const kernels::KvCacheLayer& c) override {
    EXPECT_NE(c.k_scale, nullptr) << "the model passes its scales to an FP8 KV backend";
    if (c.k_scale != nullptr) {
      const int64_t row = int64_t{c.n_kv_heads} * c.head_dim;
      for (int64_t i = 0; i < b.n_tokens * row; ++i) {
        const int64_t h = (i % row) / c.head_dim;
        worst = std::max(worst, std::fabs(k[i]) / (448.0f * c.k_scale[h]));
        worst = std::max(worst, std::fabs(v[i]) / (448.0f * c.v_scale[h]));
      }
    }
    inner_->kv_append(k, v, b, c);
  }
  float worst = 0;
};

// --kv-dtype fp8: the scales bounded from the weights hold every K/V value the forward appends
// (dense, qkv bias, Qwen3's k norm), and the logits move from the fp32-KV ones (the rounding
// happens) but stay close.
TEST(Fp8KvCache, WeightBoundScalesHoldEveryValueAndTheLogitsStayClose) {
  for (const char* c : {"llama31", "qwen2_linear", "qwen3"}) {
    SCOPED_TRACE(c);
    const fs::path dir = fs::path(DETLLM_SOURCE_DIR) / "tests/data/loaders/hf_v5" / c;
    const auto m = load_model(dir.string());
    const json g = read_json(dir / "golden.json");
    const auto ids = g["sequences"][0]["tokens"].get<std::vector<int32_t>>();
    KvRatioOps ops;
    LlamaModel fp8(m->config, m->weights, ops);
    SoloRunner r8(fp8, static_cast<int32_t>(ids.size()) + 1);
    const std::vector<float> a = r8.feed(ids, true);
    auto cpu = kernels::make_cpu_ops(2);
    LlamaModel f32(m->config, m->weights, *cpu);
    SoloRunner r32(f32, static_cast<int32_t>(ids.size()) + 1);
    const std::vector<float> b = r32.feed(ids, true);
    float diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i]));
    std::printf("%s: largest |K/V| / (448 s) %.3g; FP8 KV moves the logits by at most %.3g\n",
                c, ops.worst, diff);
    EXPECT_LE(ops.worst, 1.0f) << "a value past its head's bound (it would saturate)";
    EXPECT_GT(ops.worst, 1e-3f) << "scales far looser than the values";
    EXPECT_GT(diff, 0.0f) << "K/V were not rounded";
    EXPECT_LT(diff, 0.5f);
  }
}

// A compressed-tensors checkpoint's FP8 KV scales are the cache's scales: read per layer (one
// per tensor repeated over the heads, or one per head), given by fp8_kv_scales in place of the
// weight bound, calibrated so that some values pass them (saturate at ±448 — which the logits
// test above checks against the reference doing the same) — and part of the weights digest.
TEST(Fp8KvCache, CheckpointScalesAreTheCachesScales) {
  for (const char* c : {"ct_kv", "ct_kv_head"}) {
    SCOPED_TRACE(c);
    const auto m = load_model((kData / c).string());
    ASSERT_TRUE(has_kv_scheme(*m));
    ASSERT_TRUE(has_checkpoint_kv_scales(m->weights));
    const int32_t n_kv = m->config.n_kv_heads;
    for (int32_t li = 0; li < m->config.n_layers; ++li) {
      const std::vector<float>& stored = m->weights.layers[static_cast<size_t>(li)].kv_cache_scales;
      ASSERT_EQ(stored.size(), static_cast<size_t>(2 * n_kv));
      EXPECT_EQ(fp8_kv_scales(m->config, m->weights, li), stored);
      if (std::string(c) == "ct_kv") {  // one per tensor: every head the same
        for (int32_t h = 1; h < n_kv; ++h) {
          EXPECT_EQ(stored[static_cast<size_t>(h)], stored[0]);
          EXPECT_EQ(stored[static_cast<size_t>(n_kv + h)], stored[static_cast<size_t>(n_kv)]);
        }
      }
      ModelWeights bare = m->weights;
      bare.layers[static_cast<size_t>(li)].kv_cache_scales.clear();
      EXPECT_NE(fp8_kv_scales(m->config, bare, li), stored) << "the weight bound, not the file's";
    }
    KvRatioOps ops;
    LlamaModel fp8(m->config, m->weights, ops);
    const auto ids = read_json(kData / c / "golden.json")["sequences"][0]["tokens"]
                         .get<std::vector<int32_t>>();
    SoloRunner r(fp8, static_cast<int32_t>(ids.size()) + 1);
    r.feed(ids, true);
    EXPECT_GT(ops.worst, 1.0f) << "calibrated at half the amax: some value must saturate";
    ModelWeights other = m->weights;
    other.layers[0].kv_cache_scales[0] *= 2.0f;
    EXPECT_NE(hash_model_weights(other), hash_model_weights(m->weights));
  }
}

// Negative controls: the same checkpoint with a full-precision KV cache, or with an FP8 cache
// whose scales are the weight bound instead of the file's, is outside the tolerance the logits
// test holds it to, so that test tells the checkpoint's KV arithmetic from the others.
TEST(Fp8KvCache, OtherKvArithmeticsAreOutsideTheTolerance) {
  for (const char* c : {"ct_kv", "ct_kv_head"}) {
    const fs::path dir = kData / c;
    const json g = read_json(dir / "golden.json");
    const std::vector<float> ref = read_f32(dir / "logits.f32");
    const auto ids = g["sequences"][0]["tokens"].get<std::vector<int32_t>>();
    for (const bool bound : {false, true}) {
      SCOPED_TRACE(std::string(c) + (bound ? ": weight-bound scales" : ": fp32 KV"));
      Loaded l;
      l.model = load_model(dir.string());
      if (bound) {
        for (LayerWeights& layer : l.model->weights.layers) layer.kv_cache_scales.clear();
      }
      l.ops = kernels::make_cpu_ops(2, CpuActivations::kF32, /*kv_fp8=*/bound);
      l.llama = std::make_unique<LlamaModel>(l.model->config, l.model->weights, *l.ops);
      const std::vector<float> ours = all_logits(l, ids);
      float worst = 0;
      for (size_t i = 0; i < ours.size(); ++i) {
        worst = std::max(worst, std::fabs(ours[i] - ref[i]) - kRelTol * std::fabs(ref[i]));
      }
      std::printf("%s: worst excess over the relative tolerance %.3g\n", c, worst);
      EXPECT_GT(worst, kCrossTol);
    }
  }
}

}  // namespace
}  // namespace detllm
