// Llama-family forward pass on kernels::Ops (see llama_model.h).
#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/parallel.h"
#include "formats/dequant.h"
#include "kernels/fp8_device_matrix.h"
#include "model/fp8_weights.h"
#include "model/synthetic.h"
#include "model/tp_group.h"

namespace detllm {

struct LlamaModel::Workspace {
  int32_t capacity = 0;       // tokens (activations)
  int32_t capacity_meta = 0;  // tokens (metadata; eager steps only)
  int32_t capacity_rows = 0;
  int32_t capacity_seq_entries = 0;
  // Activations (n, ·): x the fp32 residual stream; xb, att and h GEMM inputs (the backend's
  // GEMM input dtype, sized for fp32); qkv, q, proj and gate_up fp32.
  kernels::Buffer x, xb, qkv, q, att, proj, gate_up, h;
  kernels::Buffer tokens, positions, seq_of_token, slots, rows;  // (n) int32 metadata
  kernels::Buffer block_tables;                                  // (n_seqs * max_blocks)
  kernels::Buffer out_rows, logits;                              // (n_rows, dim / vocab)
  // Tensor parallel: one chunk's x columns, this rank's partials, every chunk's partials.
  kernels::Buffer tp_x, tp_parts, tp_all;
};

// Padded decode steps. One workspace for every graph (sized for the largest bucket) and, per
// (padded shape, KV storage, GEMM numerics), the step's metadata buffer and its graph: a replay
// reads the metadata at that fixed address, refreshed from pinned staging before each replay.
struct LlamaModel::GraphState {
  struct Entry {
    PaddedStepKey key;
    std::vector<const void*> kv_pools;  // (2 n_layers) the KV storage the graph writes
    int32_t kv_blocks = 0, kv_block_size = 0;
    // The GEMM numerics it was captured with (Ops::gemm_numerics of the step's; the verified
    // mode switches per step): a graph replays the GEMM executions it recorded.
    NumericsMode gemm_numerics = NumericsMode::kInvariant;
    kernels::Buffer meta;  // PaddedStep::meta in backend memory
    std::unique_ptr<kernels::OpsGraph> graph;
  };

  explicit GraphState(kernels::Ops& ops) : ops(ops) {}
  ~GraphState() {
    entries.clear();
    if (staging) ops.graph_capture()->free_pinned(staging);
  }

  Entry& entry(const PaddedStepKey& key, const KvStorage& kv, NumericsMode numerics) {
    const NumericsMode gemm_numerics = ops.gemm_numerics(numerics);
    // The KV storage is part of the key: its pools and geometry are baked into the kernels.
    std::vector<const void*> pools;
    for (int32_t i = 0; i < kv.n_layers(); ++i) {
      pools.push_back(kv.layer(i).k);
      pools.push_back(kv.layer(i).v);
    }
    const int32_t kv_blocks = kv.n_layers() > 0 ? kv.layer(0).n_blocks : 0;
    // Most recently used last: a hit moves to the back, the front is dropped when full.
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      Entry& e = **it;
      if (e.key == key && e.kv_pools == pools && e.kv_blocks == kv_blocks &&
          e.kv_block_size == kv.block_size() && e.gemm_numerics == gemm_numerics) {
        std::rotate(it, it + 1, entries.end());
        return *entries.back();
      }
    }
    if (entries.size() >= kMaxStepGraphs) entries.erase(entries.begin());
    auto e = std::make_unique<Entry>();
    e->key = key;
    e->kv_pools = std::move(pools);
    e->kv_blocks = kv_blocks;
    e->kv_block_size = kv.block_size();
    e->gemm_numerics = gemm_numerics;
    e->meta = {ops, padded_meta_size(key) * sizeof(int32_t)};
    entries.push_back(std::move(e));
    return *entries.back();
  }
  // Copies meta into pinned staging. The previous step's upload from staging must have run
  // first: a step need not end with a download (its logits may stay in backend memory, or it
  // wants none), so wait here (cheap: the stream is normally idle by now).
  void stage(const std::vector<int32_t>& meta) {
    ops.synchronize();
    const size_t bytes = meta.size() * sizeof(int32_t);
    if (bytes > staging_bytes) {
      if (staging) ops.graph_capture()->free_pinned(staging);
      staging = nullptr;
      staging_bytes = 0;
      staging = ops.graph_capture()->alloc_pinned(bytes);
      staging_bytes = bytes;
    }
    std::memcpy(staging, meta.data(), bytes);
  }

  kernels::Ops& ops;
  PaddedStep step;  // host metadata of the current padded step (reused)
  Workspace ws;
  std::vector<std::unique_ptr<Entry>> entries;
  void* staging = nullptr;
  size_t staging_bytes = 0;
};

