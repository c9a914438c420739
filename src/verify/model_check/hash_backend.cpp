// The abstract backend's values (hash_backend.h): hashes instead of numbers.
#include "verify/model_check/hash_backend.h"

#include <cstring>

#include "core/error.h"

namespace detllm::model_check {

ModelConfig hash_model_config(int32_t n_layers) {
  ModelConfig c;
  c.vocab_size = kHashVocab;
  c.dim = 2;
  c.n_layers = n_layers;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.head_dim = 2;
  c.ffn_dim = 2;
  c.max_position = 64;
  c.tied_embeddings = true;
  c.validate("model_check");
  return c;
}

uint64_t hash_mix(uint64_t h, uint64_t v) {
  uint64_t z = h + 0x9e3779b97f4a7c15ull + v * 0xd1b54a32d192ed03ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) & kValueMask;
}

uint64_t kv_value(int32_t layer, uint64_t input, int32_t pos, std::span<const uint64_t> before) {
  uint64_t h = hash_mix(hash_mix(hash_mix(0x6b76, static_cast<uint64_t>(layer)), input),
                        static_cast<uint64_t>(pos));
  for (uint64_t v : before) h = hash_mix(h, v);
  return h;
}

uint64_t attention_value(int32_t layer, std::span<const uint64_t> kv) {
  uint64_t h = hash_mix(0xa77e, static_cast<uint64_t>(layer));
  for (uint64_t v : kv) h = hash_mix(h, v);
  return h;
}

uint64_t project_value(uint64_t v, NumericsMode numerics) {
  return numerics == NumericsMode::kFast && v % 3 == 0 ? hash_mix(v, 0xfa57) : v;
}

void logits_of(uint64_t v, float* logits) {
  for (int32_t t = 0; t < kHashVocab; ++t) logits[t] = static_cast<float>((v >> (3 * t)) & 7);
}

ReferenceValues reference_values(std::span<const int32_t> tokens, int32_t n_layers) {
  const size_t n = tokens.size();
  ReferenceValues r;
  r.kv.assign(static_cast<size_t>(n_layers), std::vector<uint64_t>(n));
  std::vector<uint64_t> input(tokens.begin(), tokens.end());
  std::vector<uint64_t> out(n);
  for (int32_t l = 0; l < n_layers; ++l) {
    std::vector<uint64_t>& kv = r.kv[static_cast<size_t>(l)];
    for (size_t p = 0; p < n; ++p) {
      kv[p] = kv_value(l, input[p], static_cast<int32_t>(p), std::span(kv).first(p));
      out[p] = attention_value(l, std::span(kv).first(p + 1));
    }
    input = out;
  }
  r.out = std::move(out);
  return r;
}

void store_value(float* row, uint64_t v) {
  row[0] = static_cast<float>(v & 0xffffff);
  row[1] = static_cast<float>((v >> 24) & 0xffffff);
}

uint64_t load_value(const float* row) {
  return static_cast<uint64_t>(row[0]) | (static_cast<uint64_t>(row[1]) << 24);
}

uint64_t kv_slot_value(const kernels::KvCacheLayer& cache, int32_t slot) {
  const int64_t row = int64_t{cache.n_kv_heads} * cache.head_dim;
  return load_value(cache.k_f32() + slot * row);
}

uint64_t kv_at(const kernels::KvCacheLayer& cache, const kernels::StepBatch& batch, int32_t seq,
               int32_t pos) {
  const int32_t bs = cache.block_size;
  const int32_t block = batch.block_tables[int64_t{seq} * batch.max_blocks + pos / bs];
  check(block >= 0 && block < cache.n_blocks, "model_check: position {} has no block", pos);
  return kv_slot_value(cache, block * bs + pos % bs);
}

void HashOps::embedding(const kernels::WeightMatrix& table, const int32_t* ids, int32_t n,
                        float* out) {
  layer_ = 0;
  for (int32_t t = 0; t < n; ++t) {
    store_value(out + t * table.cols, static_cast<uint64_t>(ids[t]));
  }
}

void HashOps::rmsnorm(const float* x, const float* /*w*/, int32_t n, int32_t dim, float /*eps*/,
                      float* out) {
  if (out != x) std::memmove(out, x, sizeof(float) * static_cast<size_t>(n) * dim);
}

