#include "model/fp8_weights.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "core/parallel.h"
#include "formats/dequant.h"
#include "kernels/ref/fp8_linear.h"

namespace detllm {

namespace {

// The layer projections FP8 applies to: attention, the dense MLP, every expert's and the shared
// expert's gate/up/down — not a mixture of experts' router or shared-expert gate.
std::vector<HostTensor*> fp8_projections(ModelWeights& w) {
  std::vector<HostTensor*> mats;
  for (LayerWeights& l : w.layers) {
    for (Linear* lin : l.matrices()) {
      if (lin == &l.router || lin == &l.shared_expert_gate || lin->w.empty()) continue;
      mats.push_back(&lin->w);
    }
  }
  return mats;
}

// One 128x128-block matrix as kF8E4M3G128 rows: s = max|w| / 448 over each block (1 when 0),
// codes e4m3(w / s); rows of a block repeat its scales (core/fp8.h).
void quantize_blocks_g128(HostTensor& t) {
  const int64_t rows = t.shape.at(0), cols = t.shape.at(1), B = kFp8ScaleBlock;
  const int64_t nb = (cols + B - 1) / B, row_bytes = dtype_row_bytes(DType::kF8E4M3G128, cols);
  std::vector<uint8_t> raw(static_cast<size_t>(rows * row_bytes));
  std::vector<float> s(static_cast<size_t>(nb));
  for (int64_t r0 = 0; r0 < rows; r0 += B) {
    const int64_t r1 = std::min(rows, r0 + B);
    for (int64_t b = 0; b < nb; ++b) {
      float a = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = b * B; k < std::min(cols, b * B + B); ++k)
          a = std::max(a, std::fabs(t.data[static_cast<size_t>(r * cols + k)]));
      s[static_cast<size_t>(b)] = a == 0.0f ? 1.0f : a / kFp8E4m3Max;
    }
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* row = raw.data() + r * row_bytes;
      fp8_write_row_header(DType::kF8E4M3G128, row, cols, 0.0f, 0.0f, s.data());
      uint8_t* codes = row + 4 * fp8_row_scales(DType::kF8E4M3G128, cols);
      for (int64_t k = 0; k < cols; ++k)
        codes[k] = float_to_fp8_e4m3(t.data[static_cast<size_t>(r * cols + k)] / s[static_cast<size_t>(k / B)]);
    }
  }
  t.data = {};
  t.raw = std::move(raw);
  t.dtype = DType::kF8E4M3G128;
}

}  // namespace

void quantize_weights_fp8(ModelWeights& w, const ModelConfig& /*c*/, Fp8Rows rows) {
  check(!has_fp8_weights(w), "--quantization fp8: the checkpoint's weights are FP8 already "
        "(its quantization_config says how; drop the flag)");
  const std::vector<HostTensor*> mats = fp8_projections(w);
  parallel_each(mats.size(), 32, [&](size_t i) {
    HostTensor& t = *mats[i];
    dequantize_tensor(t);  // the checkpoint's values in fp32 (exact for bf16/fp16)
    if (rows == Fp8Rows::kBlockG128) return quantize_blocks_g128(t);
    const int64_t n_rows = t.shape.at(0), cols = t.shape.at(1);
    const int64_t row_bytes = dtype_row_bytes(DType::kF8E4M3, cols);
    std::vector<uint8_t> raw(static_cast<size_t>(n_rows * row_bytes));
    for (int64_t r = 0; r < n_rows; ++r) {
      kernels::ref::fp8_quantize_weight_row(t.data.data() + r * cols, cols,
                                            raw.data() + r * row_bytes);
    }
    t.data = {};
    t.raw = std::move(raw);
    t.dtype = DType::kF8E4M3;
  });
}

bool has_fp8_weights(const ModelWeights& w) {
  for (const LayerWeights& l : w.layers) {
    for (const Linear* lin : l.matrices()) {
      if (dtype_is_fp8(lin->w.dtype)) return true;
    }
  }
  return dtype_is_fp8(w.tok_embd.dtype) || dtype_is_fp8(w.lm_head.w.dtype);
}

bool has_checkpoint_kv_scales(const ModelWeights& w) {
  return std::any_of(w.layers.begin(), w.layers.end(),
                     [](const LayerWeights& l) { return !l.kv_cache_scales.empty(); });
}

std::optional<Fp8Rows> fp8_rows_named(std::string_view suffix) {
  if (suffix == "fp8") return Fp8Rows::kChannel;
  if (suffix == "fp8g") return Fp8Rows::kBlockG128;
  return std::nullopt;
}