LlamaModel::LlamaModel(const ModelConfig& config, const ModelWeights& w, kernels::Ops& ops,
                       ProjectionLayout layout, const TpRank& tp)
    : config_(config),
      ops_(ops),
      tp_(tp),
      // Host fp32 weights on a host backend are used in place: fusing would copy them.
      layout_(layout != ProjectionLayout::kAuto ? layout
              : ops.host_memory() && ops.weight_dtype() == DType::kF32
                  ? ProjectionLayout::kSeparate
                  : ProjectionLayout::kFused),
      rope_(config.rope_table()),
      ws_(std::make_unique<Workspace>()) {
  if (const std::vector<DType> t = fp8_weight_dtypes(w); !t.empty()) {
    fp8_projections_ = true;
    fp8_rows_ = t.front();
  }
  if (!w.rope_freq_factors.empty()) {
    check(w.rope_freq_factors.size() == rope_.inv_freq.size(),
          "rope_freqs has {} factors, expected {}", w.rope_freq_factors.size(),
          rope_.inv_freq.size());
    for (size_t i = 0; i < rope_.inv_freq.size(); ++i) rope_.inv_freq[i] /= w.rope_freq_factors[i];
  }
  if (tp_.active()) {
    check(tp_.degree >= 1 && tp_.rank >= 0 && tp_.rank < tp_.degree &&
              (tp_.degree == 1 || (tp_.exchange && tp_.exchange->degree() == tp_.degree)) &&
              tp_.local.o >= 1 && tp_.local.o <= tp_.chunks.o && tp_.local.ffn >= 1 &&
              tp_.local.ffn <= tp_.chunks.ffn &&
              (tp_.degree > 1 || tp_.local == tp_.chunks),
          "tensor parallelism: rank {} of degree {} holding {} / {} of {} / {} chunks with {} "
          "exchange is inconsistent (tp_rank makes a consistent one)",
          tp_.rank, tp_.degree, tp_.local.o, tp_.local.ffn, tp_.chunks.o, tp_.chunks.ffn,
          tp_.exchange ? "an" : "no");
  }
  if (config.moe.active()) {
    check(!tp_.active(), "tensor parallelism does not support mixture-of-experts models yet");
    moe_ = std::make_unique<MoeFfn>(config_, ops);  // refuses a backend that cannot run it
  }
  if (ops.kv_fp8()) {
    // FP8 KV: each layer's per-head scales, from the weights, once (model/fp8_weights.h).
    for (int32_t li = 0; li < config.n_layers; ++li) {
      kv_scales_.push_back(fp8_kv_scales(config, w, li));
    }
    if (!ops.host_memory()) {
      // A device backend reads them from its memory: uploaded before any weight, so that
      // owned_[li] is layer li's copy (forward's KvCacheLayer::k_scale).
      check(owned_.empty(), "FP8 KV: the scales must be the first buffers placed");
      for (const std::vector<float>& s : kv_scales_) place(s);
    }
  }
  tok_embd_ = place(w.tok_embd);
  for (const LayerWeights& l : w.layers) {
    // With the canonical chunks the row-parallel layers run their chunks alone: o and down are
    // placed as chunks only (their whole views keep the shape, no data).
    auto lin = [&](const Linear& t) {
      if (tp_.active() && (&t == &l.wo || &t == &l.w_down))
        return LinearView{{nullptr, t.w.dtype, t.w.shape[0], t.w.shape[1]}, nullptr};
      return place(t);
    };
    layers_.push_back(layer_view(
        l, [&](const std::vector<float>& t) { return place(t); }, lin,
        [&](std::initializer_list<const Linear*> parts) { return place(parts); }));
    if (moe_) {
      MoeLayerView& m = layers_.back().moe;
      m.router = place(l.router.w);
      for (const MlpWeights& e : l.experts) {
        // Fused like the dense gate/up when the layout fuses (device backends); the same bits.
        if (layout_ == ProjectionLayout::kFused) {
          m.gate_up.push_back(place_fused({&e.w_gate, &e.w_up}).w);
        } else {
          m.gate.push_back(place(e.w_gate.w));
          m.up.push_back(place(e.w_up.w));
        }
        m.down.push_back(place(e.w_down.w));
      }
      if (!l.shared_expert_gate.w.empty()) {
        m.shared_gate = place(l.shared_expert.w_gate.w);
        m.shared_up = place(l.shared_expert.w_up.w);
        m.shared_down = place(l.shared_expert.w_down.w);
        m.shared_expert_gate = place(l.shared_expert_gate.w);
      }
      check(m.down.size() == static_cast<size_t>(config.moe.n_experts) && !l.router.w.empty() &&
                (m.shared_expert_gate.data != nullptr) == (config.moe.shared_expert_ffn_dim > 0),
            "mixture-of-experts weights do not match the config ({} experts{})",
            config.moe.n_experts, config.moe.shared_expert_ffn_dim > 0 ? ", a shared expert" : "");
    }
    if (tp_.active()) {
      layers_.back().wo_chunks = place_col_chunks(l.wo.w, tp_.local.o);
      layers_.back().down_chunks = place_col_chunks(l.w_down.w, tp_.local.ffn);
    }
  }
  out_norm_ = place(w.out_norm);
  lm_head_ = w.lm_head.w.empty() ? tok_embd_ : place(w.lm_head.w);
}

LlamaModel::LlamaModel(const ModelConfig& config, const SyntheticWeights& r, kernels::Ops& ops,
                       ProjectionLayout layout)
    : config_(config),
      ops_(ops),
      // Generated weights are written into backend memory anyway: fusing is free.
      layout_(layout == ProjectionLayout::kAuto ? ProjectionLayout::kFused : layout),
      rope_(config.rope_table()),
      ws_(std::make_unique<Workspace>()) {
  const auto& c = config;
  check(!ops.kv_fp8(), "FP8 KV: its scales are bounded from host weights; generated weights "
        "have none (load the model, or use an fp32 KV cache)");
  if (c.moe.active()) moe_ = std::make_unique<MoeFfn>(config_, ops);
  const bool shapes_match =
      r.layers.size() == static_cast<size_t>(c.n_layers) && r.tok_embd.rows == c.vocab_size &&
      r.tok_embd.cols == c.dim && r.lm_head.empty() == c.tied_embeddings &&
      (r.layers.empty() ||
       (r.layers[0].wq.w.rows == c.q_dim() && r.layers[0].wk.w.rows == c.kv_dim() &&
        r.layers[0].w_gate.w.rows == (c.moe.active() ? 0 : c.ffn_dim) &&
        r.layers[0].q_norm.rows == (c.qk_norm ? c.q_norm_dim() : 0) &&
        r.layers[0].wq.bias.empty() != c.qkv_bias &&
        r.layers[0].experts.size() == static_cast<size_t>(c.moe.n_experts)));
  check(shapes_match,
        "synthetic recipe does not match the model config ({} layers, dim {}, vocab {}): build "
        "it with synthetic_recipe(config, seed)",
        c.n_layers, c.dim, c.vocab_size);
  tok_embd_ = generate_matrix(r.tok_embd);
  for (const SyntheticLayer& l : r.layers) {
    layers_.push_back(layer_view(
        l, [&](const SyntheticTensor& t) { return generate_vector(t); },
        [&](const SyntheticLinear& t) { return generate(t); },
        [&](std::initializer_list<const SyntheticLinear*> parts) { return generate(parts); }));
    if (moe_) layers_.back().moe = generate_moe(l);
  }
  out_norm_ = generate_vector(r.out_norm);
  lm_head_ = r.lm_head.empty() ? tok_embd_ : generate_matrix(r.lm_head);
}