void HashOps::matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float*,
                     float* y, NumericsMode numerics) {
  last_numerics_ = numerics;
  if (w.rows != kHashVocab) {
    for (int32_t t = 0; t < m; ++t) {
      store_value(y + t * w.rows, project_value(load_value(x + t * w.cols), numerics));
    }
    return;
  }
  // The lm_head: the row's value becomes its logits.
  logit_values_.resize(static_cast<size_t>(m));
  for (int32_t t = 0; t < m; ++t) {
    const uint64_t v = project_value(load_value(x + t * w.cols), numerics);
    logit_values_[static_cast<size_t>(t)] = v;
    logits_of(v, y + t * w.rows);
  }
}

void HashOps::add(float* x, const float* y, int64_t n) {
  std::memmove(x, y, sizeof(float) * static_cast<size_t>(n));
}

void HashOps::matmul_rounded(const void* x, int32_t m, const kernels::WeightMatrix& w, const float*,
                             float* y, int64_t ldy, NumericsMode numerics) {
  last_numerics_ = numerics;
  const float* xf = static_cast<const float*>(x);
  for (int32_t t = 0; t < m; ++t) {
    store_value(y + t * ldy, project_value(load_value(xf + t * w.cols), numerics));
  }
}

void HashOps::add_rmsnorm(float* x, const float* y, const float*, int32_t n, int32_t dim, float,
                          void* out) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(n) * dim;
  if (y != nullptr) std::memmove(x, y, bytes);
  std::memmove(out, x, bytes);
}

void HashOps::qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float*,
                              const float*, float, const kernels::RopeTable&,
                              const kernels::StepBatch& batch, const kernels::KvCacheLayer& cache,
                              float* q_out) {
  const int32_t layer = layer_++;
  if (static_cast<int32_t>(kv_layers_.size()) <= layer) kv_layers_.resize(layer + 1);
  kv_layers_[static_cast<size_t>(layer)] = cache;
  const int64_t in_row = int64_t{n_heads + 2 * cache.n_kv_heads} * cache.head_dim;
  const int64_t kv_row = int64_t{cache.n_kv_heads} * cache.head_dim;
  std::vector<uint64_t> before;
  // Rows in plan order: a sequence's chunk is consecutive and ascending, so each row reads the
  // entries the rows before it wrote.
  for (int32_t t = 0; t < n; ++t) {
    const int32_t pos = batch.positions[t];
    before.clear();
    for (int32_t j = 0; j < pos; ++j)
      before.push_back(kv_at(cache, batch, batch.seq_of_token[t], j));
    const uint64_t v = kv_value(layer, load_value(qkv + t * in_row), pos, before);
    store_value(cache.k_f32() + batch.slots[t] * kv_row, v);
    store_value(cache.v_f32() + batch.slots[t] * kv_row, v);
    store_value(q_out + t * int64_t{n_heads} * cache.head_dim, static_cast<uint64_t>(pos));
  }
}

void HashOps::attention_rounded(const float*, const kernels::KvCacheLayer& cache,
                                const kernels::StepBatch& batch, int32_t n_heads, float,
                                void* out) {
  const int64_t out_row = int64_t{n_heads} * cache.head_dim;
  const int32_t layer = layer_ - 1;
  std::vector<uint64_t> kv;
  for (int32_t t = 0; t < batch.n_tokens; ++t) {
    kv.clear();
    for (int32_t j = 0; j <= batch.positions[t]; ++j) {
      kv.push_back(kv_at(cache, batch, batch.seq_of_token[t], j));
    }
    store_value(static_cast<float*>(out) + t * out_row, attention_value(layer, kv));
  }
}

void HashOps::silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, void* out) {
  for (int32_t t = 0; t < n; ++t) {
    store_value(static_cast<float*>(out) + int64_t{t} * ffn, load_value(gate_up + t * 2 * ffn));
  }
}

void HashOps::rope(float*, int32_t, int32_t, int32_t, const int32_t*, const kernels::RopeTable&) {
  throw Error("model_check: rope is not part of the abstract model");
}
void HashOps::kv_append(const float*, const float*, const kernels::StepBatch&,
                        const kernels::KvCacheLayer&) {
  throw Error("model_check: kv_append is not part of the abstract model");
}
void HashOps::attention(const float*, const kernels::KvCacheLayer&, const kernels::StepBatch&,
                        int32_t, float, float*) {
  throw Error("model_check: attention is not part of the abstract model");
}
void HashOps::silu_mul(const float*, const float*, int64_t, float*) {
  throw Error("model_check: silu_mul is not part of the abstract model");
}

}  // namespace detllm::model_check