std::vector<DType> fp8_weight_dtypes(const ModelWeights& w) {
  std::vector<DType> out;
  auto add = [&](DType t) {
    if (dtype_is_fp8(t) && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const LayerWeights& l : w.layers)
    for (const Linear* lin : l.matrices()) add(lin->w.dtype);
  add(w.tok_embd.dtype);
  add(w.lm_head.w.dtype);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Row r of t in fp32 (its stored type decoded by core/quant.h).
void row_f32(const HostTensor& t, int64_t r, std::vector<float>& out) {
  const int64_t cols = t.shape.at(1);
  out.resize(static_cast<size_t>(cols));
  if (t.dtype == DType::kF32) {
    std::copy_n(t.data.data() + r * cols, cols, out.data());
    return;
  }
  dequantize_row(t.dtype, t.raw.data() + r * dtype_row_bytes(t.dtype, cols), out.data(), cols);
}

// Per output row d of lin: √dim · ‖W[d, :] ∘ g‖₂ + |bias_d|.
std::vector<double> projection_bounds(const Linear& lin, const std::vector<float>& g) {
  const int64_t rows = lin.w.shape.at(0), cols = lin.w.shape.at(1);
  std::vector<double> b(static_cast<size_t>(rows));
  std::vector<float> row;
  for (int64_t d = 0; d < rows; ++d) {
    row_f32(lin.w, d, row);
    double ss = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double v = static_cast<double>(row[static_cast<size_t>(j)]) * g[static_cast<size_t>(j)];
      ss += v * v;
    }
    b[static_cast<size_t>(d)] = std::sqrt(static_cast<double>(cols)) * std::sqrt(ss) +
                                (lin.bias.empty() ? 0.0 : std::fabs(lin.bias[static_cast<size_t>(d)]));
  }
  return b;
}

}  // namespace

std::vector<float> fp8_kv_scales(const ModelConfig& c, const ModelWeights& w, int32_t layer) {
  const LayerWeights& l = w.layers.at(static_cast<size_t>(layer));
  if (!l.kv_cache_scales.empty()) return l.kv_cache_scales;  // the checkpoint's, as calibrated
  const int32_t hd = c.head_dim, n_kv = c.n_kv_heads, half = hd / 2;
  std::vector<double> kb = projection_bounds(l.wk, l.attn_norm);
  const std::vector<double> vb = projection_bounds(l.wv, l.attn_norm);
  if (c.qk_norm) {  // the k norm replaces the projection's bound
    const double n = std::sqrt(static_cast<double>(c.k_norm_dim()));
    for (size_t d = 0; d < kb.size(); ++d) {
      const size_t i = c.qk_norm_full ? d : d % static_cast<size_t>(hd);
      kb[d] = n * std::fabs(static_cast<double>(l.k_norm.at(i)));
    }
  }
  std::vector<float> out(static_cast<size_t>(2 * n_kv));
  for (int32_t h = 0; h < n_kv; ++h) {
    double km = 0, vm = 0;
    for (int32_t d = 0; d < hd; ++d) {
      const size_t i = static_cast<size_t>(h * hd + d);
      const size_t pair = static_cast<size_t>(h * hd + (d < half ? d + half : d - half));
      km = std::max(km, std::sqrt(kb[i] * kb[i] + kb[pair] * kb[pair]));  // RoPE pairs
      vm = std::max(vm, vb[i]);
    }
    const float ks = static_cast<float>(km / kFp8E4m3Max), vs = static_cast<float>(vm / kFp8E4m3Max);
    out[static_cast<size_t>(h)] = ks > 0.0f && std::isfinite(ks) ? ks : 1.0f;
    out[static_cast<size_t>(n_kv + h)] = vs > 0.0f && std::isfinite(vs) ? vs : 1.0f;
  }
  return out;
}

std::string fp8_class_name(const ModelWeights& w) {
  bool channel = false, block = false, token = false, bounded = false, fixed = false;
  bool group = false;
  for (const LayerWeights& l : w.layers) {
    for (const Linear* lin : l.matrices()) {
      const HostTensor& t = lin->w;
      if (!dtype_is_fp8(t.dtype)) continue;
      (t.dtype == DType::kF8E4M3 ? channel : block) = true;
      if (t.dtype == DType::kF8E4M3G128) {  // dynamic per (token, 128 columns)
        group = true;
        continue;
      }
      const int64_t rb = dtype_row_bytes(t.dtype, t.shape.at(1));
      for (int64_t r = 0; r < t.shape.at(0); ++r) {
        const uint8_t* row = t.raw.data() + r * rb;
        if (fp8_row_input_scale(row) > 0.0f) {
          fixed = true;
        } else if (fp8_row_act_bound(row) > 0.0f) {
          bounded = true;
        } else {
          token = true;
        }
      }
    }
  }
  auto join = [](std::initializer_list<std::pair<bool, const char*>> parts) {
    std::string s;
    for (const auto& [on, name] : parts) {
      if (!on) continue;
      if (!s.empty()) s += '+';
      s += name;
    }
    return s;
  };
  return "fp8=" + join({{channel, "channel"}, {block, "block128"}}) + "/" +
         join({{token, "token"}, {group, "token-group128"}, {bounded, "token-bounded"},
               {fixed, "static"}});
}

}  // namespace detllm