LlamaModel::~LlamaModel() = default;

void LlamaModel::refresh_kv_scales(const ModelWeights& w) {
  for (int32_t li = 0; li < static_cast<int32_t>(kv_scales_.size()); ++li) {
    std::vector<float>& s = kv_scales_[static_cast<size_t>(li)];
    const std::vector<float> fresh = fp8_kv_scales(config_, w, li);
    check(fresh.size() == s.size(), "FP8 KV scales of layer {}: {} values, {} placed", li,
          fresh.size(), s.size());
    std::copy(fresh.begin(), fresh.end(), s.begin());  // in place: the forward's pointers
    if (!ops_.host_memory()) {
      ops_.upload(owned_[static_cast<size_t>(li)].data(), s.data(), s.size() * sizeof(float));
    }
  }
  if (!kv_scales_.empty() && !ops_.host_memory()) ops_.synchronize();
}

const float* LlamaModel::place(const std::vector<float>& v) {
  if (ops_.host_memory()) return v.data();
  owned_.emplace_back(ops_, v.size() * sizeof(float));
  ops_.upload(owned_.back().data(), v.data(), v.size() * sizeof(float));
  return owned_.back().f32();
}

namespace {

// Host rows of several (rows_i, cols) tensors, one after another, as one matrix.
struct RowParts {
  std::vector<const HostTensor*> parts;
  int64_t rows = 0, cols = 0;
  size_t numel() const { return static_cast<size_t>(rows) * static_cast<size_t>(cols); }
};

RowParts row_parts(std::span<const HostTensor* const> parts) {
  RowParts r;
  for (const HostTensor* t : parts) {
    const int64_t cols = t->shape.at(1);
    check(r.parts.empty() || cols == r.cols, "fused weights: {} columns after {}", cols, r.cols);
    r.parts.push_back(t);
    r.rows += t->shape.at(0);
    r.cols = cols;
  }
  return r;
}

}  // namespace

kernels::WeightMatrix LlamaModel::place(const HostTensor& t) {
  const int64_t rows = t.shape.at(0), cols = t.shape.at(1);
  // Host backends read weights in place in every type they accept (CPU: fp32, f16, bf16 and
  // the GGUF block types, decoded in registers with the bits of dequantize_tensor).
  if (ops_.host_memory() && ops_.reads_weight_dtype(t.dtype)) return {t.ptr(), t.dtype, rows, cols};
  const HostTensor* one[] = {&t};
  return place_rows(one);
}

kernels::WeightMatrix LlamaModel::place_rows(std::span<const HostTensor* const> tensors) {
  if (!tensors.empty() && dtype_is_fp8(tensors[0]->dtype) &&
      ops_.reads_weight_dtype(tensors[0]->dtype)) {
    // FP8 rows carry their scales: fusing concatenates the rows' bytes, values untouched.
    const DType dt = tensors[0]->dtype;
    int64_t rows = 0;
    const int64_t cols = tensors[0]->shape.at(1);
    for (const HostTensor* t : tensors) {
      check(t->dtype == dt && t->shape.at(1) == cols,
            "fused weights: FP8 parts must share their type and columns");
      rows += t->shape.at(0);
    }
    if (!ops_.host_memory()) {
      // A device backend takes codes and scales apart (kernels/fp8_device_matrix.h; it refuses,
      // by name, rows its FP8 GEMMs cannot run): the concatenated rows, split, uploaded.
      std::vector<uint8_t> host_rows;
      host_rows.reserve(static_cast<size_t>(rows * dtype_row_bytes(dt, cols)));
      for (const HostTensor* t : tensors) host_rows.insert(host_rows.end(), t->raw.begin(), t->raw.end());
      std::vector<uint8_t> split(kernels::fp8_device_bytes(dt, rows, cols));
      kernels::fp8_device_split(dt, host_rows.data(), rows, cols, split.data());
      owned_.emplace_back(ops_, split.size());
      ops_.upload(owned_.back().data(), split.data(), split.size());
      return {owned_.back().data<char>(), dt, rows, cols};
    }
    owned_.emplace_back(ops_, static_cast<size_t>(rows * dtype_row_bytes(dt, cols)));
    char* dst = owned_.back().data<char>();
    for (const HostTensor* t : tensors) {
      ops_.upload(dst, t->raw.data(), t->raw.size());
      dst += t->raw.size();
    }
    return {owned_.back().data<char>(), dt, rows, cols};
  }
  // Parts of other types are converted through fp32 (exact: the values the fp32 load gives).
  std::vector<HostTensor> widened;
  widened.reserve(tensors.size());
  std::vector<const HostTensor*> fp32;
  for (const HostTensor* t : tensors) {
    // FP8 rows are an arithmetic (activations rounded per token: kernels/ref/fp8_linear.h),
    // not only a storage: widening them would run another numerics under the FP8 fingerprint.
    check(!dtype_is_fp8(t->dtype), "backend {} does not run FP8 weights ({}); the cpu backend "
          "does", ops_.name(), dtype_name(t->dtype));
    if (t->dtype == DType::kF32) {
      fp32.push_back(t);
      continue;
    }
    HostTensor& w = widened.emplace_back();
    w.shape = t->shape;
    w.dtype = t->dtype;
    w.raw = t->raw;
    dequantize_tensor(w);
    fp32.push_back(&w);
  }
  const RowParts r = row_parts(fp32);
  const DType dt = ops_.weight_dtype();
  const size_t n = r.numel();
  owned_.emplace_back(ops_, n * dtype_size(dt));
  char* dst = owned_.back().data<char>();
  if (dt == DType::kF32) {
    size_t offset = 0;
    for (const HostTensor* t : r.parts) {
      ops_.upload(dst + offset, t->data.data(), t->data.size() * sizeof(float));
      offset += t->data.size() * sizeof(float);
    }
  } else if (dt == DType::kBF16) {
    // Rounded on every core (an 8B model's 16 GB otherwise takes ~10 s on one); each element's
    // rounding is the same whichever thread does it.
    const std::unique_ptr<uint16_t[]> h(new uint16_t[n]);  // every element written below
    size_t offset = 0;
    for (const HostTensor* t : r.parts) {
      const size_t tn = t->data.size();
      const size_t n_parts = std::max<size_t>(1, tn >> 20);  // parts of 1M elements
      parallel_each(n_parts, n_parts, [&](size_t part) {
        const size_t begin = tn * part / n_parts, end = tn * (part + 1) / n_parts;
        for (size_t i = begin; i < end; ++i) h[offset + i] = f32_to_bf16(t->data[i]);
      });
      offset += tn;
    }
    ops_.upload(dst, h.get(), n * sizeof(uint16_t));
  } else {
    throw_error("backend {} asks for unsupported weight dtype {}", ops_.name(), dtype_name(dt));
  }
  return {dst, dt, r.rows, r.cols};
}

