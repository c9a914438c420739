// The Llama-family forward pass over one batched step (tokens of several sequences at any
// positions), written once against kernels::Ops so every backend runs the same model code.
// Per token: embed → n_layers × (RMSNorm → q,k,v → [q/k norm] → RoPE → KV append → paged
// attention → o_proj → residual → RMSNorm → SwiGLU MLP → residual) → final norm → lm_head.
// A layer is 4 GEMMs, attention and 4 fused ops (kernels/ops.h): [residual +] RMSNorm → qkv
// GEMM → q/k norm + RoPE + KV append → attention → o GEMM → residual + RMSNorm → gate_up GEMM
// → SiLU·mul → down GEMM. GEMM inputs are in the backend's GEMM input dtype (bf16 on CUDA:
// docs/cuda.md "Rounding points"); the residual stream and GEMM outputs are fp32.
// Weights and activations live in the backend's memory (used in place on the CPU).
#pragma once

#include <deque>
#include <initializer_list>
#include <span>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/kv_storage.h"
#include "model/llama_weights.h"
#include "model/moe_ffn.h"
#include "model/step_padding.h"
#include "model/tensor_parallel.h"

namespace detllm {

struct SyntheticLayer;
struct SyntheticLinear;
struct SyntheticTensor;
struct SyntheticWeights;
class TpGroup;

// How q/k/v and gate/up weights are held (same bits either way; tests compare the two):
// kFused concatenates each group's rows at load (one GEMM per group), kSeparate keeps them
// apart, kAuto fuses whenever the weights are copied into backend memory anyway (synthetic
// weights, device backends, a weight dtype other than fp32) and otherwise uses the host
// tensors in place (no second copy of an fp32 model on the CPU).
enum class ProjectionLayout : uint8_t { kAuto, kFused, kSeparate };

class LlamaModel {
 public:
  // The host weights and the ops must outlive the model. On a device backend the weights are
  // uploaded here (converted to the backend's weight dtype).
  // tp: this model is rank tp.rank of a tensor-parallel group (model/tensor_parallel.h): config
  // and weights are the rank's (tp_rank_config, tp_rank_weights) and o/down run as canonical
  // chunks summed in the canonical tree across the group. Default: one device, no chunks.
  // Host backends only (the exchange is in host memory).
  LlamaModel(const ModelConfig& config, const ModelWeights& weights, kernels::Ops& ops,
             ProjectionLayout layout = ProjectionLayout::kAuto, const TpRank& tp = {});
  // Weights generated in the backend's memory from a synthetic recipe (model/synthetic.h)
  // through Ops::fill_uniform: the same bits as uploading make_synthetic_weights(config, seed),
  // with no host copy (Llama-3.1-8B: 16 GB of bf16 made on the GPU in well under a second).
  LlamaModel(const ModelConfig& config, const SyntheticWeights& recipe, kernels::Ops& ops,
             ProjectionLayout layout = ProjectionLayout::kAuto);
  ~LlamaModel();

  const ModelConfig& config() const { return config_; }
  // The layout in use (kAuto resolved at construction).
  ProjectionLayout projection_layout() const { return layout_; }
  // Makes the backend's per-(weight shape, row count) GEMM choices for steps of up to
  // max_rows tokens now rather than on first use (Ops::prepare_matmul; CUDA: the verified
  // cuBLASLt plans), so no request pays for them. Changes no bit. Call before serving.
  void prepare_gemms(int32_t max_rows) const;
  kernels::Ops& ops() const { return ops_; }
  // Where this model's padded decode steps are captured and replayed: the backend's graph
  // capture (Ops::graph_capture()), except on a rank of a tensor-parallel group of several —
  // its exchange is a rendezvous of host threads, which a graph cannot hold, so those steps run
  // eagerly (the same bits, V8). nullptr: no graphs.
  // A mixture-of-experts model runs eagerly too: its routing is read on the host between ops.
  kernels::GraphCapture* graph_capture() const {
    return tp_.exchange != nullptr || moe_ != nullptr ? nullptr : ops_.graph_capture();
  }

  // The logits of one step, left in backend memory: (n_rows, vocab) fp32, row r for entry r of
  // the step's logit_rows. Valid until the next forward of this model.
  struct StepLogits {
    const float* data = nullptr;  // (n_rows, vocab) backend memory
    int32_t n_rows = 0;
    int32_t vocab = 0;
  };

