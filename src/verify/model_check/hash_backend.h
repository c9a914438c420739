// The bounded checker's abstract backend (docs/contract.md, "What is proved"): a kernels::Ops
// whose numbers are hashes, so that the real LlamaModel, ModelRunner, Scheduler, KvCacheManager
// and Engine run unchanged over values that say exactly which KV each row read.
//
//   value of a row    a 48-bit hash carried in the row's first two floats (24 bits each, exact)
//   embedding         the token id
//   qkv_rope_append   KV[layer][p] = H(layer, input, p, KV[layer][0 .. p-1])   read through the
//                     sequence's block table, so a stale block, a block of another prefix or of
//                     another position gives another value
//   attention         out[p] = H(layer, KV[layer][0 .. p])
//   projections, norms, residual, SiLU·up
//                     carry the row's value (the residual takes the branch's)
//   lm_head           logits[v] = 3 bits of the value per token id (kHashVocab ids): the real
//                     sampler draws from them
//   fast numerics     (NumericsMode::kFast: the verified mode's candidates) every projection
//                     changes one value in three, so candidates differ from the invariant rows
//
// reference_values() computes the same hashes from a token list alone: what every row must
// hold when the engine bound its KV to the logical prefix (contract Rule 4).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"

namespace detllm::model_check {

inline constexpr int32_t kHashVocab = 8;  // token ids 0 … 7
inline constexpr uint64_t kValueMask = (uint64_t{1} << 48) - 1;

// The tiny Llama the abstract backend runs: n_layers layers of one head of dim 2 (the value's
// two floats), vocabulary kHashVocab.
ModelConfig hash_model_config(int32_t n_layers);

// H's steps (splitmix64 finaliser over h + v), values kept to 48 bits.
uint64_t hash_mix(uint64_t h, uint64_t v);
uint64_t kv_value(int32_t layer, uint64_t input, int32_t pos, std::span<const uint64_t> before);
uint64_t attention_value(int32_t layer, std::span<const uint64_t> kv);  // kv: positions 0 … p
// What a projection under `numerics` makes of a value (kFast changes one in three).
uint64_t project_value(uint64_t v, NumericsMode numerics);
// The logits (kHashVocab) of a last-layer value.
void logits_of(uint64_t v, float* logits);

// The values a correct engine computes for tokens[0 … p] at every p: kv[layer][p] and the
// last layer's attention value out[p] (what the lm_head reads), all on invariant numerics.
struct ReferenceValues {
  std::vector<std::vector<uint64_t>> kv;  // (n_layers, n_tokens)
  std::vector<uint64_t> out;              // (n_tokens)
};
ReferenceValues reference_values(std::span<const int32_t> tokens, int32_t n_layers);

// A value's two floats (exact: 24-bit integers) and back.
void store_value(float* row, uint64_t v);
uint64_t load_value(const float* row);

// Tests derive from it to plant backend faults (tests/model_check: each check must fire).
class HashOps : public kernels::Ops {
 public:
  explicit HashOps(int32_t n_layers) : n_layers_(n_layers) {}
  std::string_view name() const override { return "model-check-hash"; }

  // What the last forward did, for the checker: the value under each logit row (the lm_head's
  // input, in logit-row order) and the step's GEMM numerics.
  std::span<const uint64_t> logit_values() const { return logit_values_; }
  NumericsMode last_numerics() const { return last_numerics_; }
  // Each layer's KV pool as the last forward saw it (empty before the first forward since
  // forget_kv: a new engine has new pools).
  std::span<const kernels::KvCacheLayer> kv_layers() const { return kv_layers_; }
  void forget_kv() { kv_layers_.clear(); }

  void embedding(const kernels::WeightMatrix& table, const int32_t* ids, int32_t n,
                 float* out) override;
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override;
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override;
  void add(float* x, const float* y, int64_t n) override;
  void matmul_rounded(const void* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
                      float* y, int64_t ldy, NumericsMode numerics) override;
  void add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim, float eps,
                   void* out) override;
  void qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float* q_norm,
                       const float* k_norm, float eps, const kernels::RopeTable& table,
                       const kernels::StepBatch& batch, const kernels::KvCacheLayer& cache,
                       float* q_out) override;
  void attention_rounded(const float* q, const kernels::KvCacheLayer& cache,
                         const kernels::StepBatch& batch, int32_t n_heads, float scale,
                         void* out) override;
  void silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, void* out) override;

  // Not part of the abstract model (the fused ops above replace them): they throw.
  void rope(float*, int32_t, int32_t, int32_t, const int32_t*, const kernels::RopeTable&) override;
  void kv_append(const float*, const float*, const kernels::StepBatch&,
                 const kernels::KvCacheLayer&) override;
  void attention(const float*, const kernels::KvCacheLayer&, const kernels::StepBatch&, int32_t,
                 float, float*) override;
  void silu_mul(const float*, const float*, int64_t, float*) override;

 protected:
  int32_t n_layers_;
  int32_t layer_ = 0;  // layer of the next qkv_rope_append (counted from the embedding)
  NumericsMode last_numerics_ = NumericsMode::kInvariant;
  std::vector<uint64_t> logit_values_;
  std::vector<kernels::KvCacheLayer> kv_layers_;
};

// The value of position `pos` of sequence row `seq` of a step in a layer's KV pool (read through
// the step's block table): what attention and the next KV of the sequence read.
uint64_t kv_at(const kernels::KvCacheLayer& cache, const kernels::StepBatch& batch, int32_t seq,
               int32_t pos);
// The value in KV slot `slot` of a layer's K pool.
uint64_t kv_slot_value(const kernels::KvCacheLayer& cache, int32_t slot);

}  // namespace detllm::model_check