LlamaModel::LinearView LlamaModel::place(const Linear& l) {
  return {place(l.w), l.bias.empty() ? nullptr : place(l.bias)};
}

LlamaModel::LinearView LlamaModel::place_fused(std::initializer_list<const Linear*> parts) {
  std::vector<const HostTensor*> ws;
  std::vector<float> bias;
  for (const Linear* l : parts) {
    check(l->bias.empty() == parts.begin()[0]->bias.empty(),
          "fused weights: some parts have a bias and some do not");
    ws.push_back(&l->w);
    bias.insert(bias.end(), l->bias.begin(), l->bias.end());
  }
  LinearView v;
  v.w = place_rows(ws);
  if (!bias.empty()) {
    owned_.emplace_back(ops_, bias.size() * sizeof(float));
    ops_.upload(owned_.back().data(), bias.data(), bias.size() * sizeof(float));
    v.bias = owned_.back().f32();
  }
  return v;
}

LlamaModel::Projection LlamaModel::place(std::initializer_list<const Linear*> parts) {
  check(parts.size() == 2 || parts.size() == 3, "a projection has 2 or 3 parts");
  Projection p;
  for (const Linear* l : parts) p.cols += l->w.shape.at(0);
  // A device backend quantizes a matrix's input once, by one rule (kernels/fp8_device_matrix.h):
  // FP8 parts with different static input scales or bounds stay apart (the same bits: each part
  // is its rows' arithmetic either way).
  bool one_rule = true;
  for (const Linear* l : parts) {
    const HostTensor& a = parts.begin()[0]->w;
    one_rule = one_rule && (ops_.host_memory() || !dtype_is_fp8(a.dtype) ||
                            !dtype_is_fp8(l->w.dtype) || a.raw.empty() || l->w.raw.empty() ||
                            kernels::fp8_same_activation_rule(a.raw.data(), l->w.raw.data()));
  }
  if (layout_ == ProjectionLayout::kFused && one_rule) {
    p.parts.push_back({place_fused(parts), 0});
    return p;
  }
  int64_t col = 0;
  for (const Linear* l : parts) {
    p.parts.push_back({place(*l), col});
    col += l->w.shape.at(0);
  }
  return p;
}

const float* LlamaModel::generate_vector(const SyntheticTensor& t) {
  owned_.emplace_back(ops_, static_cast<size_t>(t.numel()) * sizeof(float));
  ops_.fill_uniform(owned_.back().data(), DType::kF32, t.numel(), t.key, t.center, t.scale);
  return owned_.back().f32();
}

kernels::WeightMatrix LlamaModel::generate_matrix(const SyntheticTensor& t) {
  // The dtype place() converts host weights to; fill_uniform rounds to it the same way.
  const DType dt = ops_.weight_dtype();
  check(dt == DType::kF32 || dt == DType::kBF16, "backend {} asks for unsupported weight dtype {}",
        ops_.name(), dtype_name(dt));
  owned_.emplace_back(ops_, static_cast<size_t>(t.numel()) * dtype_size(dt));
  ops_.fill_uniform(owned_.back().data(), dt, t.numel(), t.key, t.center, t.scale);
  return {owned_.back().data(), dt, t.rows, t.cols};
}

LlamaModel::LinearView LlamaModel::generate(const SyntheticLinear& l) {
  return {generate_matrix(l.w), l.bias.empty() ? nullptr : generate_vector(l.bias)};
}

LlamaModel::LinearView LlamaModel::generate_fused(
    std::initializer_list<const SyntheticLinear*> parts) {
  const DType dt = ops_.weight_dtype();
  check(dt == DType::kF32 || dt == DType::kBF16, "backend {} asks for unsupported weight dtype {}",
        ops_.name(), dtype_name(dt));
  int64_t rows = 0, cols = parts.begin()[0]->w.cols, n_bias = 0;
  for (const SyntheticLinear* l : parts) {
    check(l->w.cols == cols, "fused weights: {} columns after {}", l->w.cols, cols);
    check(l->bias.empty() == parts.begin()[0]->bias.empty(),
          "fused weights: some parts have a bias and some do not");
    rows += l->w.rows;
    n_bias += l->bias.numel();
  }
  // Each part filled at its offset with its own key: the same values as generated apart.
  owned_.emplace_back(ops_, static_cast<size_t>(rows * cols) * dtype_size(dt));
  char* w = owned_.back().data<char>();
  size_t offset = 0;
  for (const SyntheticLinear* l : parts) {
    ops_.fill_uniform(w + offset, dt, l->w.numel(), l->w.key, l->w.center, l->w.scale);
    offset += static_cast<size_t>(l->w.numel()) * dtype_size(dt);
  }
  LinearView v{{w, dt, rows, cols}, nullptr};
  if (n_bias > 0) {
    owned_.emplace_back(ops_, static_cast<size_t>(n_bias) * sizeof(float));
    float* b = owned_.back().f32();
    int64_t at = 0;
    for (const SyntheticLinear* l : parts) {
      ops_.fill_uniform(b + at, DType::kF32, l->bias.numel(), l->bias.key, l->bias.center,
                        l->bias.scale);
      at += l->bias.numel();
    }
    v.bias = b;
  }
  return v;
}

LlamaModel::Projection LlamaModel::generate(std::initializer_list<const SyntheticLinear*> parts) {
  Projection p;
  for (const SyntheticLinear* l : parts) p.cols += l->w.rows;
  if (layout_ == ProjectionLayout::kFused) {
    p.parts.push_back({generate_fused(parts), 0});
    return p;
  }
  int64_t col = 0;
  for (const SyntheticLinear* l : parts) {
    p.parts.push_back({generate(*l), col});
    col += l->w.rows;
  }
  return p;
}