  // Runs one step. tokens (n_tokens, host) are described by batch (host arrays: positions,
  // sequences, KV slots, block tables). For each entry r of logit_rows (indices into tokens),
  // row r of the returned logits holds that token's logits — in backend memory, nothing is
  // downloaded: sample them there (Ops::sample_rows) and bring rows to the host with
  // download_logits only where someone reads them.
  // padding: how a decode step executes (model/step_padding.h): padded to a row bucket (or to
  // one fixed shape: the padded mode) and, on a backend with Ops::graph_capture(), replayed
  // from a graph captured per (padded shape, KV storage) — the same bits as eager (V8). Pad rows
  // write to kv's pad slots; their logits are not part of the result.
  StepLogits forward(std::span<const int32_t> tokens, const kernels::StepBatch& batch,
                     std::span<const int32_t> logit_rows, KvStorage& kv,
                     DecodePadding padding = {}) const;
  // kv.copy_block(src, dst), and the same on every rank of this model's tensor-parallel group.
  void copy_kv_block(KvStorage& kv, int32_t src, int32_t dst) const;
  // Makes this model the leader of `group` (model/tp_group.h): forward and copy_kv_block run
  // on every rank. Called by TpGroup.
  void set_tp_group(TpGroup* group) { tp_group_ = group; }
  // The same step with every logit row downloaded: logits is resized to (logit_rows.size(),
  // vocab) on the host.
  void forward(std::span<const int32_t> tokens, const kernels::StepBatch& batch,
               std::span<const int32_t> logit_rows, KvStorage& kv, std::vector<float>& logits,
               DecodePadding padding = {}) const;
  // dst (n_rows, vocab) on the host = rows [first_row, first_row + n_rows) of `logits` (the
  // last step's). Counted in step_stats().n_logit_rows_downloaded.
  void download_logits(const StepLogits& logits, int32_t first_row, int32_t n_rows,
                       float* dst) const;

  // The experts token row `row` of the last forward was routed to: (n_layers, k) int32, each
  // layer's k ids best first (MoeFfn::routed). Host memory; valid until the next forward. A
  // model without experts has none: an empty span.
  std::span<const int32_t> routed_experts(int32_t row) const {
    return moe_ ? moe_->routed(row) : std::span<const int32_t>{};
  }
  bool has_experts() const { return moe_ != nullptr; }
  // Whether its projections are FP8 rows (model/fp8_weights.h): the startup self-check then
  // checks the backend's FP8 GEMM on their shapes (verify/self_check.h).
  bool fp8_projections() const { return fp8_projections_; }
  // The row type of the FP8 projections (kF8E4M3 per channel, kF8E4M3B128 / kF8E4M3G128 in
  // 128-column blocks; the first in DType order when a model mixes them); kF8E4M3 when none.
  DType fp8_projection_rows() const { return fp8_rows_; }

  // Counters of how steps ran (tests check that padding / graphs were really exercised, and
  // that a step whose logits nobody reads downloads none).
  struct StepStats {
    int64_t n_padded_steps = 0;           // decode steps run padded to a bucket
    int64_t n_graph_captures = 0;         // graphs captured (first step of a bucket, or recapture)
    int64_t n_graph_replays = 0;          // steps run by replaying a graph
    int64_t n_logit_rows_downloaded = 0;  // logit rows copied to the host (download_logits)
  };
  const StepStats& step_stats() const { return stats_; }

  // Where one parameter's values sit in backend memory, for in-place weight updates on a
  // device backend (api/llm_session.cpp): `numel` elements of `dtype` from `data` — a placed
  // tensor, or one part's rows of a fused projection ([q | k | v], [gate | up]). Writing new
  // values there changes the next forward (captured graphs read the same pointers). Empty
  // (data == nullptr) for a parameter this model does not have (a bias, q/k norm). Device
  // backends only: on a host backend the weights may be the caller's tensors in place.
  enum class Param : uint8_t {
    kTokEmbd, kAttnNorm, kWq, kWk, kWv, kBq, kBk, kBv, kWo, kQNorm, kKNorm, kFfnNorm,
    kGate, kUp, kDown, kOutNorm, kLmHead,
    // Mixture of experts (ParameterSlot::expert names the expert of the three kExpert*).
    kRouter, kExpertGate, kExpertUp, kExpertDown, kSharedGate, kSharedUp, kSharedDown,
    kSharedExpertGate
  };
  struct PlacedTensor {
    void* data = nullptr;
    DType dtype = DType::kF32;
    int64_t numel = 0;
  };
  PlacedTensor placed(Param param, int32_t layer = 0) const;