MoeLayerView LlamaModel::generate_moe(const SyntheticLayer& l) {
  const DType dt = ops_.weight_dtype();
  const int64_t n_experts = config_.moe.n_experts, dim = config_.dim;
  MoeLayerView m;
  // The router's recipe holds its distinct rows (synthetic.h): row e is row e % period.
  const kernels::WeightMatrix base = generate_matrix(l.router);
  const size_t row_bytes = static_cast<size_t>(dim) * dtype_size(dt);
  owned_.emplace_back(ops_, static_cast<size_t>(n_experts) * row_bytes);
  char* router = owned_.back().data<char>();
  for (int64_t e = 0; e < n_experts; ++e) {
    ops_.copy(router + e * row_bytes,
              static_cast<const char*>(base.data) + (e % l.router.rows) * row_bytes, row_bytes);
  }
  m.router = {router, dt, n_experts, dim};
  for (const SyntheticExpert& e : l.experts) {
    if (layout_ == ProjectionLayout::kFused) {
      m.gate_up.push_back(generate_fused({&e.w_gate, &e.w_up}).w);
    } else {
      m.gate.push_back(generate_matrix(e.w_gate.w));
      m.up.push_back(generate_matrix(e.w_up.w));
    }
    m.down.push_back(generate_matrix(e.w_down.w));
  }
  check(config_.moe.shared_expert_ffn_dim == 0,
        "synthetic mixture-of-experts models have no shared expert");
  return m;
}

std::vector<LlamaModel::LinearView> LlamaModel::place_col_chunks(const HostTensor& w,
                                                                 int32_t n_chunks) {
  check(w.shape.size() == 2 && w.shape[1] % n_chunks == 0,
        "tensor parallelism: a row-parallel weight's K must be a multiple of its {} chunks",
        n_chunks);
  const int64_t kc = w.shape[1] / n_chunks;
  std::vector<LinearView> out;
  for (int32_t j = 0; j < n_chunks; ++j)
    out.push_back({place(chunk_host_.emplace_back(tp_slice_cols(w, j * kc, kc))), nullptr});
  return out;
}

void LlamaModel::row_parallel(Workspace& ws, const void* x, int32_t n, int64_t k_local,
                              const std::vector<LinearView>& chunks, int32_t total, float* y,
                              NumericsMode numerics) const {
  const int32_t local = static_cast<int32_t>(chunks.size());
  const int64_t kc = k_local / local;
  const size_t esz = dtype_size(ops_.gemm_input_dtype());
  const int64_t plane = int64_t{n} * config_.dim;
  const auto* xs = static_cast<const char*>(x);
  char* xc = ws.tp_x.data<char>();
  // Without an exchange (degree 1) the partials go straight where the tree sums them. With
  // one, in the two halves of tp_parts in turn: a faster rank computes the next exchange's
  // partials while a slower one still copies this one's (TpExchange::all_gather).
  // Each half holds the rank's larger chunk count (o and down may differ on uneven ranks).
  float* parts = ws.tp_all.f32();
  if (tp_.exchange) {
    parts = ws.tp_parts.f32() + tp_turn_ * std::max(tp_.local.o, tp_.local.ffn) * plane;
    tp_turn_ ^= 1;
  }
  for (int32_t j = 0; j < local; ++j) {
    ops_.copy_rows(xc, kc * esz, xs + j * kc * esz, k_local * esz, kc * esz, n);
    ops_.matmul_rounded(xc, n, chunks[j].w, nullptr, parts + j * plane, config_.dim, numerics);
  }
  if (tp_.exchange) {  // rank r holds a contiguous range of chunks: rank order is chunk order
    ops_.synchronize();  // the partials are complete, and the last exchange's copies are done
    tp_.exchange->all_gather(tp_.rank, ops_, parts, local * plane, ws.tp_all.f32());
  }
  tp_tree_sum(ops_, ws.tp_all.f32(), total, plane);
  ops_.copy(y, ws.tp_all.f32(), plane * sizeof(float));
}

void LlamaModel::project(const void* x, int32_t n, const Projection& p, float* y,
                         NumericsMode numerics) const {
  for (const Projection::Part& part : p.parts)
    ops_.matmul_rounded(x, n, part.lin.w, part.lin.bias, y + part.col, p.cols, numerics);
}

void LlamaModel::prepare_gemms(int32_t max_rows) const {
  if (tp_group_)
    tp_group_->prepare_gemms(max_rows);
  else
    prepare_rank_gemms(max_rows);
}

void LlamaModel::prepare_rank_gemms(int32_t max_rows) const {
  if (layers_.empty()) return;
  // Every layer has the shapes of layer 0; one call per distinct (out, in) shape.
  const LayerView& l = layers_[0];
  std::vector<const kernels::WeightMatrix*> weights{&lm_head_};
  if (tp_.active()) {  // the row-parallel layers run their canonical chunks' shapes
    weights.push_back(&l.wo_chunks.front().w);
    weights.push_back(&l.down_chunks.front().w);
  } else {
    weights.push_back(&l.wo.w);
    weights.push_back(&l.w_down.w);
  }
  for (const Projection* p : {&l.qkv, &l.gate_up})
    for (const Projection::Part& part : p->parts) weights.push_back(&part.lin.w);
  if (moe_) {  // every expert has the shapes of expert 0
    weights.push_back(&l.moe.router);
    // (a group holds at most one row per token: max_rows covers every group)
    weights.insert(weights.end(), {l.moe.gate_up.empty() ? &l.moe.gate.at(0) : &l.moe.gate_up.at(0),
                                   &l.moe.down.at(0)});
    if (l.moe.shared_expert_gate.data != nullptr)
      weights.insert(weights.end(),
                     {&l.moe.shared_gate, &l.moe.shared_down, &l.moe.shared_expert_gate});
  }
  std::erase_if(weights, [](const kernels::WeightMatrix* w) { return w->rows == 0; });
  std::vector<std::pair<int64_t, int64_t>> seen;
  for (const kernels::WeightMatrix* w : weights) {
    const std::pair<int64_t, int64_t> shape{w->rows, w->cols};
    if (std::find(seen.begin(), seen.end(), shape) != seen.end()) continue;
    seen.push_back(shape);
    ops_.prepare_matmul(*w, max_rows);
  }
  ops_.synchronize();
}

void LlamaModel::forward(std::span<const int32_t> tokens, const kernels::StepBatch& batch,
                         std::span<const int32_t> logit_rows, KvStorage& kv,
                         std::vector<float>& logits, DecodePadding padding) const {
  const StepLogits out = forward(tokens, batch, logit_rows, kv, padding);
  logits.resize(static_cast<size_t>(out.n_rows) * static_cast<size_t>(out.vocab));
  download_logits(out, 0, out.n_rows, logits.data());
}

void LlamaModel::download_logits(const StepLogits& logits, int32_t first_row, int32_t n_rows,
                                 float* dst) const {
  check(first_row >= 0 && n_rows >= 0 && first_row + n_rows <= logits.n_rows,
        "download_logits: rows [{}, {}) outside the step's {} logit rows", first_row,
        first_row + n_rows, logits.n_rows);
  const size_t vocab = static_cast<size_t>(logits.vocab);
  ops_.download(dst, logits.data + static_cast<size_t>(first_row) * vocab,
                static_cast<size_t>(n_rows) * vocab * sizeof(float));
  stats_.n_logit_rows_downloaded += n_rows;
}

LlamaModel::StepLogits LlamaModel::forward(std::span<const int32_t> tokens,
                                           const kernels::StepBatch& host_batch,
                                           std::span<const int32_t> logit_rows, KvStorage& kv,
                                           DecodePadding padding) const {
  if (tp_group_ == nullptr) return forward_rank(tokens, host_batch, logit_rows, kv, padding);
  return tp_group_->forward(tokens, host_batch, logit_rows, kv, padding, [&] {
    return forward_rank(tokens, host_batch, logit_rows, kv, padding);
  });
}

void LlamaModel::copy_kv_block(KvStorage& kv, int32_t src, int32_t dst) const {
  kv.copy_block(src, dst);
  if (tp_group_) tp_group_->copy_block(kv, src, dst);
}

LlamaModel::StepLogits LlamaModel::forward_rank(std::span<const int32_t> tokens,
                                                const kernels::StepBatch& host_batch,
                                                std::span<const int32_t> logit_rows, KvStorage& kv,
                                                DecodePadding padding) const {
  const ModelConfig& c = config_;
  const int32_t n = static_cast<int32_t>(tokens.size());
  check(n == host_batch.n_tokens, "forward: {} tokens but the batch describes {}", n,
        host_batch.n_tokens);
  for (int32_t t : tokens) {
    check(t >= 0 && t < c.vocab_size, "token id {} is outside the vocabulary (0…{})", t,
          c.vocab_size - 1);
  }
  for (int32_t i = 0; i < n; ++i) {
    check(host_batch.positions[i] >= 0 && host_batch.positions[i] < c.max_position,
          "position {} is beyond the model's context of {} tokens", host_batch.positions[i],
          c.max_position);
  }
  for (int32_t t : logit_rows) {
    check(t >= 0 && t < n, "logit row {} is outside the step's {} tokens", t, n);
  }

  // The one place that decides how a step runs (step_padding.h): as it is, or padded to a
  // bucket — replayed from a graph where the backend has them, eagerly elsewhere.
  kernels::GraphCapture* capture = graph_capture();
  const std::optional<PaddedStepKey> key =
      plan_padded_step(host_batch, padding, capture != nullptr, kv.n_pad_slots());
  const int32_t n_out = static_cast<int32_t>(logit_rows.size());
  if (!key) return {forward_eager(tokens, host_batch, logit_rows, kv), n_out, c.vocab_size};
  if (!graphs_) graphs_ = std::make_unique<GraphState>(ops_);
  PaddedStep& step = graphs_->step;
  pad_step(*key, tokens, host_batch, logit_rows, kv.pad_block(), kv.block_size(), step);
  ++stats_.n_padded_steps;
  // The real logit rows come first; the pad rows' logits after them are never read.
  const float* out = capture == nullptr ? forward_eager(step.tokens(), step.batch(step.meta.data()),
                                                        step.logit_rows(), kv)
                                        : forward_graph(step, kv);
  return {out, n_out, c.vocab_size};
}

void LlamaModel::grow_activations(Workspace& ws, int32_t n, int32_t n_out) const {
  const ModelConfig& c = config_;
  const size_t f = sizeof(float);
  if (n > ws.capacity) {
    const size_t un = static_cast<size_t>(std::max(n, 2 * ws.capacity));
    ws.x = {ops_, un * c.dim * f};
    ws.xb = {ops_, un * c.dim * f};
    ws.qkv = {ops_, un * (c.q_dim() + 2 * c.kv_dim()) * f};
    ws.q = {ops_, un * c.q_dim() * f};
    ws.att = {ops_, un * c.q_dim() * f};
    ws.proj = {ops_, un * c.dim * f};
    const size_t ffn = c.moe.active() ? 0 : static_cast<size_t>(c.ffn_dim);  // MoE: MoeFfn's
    ws.gate_up = {ops_, un * 2 * ffn * f};
    ws.h = {ops_, un * ffn * f};
    if (tp_.active()) {
      const size_t local = static_cast<size_t>(std::max(tp_.local.o, tp_.local.ffn));
      const size_t total = static_cast<size_t>(std::max(tp_.chunks.o, tp_.chunks.ffn));
      ws.tp_x = {ops_, un * std::max(c.q_dim(), c.ffn_dim) * f};
      ws.tp_parts = {ops_, 2 * local * un * c.dim * f};
      ws.tp_all = {ops_, total * un * c.dim * f};
    }
    ws.capacity = static_cast<int32_t>(un);
  }
  if (n_out > ws.capacity_rows) {
    const size_t ur = static_cast<size_t>(std::max(n_out, 2 * ws.capacity_rows));
    ws.out_rows = {ops_, ur * c.dim * f};
    ws.logits = {ops_, ur * c.vocab_size * f};
    ws.capacity_rows = static_cast<int32_t>(ur);
  }
}