  // FP8 KV (ops.kv_fp8()): whether this model rounds its KV with per-head scales bounded from
  // the weights; and those scales made again from `w` — the weights after an update
  // (LlmSession::update_weights, detllm serve's weight sync), which the model now computes
  // on — written where the forward reads them (in place: CUDA graphs stay valid). The scales
  // stay a function of the weights alone, never of a batch. No-op without FP8 KV.
  bool kv_fp8_scales() const { return !kv_scales_.empty(); }
  void refresh_kv_scales(const ModelWeights& w);

 private:
  friend class TpGroup;
  // forward() of this rank alone (the group's leader runs it beside the other ranks).
  // prepare_gemms of this model alone (prepare_gemms: of every rank of its group).
  void prepare_rank_gemms(int32_t max_rows) const;
  StepLogits forward_rank(std::span<const int32_t> tokens, const kernels::StepBatch& batch,
                          std::span<const int32_t> logit_rows, KvStorage& kv,
                          DecodePadding padding) const;

  struct LinearView {
    kernels::WeightMatrix w;
    const float* bias = nullptr;
  };
  // A projection whose output row is the concatenation of several linear layers' ([q | k | v],
  // [gate | up]): one matrix of their rows, fused at load (one GEMM), or the parts kept apart,
  // each writing its columns. Every output element has the same K order either way (design.md
  // Rule 1: it is fixed by K), so the two layouts give the same bits.
  struct Projection {
    struct Part {
      LinearView lin;
      int64_t col = 0;  // first output column
    };
    std::vector<Part> parts;  // one part when fused
    int64_t cols = 0;         // output features of all parts
  };
  struct LayerView {
    const float* attn_norm;  // (dim)
    Projection qkv;          // [q | k | v] (q_dim + 2 kv_dim, dim)
    LinearView wo;
    Projection gate_up;  // [gate | up] (2 ffn_dim, dim); no parts in a MoE layer
    LinearView w_down;
    MoeLayerView moe;       // the experts of a MoE layer (ModelConfig::moe), else empty
    const float* q_norm;    // (head_dim) or nullptr
    const float* k_norm;    // (head_dim) or nullptr
    const float* ffn_norm;  // (dim)
    // Tensor parallel (tp_.active()): the rank's canonical K chunks of wo and w_down, each
    // (dim, K / local chunks); empty otherwise.
    std::vector<LinearView> wo_chunks, down_chunks;
  };
  // A layer's view from host weights (LayerWeights) or a recipe (SyntheticLayer): `vec` puts
  // a norm vector, `lin` a linear layer and `proj` the linear layers of a projection into
  // backend memory; absent q/k norms stay null.
  template <typename Layer, typename VecFn, typename LinFn, typename ProjFn>
  static LayerView layer_view(const Layer& l, VecFn vec, LinFn lin, ProjFn proj) {
    LayerView v{};
    v.attn_norm = vec(l.attn_norm);
    v.qkv = proj({&l.wq, &l.wk, &l.wv});
    v.wo = lin(l.wo);
    v.q_norm = l.q_norm.empty() ? nullptr : vec(l.q_norm);
    v.k_norm = l.k_norm.empty() ? nullptr : vec(l.k_norm);
    v.ffn_norm = vec(l.ffn_norm);
    if (!l.w_gate.w.empty()) {  // a mixture-of-experts layer has none (its experts: moe)
      v.gate_up = proj({&l.w_gate, &l.w_up});
      v.w_down = lin(l.w_down);
    }
    return v;
  }
  // Runs y (n, p.cols) = x · [parts]ᵀ with the step's GEMM numerics; x in the backend's GEMM
  // input dtype.
  void project(const void* x, int32_t n, const Projection& p, float* y,
               NumericsMode numerics) const;
  // The rank's column chunks of a placed (dim, k) host matrix, kept in chunk_host_.
  std::vector<LinearView> place_col_chunks(const HostTensor& w, int32_t n_chunks);
  // Activations of one step, in backend memory, grown to the largest step seen.
  struct Workspace;
  // Padded decode steps: padded metadata, fixed-size workspace and captured graphs.
  struct GraphState;
  // A row-parallel layer (tensor_parallel.h): y (n, dim) = the canonical tree sum of every
  // chunk's partial x[:, chunk] · chunkᵀ, the group's partials all-gathered in chunk order.
  // x (n, k_local) in the GEMM input dtype; chunks: this rank's, in order; total: the model's.
  void row_parallel(Workspace& ws, const void* x, int32_t n, int64_t k_local,
                    const std::vector<LinearView>& chunks, int32_t total, float* y,
                    NumericsMode numerics) const;