const float* LlamaModel::forward_eager(std::span<const int32_t> tokens,
                                       const kernels::StepBatch& host_batch,
                                       std::span<const int32_t> logit_rows, KvStorage& kv) const {
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int32_t n_out = static_cast<int32_t>(logit_rows.size());
  // Grow the workspace (backend memory) to this step's size.
  Workspace& ws = *ws_;
  if (n > ws.capacity_meta) {
    const size_t un = static_cast<size_t>(std::max(n, 2 * ws.capacity_meta));
    ws.tokens = {ops_, un * 4};
    ws.positions = {ops_, un * 4};
    ws.seq_of_token = {ops_, un * 4};
    ws.slots = {ops_, un * 4};
    ws.rows = {ops_, un * 4};
    ws.capacity_meta = static_cast<int32_t>(un);
  }
  grow_activations(ws, n, n_out);
  const int32_t n_table = host_batch.n_seqs * host_batch.max_blocks;
  if (n_table > ws.capacity_seq_entries) {
    ws.block_tables = {ops_,
                       static_cast<size_t>(std::max(n_table, 2 * ws.capacity_seq_entries)) * 4};
    ws.capacity_seq_entries = std::max(n_table, 2 * ws.capacity_seq_entries);
  }
  // Step metadata into backend memory.
  ops_.upload(ws.tokens.data(), tokens.data(), n * 4u);
  ops_.upload(ws.positions.data(), host_batch.positions, n * 4u);
  ops_.upload(ws.seq_of_token.data(), host_batch.seq_of_token, n * 4u);
  ops_.upload(ws.slots.data(), host_batch.slots, n * 4u);
  ops_.upload(ws.rows.data(), logit_rows.data(), n_out * 4u);
  ops_.upload(ws.block_tables.data(), host_batch.block_tables, n_table * 4u);
  kernels::StepBatch batch = host_batch;
  batch.positions = ws.positions.i32();
  batch.seq_of_token = ws.seq_of_token.i32();
  batch.slots = ws.slots.i32();
  batch.block_tables = ws.block_tables.i32();

  run_layers(ws, ws.tokens.i32(), batch, ws.rows.i32(), n_out, kv);
  return ws.logits.f32();
}

void LlamaModel::run_layers(Workspace& ws, const int32_t* tokens, const kernels::StepBatch& batch,
                            const int32_t* out_rows, int32_t n_out, KvStorage& kv) const {
  const ModelConfig& c = config_;
  const int32_t n = batch.n_tokens;
  const NumericsMode numerics = batch.numerics;
  float* x = ws.x.f32();
  void* xb = ws.xb.data();  // GEMM inputs: the backend's GEMM input dtype
  void* att = ws.att.data();
  void* h = ws.h.data();
  float* qkv = ws.qkv.f32();
  float* q = ws.q.f32();
  float* proj = ws.proj.f32();
  float* gate_up = ws.gate_up.f32();

  ops_.embedding(tok_embd_, tokens, n, x);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int32_t li = 0; li < c.n_layers; ++li) {
    const LayerView& l = layers_[li];
    kernels::KvCacheLayer cache = kv.layer(li);
    if (!kv_scales_.empty()) {  // FP8 KV: this layer's per-head scales (fixed at load)
      cache.k_scale = ops_.host_memory() ? kv_scales_[static_cast<size_t>(li)].data()
                                         : owned_[static_cast<size_t>(li)].f32();
      cache.v_scale = cache.k_scale + c.n_kv_heads;
    }
    // The previous layer's MLP residual joins the attention norm (none before layer 0). Each
    // producer of a GEMM input is told which linear reads it (a backend may quantize it there).
    ops_.announce_gemm_input(xb, l.qkv.parts.front().lin.w);
    ops_.add_rmsnorm(x, li == 0 ? nullptr : proj, l.attn_norm, n, c.dim, c.rms_eps, xb);
    project(xb, n, l.qkv, qkv, numerics);
    if (c.qk_norm_full) {
      // OLMoE: one RMSNorm over each token's whole q (q_dim) and whole k (kv_dim), in place in
      // the fused rows — Ops::rmsnorm on one row at a time (a row's bits are its own).
      const size_t width = static_cast<size_t>(c.q_dim() + 2 * c.kv_dim());
      for (int32_t t = 0; t < n; ++t) {
        float* row = qkv + static_cast<size_t>(t) * width;
        ops_.rmsnorm(row, l.q_norm, 1, c.q_dim(), c.rms_eps, row);
        ops_.rmsnorm(row + c.q_dim(), l.k_norm, 1, c.kv_dim(), c.rms_eps, row + c.q_dim());
      }
    }
    const float* head_q_norm = c.qk_norm_full ? nullptr : l.q_norm;
    const float* head_k_norm = c.qk_norm_full ? nullptr : l.k_norm;
    ops_.qkv_rope_append(qkv, n, c.n_heads, head_q_norm, head_k_norm, c.rms_eps, rope_, batch,
                         cache, q);
    ops_.attention_rounded(q, cache, batch, c.n_heads, scale, att);
    if (tp_.active())
      row_parallel(ws, att, n, c.q_dim(), l.wo_chunks, tp_.chunks.o, proj, numerics);
    else
      ops_.matmul_rounded(att, n, l.wo.w, nullptr, proj, c.dim, numerics);
    if (!moe_) ops_.announce_gemm_input(xb, l.gate_up.parts.front().lin.w);
    ops_.add_rmsnorm(x, proj, l.ffn_norm, n, c.dim, c.rms_eps, xb);
    if (moe_) {
      moe_->forward(xb, n, li, l.moe, proj, numerics);
      continue;
    }
    project(xb, n, l.gate_up, gate_up, numerics);
    if (!tp_.active()) ops_.announce_gemm_input(h, l.w_down.w);
    ops_.silu_mul_rows(gate_up, n, c.ffn_dim, h);
    if (tp_.active())
      row_parallel(ws, h, n, c.ffn_dim, l.down_chunks, tp_.chunks.ffn, proj, numerics);
    else
      ops_.matmul_rounded(h, n, l.w_down.w, nullptr, proj, c.dim, numerics);
  }
  if (c.n_layers > 0) ops_.add(x, proj, int64_t{n} * c.dim);

  // Final norm and lm_head only for the rows whose logits are wanted.
  float* rows = ws.out_rows.f32();
  ops_.gather_rows(x, c.dim, out_rows, n_out, rows);
  ops_.rmsnorm(rows, out_norm_, n_out, c.dim, c.rms_eps, rows);
  ops_.matmul(rows, n_out, lm_head_, nullptr, ws.logits.f32(), numerics);
}