  // Grows ws's activations to n rows and n_out logit rows.
  void grow_activations(Workspace& ws, int32_t n, int32_t n_out) const;
  // Eager step from host metadata (grows ws_, uploads, runs). Returns the logits (backend
  // memory, one row per logit row).
  const float* forward_eager(std::span<const int32_t> tokens, const kernels::StepBatch& host_batch,
                             std::span<const int32_t> logit_rows, KvStorage& kv) const;
  // A padded step on a backend with graphs: replay, or run eagerly then capture. Returns the
  // logits (backend memory; the real rows first, then the pad rows').
  const float* forward_graph(const PaddedStep& step, KvStorage& kv) const;
  // Queues the whole forward on metadata already in backend memory; logits (n_out, vocab)
  // end in ws.logits. Every GEMM runs with batch.numerics. Allocates and synchronizes nothing,
  // so it can be captured.
  void run_layers(Workspace& ws, const int32_t* tokens, const kernels::StepBatch& batch,
                  const int32_t* rows, int32_t n_out, KvStorage& kv) const;

  const float* place(const std::vector<float>& v);
  kernels::WeightMatrix place(const HostTensor& t);
  LinearView place(const Linear& l);
  // The tensors' rows, one after another, as one matrix in backend memory (the backend's dtype).
  kernels::WeightMatrix place_rows(std::span<const HostTensor* const> tensors);
  // The parts' rows as one matrix (and their biases as one vector) in backend memory.
  LinearView place_fused(std::initializer_list<const Linear*> parts);
  Projection place(std::initializer_list<const Linear*> parts);
  const float* generate_vector(const SyntheticTensor& t);           // fp32
  kernels::WeightMatrix generate_matrix(const SyntheticTensor& t);  // the backend's dtype
  LinearView generate(const SyntheticLinear& l);
  LinearView generate_fused(std::initializer_list<const SyntheticLinear*> parts);
  // A MoE layer's router and experts generated in backend memory.
  MoeLayerView generate_moe(const SyntheticLayer& l);
  Projection generate(std::initializer_list<const SyntheticLinear*> parts);

  const ModelConfig config_;
  kernels::Ops& ops_;
  const TpRank tp_;
  TpGroup* tp_group_ = nullptr;        // set on a group's leader (rank 0)
  mutable int32_t tp_turn_ = 0;        // which half of the partials the next exchange uses
  std::deque<HostTensor> chunk_host_;  // tensor parallel: the chunk matrices (host memory)
  const ProjectionLayout layout_;
  kernels::RopeTable rope_;
  std::vector<kernels::Buffer> owned_;  // uploaded or generated weights (backend memory)
  kernels::WeightMatrix tok_embd_;      // (vocab, dim)
  std::vector<LayerView> layers_;       // (n_layers)
  const float* out_norm_ = nullptr;     // (dim)
  kernels::WeightMatrix lm_head_;       // (vocab, dim)
  // FP8 KV (ops.kv_fp8()): per layer, K's scale of each KV head then V's (fp8_kv_scales), in
  // host memory; a device backend reads its copies in owned_[layer]. Empty otherwise.
  std::vector<std::vector<float>> kv_scales_;
  std::unique_ptr<Workspace> ws_;
  bool fp8_projections_ = false;  // fp8_projections()
  DType fp8_rows_ = DType::kF8E4M3;  // fp8_projection_rows()
  std::unique_ptr<MoeFfn> moe_;                 // the experts' scratch: MoE models only
  mutable std::unique_ptr<GraphState> graphs_;  // created by the first padded step
  mutable StepStats stats_;
};

}  // namespace detllm