const float* LlamaModel::forward_graph(const PaddedStep& step, KvStorage& kv) const {
  GraphState& g = *graphs_;
  kernels::GraphCapture& capture = *graph_capture();
  // The workspace of every graph: sized once for the largest bucket, never reallocated.
  if (g.ws.capacity == 0) {
    const int32_t max_rows = decode_row_buckets().back();
    grow_activations(g.ws, max_rows, max_rows);
  }
  GraphState::Entry& e = g.entry(step.key, kv, step.numerics);
  const size_t bytes = step.meta.size() * sizeof(int32_t);
  g.stage(step.meta);
  ops_.upload(e.meta.data(), g.staging, bytes);
  const kernels::StepBatch batch = step.batch(e.meta.i32());
  const int32_t* tokens = e.meta.i32();
  const int32_t* rows = e.meta.i32() + 4 * step.key.rows;
  if (e.graph && capture.graph_valid(*e.graph)) {
    capture.replay(*e.graph);
    ++stats_.n_graph_replays;
  } else {
    // First step of this shape (or the backend's scratch moved): run it eagerly — this step's
    // result, and it gives the backend's scratch its size — then record the same ops.
    e.graph.reset();
    run_layers(g.ws, tokens, batch, rows, step.key.rows, kv);
    ops_.synchronize();
    capture.begin_capture();
    try {
      run_layers(g.ws, tokens, batch, rows, step.key.rows, kv);
    } catch (...) {
      capture.abort_capture();
      throw;
    }
    e.graph = capture.end_capture();
    ++stats_.n_graph_captures;
  }
  return g.ws.logits.f32();
}

LlamaModel::PlacedTensor LlamaModel::placed(Param param, int32_t layer) const {
  check(!ops_.host_memory(), "LlamaModel::placed: backend {} computes on the host weights in "
                             "place (write those)", ops_.name());
  const ModelConfig& c = config_;
  auto matrix = [](const kernels::WeightMatrix& w) {
    return PlacedTensor{const_cast<void*>(w.data), w.dtype, w.rows * w.cols};
  };
  auto vector = [](const float* v, int64_t n) {
    return v == nullptr ? PlacedTensor{} : PlacedTensor{const_cast<float*>(v), DType::kF32, n};
  };
  // Part `index` of a projection whose parts have rows[i] output rows: its own matrix when the
  // parts are kept apart, else its rows of the fused matrix (and of the fused bias).
  auto part = [&](const Projection& pr, std::vector<int64_t> rows, size_t index, bool bias) {
    if (pr.parts.size() > 1) {
      const LinearView& l = pr.parts.at(index).lin;
      return bias ? vector(l.bias, rows[index]) : matrix(l.w);
    }
    const LinearView& l = pr.parts.at(0).lin;
    int64_t row0 = 0;
    for (size_t i = 0; i < index; ++i) row0 += rows[i];
    if (bias) return vector(l.bias == nullptr ? nullptr : l.bias + row0, rows[index]);
    const auto* base = static_cast<const char*>(l.w.data);
    return PlacedTensor{const_cast<char*>(base) + row0 * l.w.cols * dtype_size(l.w.dtype),
                        l.w.dtype, rows[index] * l.w.cols};
  };
  switch (param) {
    case Param::kTokEmbd: return matrix(tok_embd_);
    case Param::kOutNorm: return vector(out_norm_, c.dim);
    case Param::kLmHead: return matrix(lm_head_);
    default: break;
  }
  check(layer >= 0 && layer < c.n_layers, "LlamaModel::placed: layer {} of {}", layer, c.n_layers);
  const LayerView& v = layers_.at(static_cast<size_t>(layer));
  check(!tp_.active() || (param != Param::kWo && param != Param::kDown),
        "LlamaModel::placed: a tensor-parallel rank holds o_proj and down_proj as canonical "
        "chunks, not in place (rebuild the ranks from new weights: TpGroup::reload)");
  const int64_t q = int64_t{c.n_heads} * c.head_dim, kv = int64_t{c.n_kv_heads} * c.head_dim;
  switch (param) {
    case Param::kAttnNorm: return vector(v.attn_norm, c.dim);
    case Param::kWq: return part(v.qkv, {q, kv, kv}, 0, false);
    case Param::kWk: return part(v.qkv, {q, kv, kv}, 1, false);
    case Param::kWv: return part(v.qkv, {q, kv, kv}, 2, false);
    case Param::kBq: return part(v.qkv, {q, kv, kv}, 0, true);
    case Param::kBk: return part(v.qkv, {q, kv, kv}, 1, true);
    case Param::kBv: return part(v.qkv, {q, kv, kv}, 2, true);
    case Param::kWo: return matrix(v.wo.w);
    case Param::kQNorm: return vector(v.q_norm, c.q_norm_dim());
    case Param::kKNorm: return vector(v.k_norm, c.k_norm_dim());
    case Param::kFfnNorm: return vector(v.ffn_norm, c.dim);
    case Param::kGate: return part(v.gate_up, {c.ffn_dim, c.ffn_dim}, 0, false);
    case Param::kUp: return part(v.gate_up, {c.ffn_dim, c.ffn_dim}, 1, false);
    case Param::kDown: return matrix(v.w_down.w);
    case Param::kRouter:
    case Param::kExpertGate:
    case Param::kExpertUp:
    case Param::kExpertDown:
    case Param::kSharedGate:
    case Param::kSharedUp:
    case Param::kSharedDown:
    case Param::kSharedExpertGate:
      throw_error("a mixture-of-experts model's weights are written in place on the CPU backend "
                  "only; on backend {} load the new checkpoint instead", ops_.name());
    default: break;
  }
  throw_error("LlamaModel::placed: unknown parameter {}", static_cast<int>(param));
}

}  // namespace detllm
