// The fused ops of kernels/ops.h against the op sequences they replace, on one backend, bit for
// bit: add_rmsnorm = add + rmsnorm, matmul_rounded = matmul (whole or one part's columns),
// qkv_rope_append = rmsnorm per head + rope + kv_append on q, k, v laid out apart,
// attention_rounded = attention, silu_mul_rows = silu_mul on the halves. A GEMM input the fused
// op writes must be the sequence's fp32 result rounded to the backend's gemm_input_dtype()
// (bf16 on CUDA, nearest even; fp32 elsewhere). Backend-generic (memory through the Ops
// functions): tests/kernels/fused_ops_test.cpp runs it on ref and cpu, tests/cuda/
// cuda_fused_ops_test.cpp on the GPU.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace detllm::kernels::testing {

// The bytes of fp32 values as a GEMM input of `ops` (bf16 bits, or the floats themselves).
inline std::vector<uint8_t> as_gemm_input(const Ops& ops, const std::vector<float>& v) {
  std::vector<uint8_t> out;
  if (ops.gemm_input_dtype() == DType::kBF16) {
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t b = f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  } else {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
  }
  return out;
}

inline size_t gemm_input_bytes(const Ops& ops) { return dtype_size(ops.gemm_input_dtype()); }

// A GEMM input tensor (n values) in backend memory, downloaded as bytes.
inline std::vector<uint8_t> get_bytes(Ops& ops, const void* p, size_t n_bytes) {
  std::vector<uint8_t> h(n_bytes);
  ops.download(h.data(), p, n_bytes);
  return h;
}

// Index of the first differing GEMM-input element (elements of `elem` bytes), or -1.
inline int64_t first_byte_element_difference(const std::vector<uint8_t>& a,
                                             const std::vector<uint8_t>& b, size_t elem) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i += elem)
    if (std::memcmp(a.data() + i, b.data() + i, elem) != 0) return static_cast<int64_t>(i / elem);
  return -1;
}

// Weights (rows, cols) in the backend's weight dtype, from fp32 values.
struct OpsWeights {
  OpsWeights(Ops& ops, const std::vector<float>& w, int64_t rows, int64_t cols)
      : buf(ops, w.size() * dtype_size(ops.weight_dtype())) {
    const DType dt = ops.weight_dtype();
    if (dt == DType::kBF16) {
      std::vector<uint16_t> h(w.size());
      for (size_t i = 0; i < w.size(); ++i) h[i] = f32_to_bf16(w[i]);
      ops.upload(buf.data(), h.data(), h.size() * 2);
    } else {
      ops.upload(buf.data(), w.data(), w.size() * 4);
    }
    view = {buf.data(), dt, rows, cols};
  }
  Buffer buf;
  WeightMatrix view;
};

inline void check_add_rmsnorm(Ops& ops) {
  for (int dim : {64, 576, 1000, 4096}) {
    for (int n : {1, 5, 33}) {
      for (bool with_y : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "dim " << dim << " n " << n << " y " << with_y);
        const size_t cells = size_t(n) * dim;
        const auto x = random_floats(cells, 11, -3.0f, 3.0f);
        const auto y = random_floats(cells, 12, -2.0f, 2.0f);
        const auto w = random_floats(dim, 13, 0.5f, 1.5f);
        DeviceArray<float> x1(ops, x), x2(ops, x), dy(ops, y), dw(ops, w), want(ops, cells);
        Buffer out(ops, cells * gemm_input_bytes(ops));
        ops.add_rmsnorm(x1.data(), with_y ? dy.data() : nullptr, dw.data(), n, dim, 1e-5f,
                        out.data());
        if (with_y) ops.add(x2.data(), dy.data(), int64_t(cells));
        ops.rmsnorm(x2.data(), dw.data(), n, dim, 1e-5f, want.data());
        const auto got_x = x1.download(), want_x = x2.download();
        EXPECT_BITS_EQ(got_x.data(), want_x.data(), int64_t(cells));  // the residual
        EXPECT_EQ(first_byte_element_difference(get_bytes(ops, out.data(), out.size_bytes()),
                                                as_gemm_input(ops, want.download()),
                                                gemm_input_bytes(ops)),
                  -1);
      }
    }
  }
}

// matmul_rounded on the rounded input = matmul on the fp32 input, for the whole output and
// for one part written into columns [col, col + n_out) of a wider row (the rest untouched).
inline void check_matmul_rounded(Ops& ops) {
  struct Shape {
    int64_t n, k;
  };
  for (Shape s : {Shape{72, 64}, Shape{320, 576}, Shape{136, 1000}}) {
    for (int m : {1, 3, 16, 17, 70}) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "n " << s.n << " k " << s.k << " m " << m << " bias " << with_bias);
        const auto x = random_floats(size_t(m) * s.k, 21);
        const auto w = random_floats(size_t(s.n * s.k), 22, -0.2f, 0.2f);
        const auto bias = random_floats(size_t(s.n), 23);
        OpsWeights dw(ops, w, s.n, s.k);
        DeviceArray<float> dx(ops, x), db(ops, bias), want(ops, size_t(m) * s.n);
        const std::vector<uint8_t> x_in = as_gemm_input(ops, x);
        Buffer dx_in(ops, x_in.size());
        ops.upload(dx_in.data(), x_in.data(), x_in.size());
        const float* b = with_bias ? db.data() : nullptr;
        ops.matmul(dx.data(), m, dw.view, b, want.data());
        const auto expect = want.download();

        DeviceArray<float> whole(ops, size_t(m) * s.n);
        ops.matmul_rounded(dx_in.data(), m, dw.view, b, whole.data(), s.n);
        const auto got = whole.download();
        EXPECT_BITS_EQ(got.data(), expect.data(), int64_t(got.size()));

        const int64_t col = 8, ld = s.n + 24;
        std::vector<float> sentinel(size_t(m) * ld, -7.25f);
        DeviceArray<float> wide(ops, sentinel);
        ops.matmul_rounded(dx_in.data(), m, dw.view, b, wide.data() + col, ld);
        const auto got_wide = wide.download();
        int bad = 0;
        for (int i = 0; i < m; ++i)
          for (int64_t j = 0; j < ld; ++j) {
            const float g = got_wide[size_t(i * ld + j)];
            const bool inside = j >= col && j < col + s.n;
            const float e = inside ? expect[size_t(i * s.n + j - col)] : -7.25f;
            if (std::memcmp(&g, &e, 4) != 0 && ++bad <= 3)
              ADD_FAILURE() << "row " << i << " col " << j << ": " << g << " != " << e;
          }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// One sequence in 8 blocks of 16 (block b physical b): slot = position.
struct FusedStep {
  static constexpr int kBlocks = 8, kBlockSize = 16;
  std::vector<int32_t> positions{0, 3, 17, 100, 127};
  std::vector<int32_t> seq_of_token = std::vector<int32_t>(5, 0);
  std::vector<int32_t> tables{0, 1, 2, 3, 4, 5, 6, 7};
  int n() const { return static_cast<int>(positions.size()); }
};

// A KV cache layer in the backend's KV dtype, every slot filled from fp32 values.
struct OpsCache {
  OpsCache(Ops& ops, int n_kv, int hd, uint32_t seed)
      : n_slots(FusedStep::kBlocks * FusedStep::kBlockSize),
        row(int64_t(n_kv) * hd),
        k(ops, size_t(n_slots * row) * dtype_size(ops.kv_dtype())),
        v(ops, size_t(n_slots * row) * dtype_size(ops.kv_dtype())) {
    layer = {k.data(), v.data(), FusedStep::kBlocks, FusedStep::kBlockSize, n_kv, hd,
             ops.kv_dtype()};
    // Fill through kv_append (the backend's own conversion): slots 0…n_slots-1.
    std::vector<int32_t> all(static_cast<size_t>(n_slots));
    for (int i = 0; i < n_slots; ++i) all[size_t(i)] = i;
    DeviceArray<int32_t> slots(ops, all);
    DeviceArray<float> kk(ops, random_floats(size_t(n_slots * row), seed, -1.5f, 1.5f));
    DeviceArray<float> vv(ops, random_floats(size_t(n_slots * row), seed + 1, -1.5f, 1.5f));
    StepBatch b;
    b.n_tokens = n_slots;
    b.slots = slots.data();
    ops.kv_append(kk.data(), vv.data(), b, layer);
  }
  std::vector<uint8_t> bytes(Ops& ops, bool values) const {
    return get_bytes(ops, values ? v.data() : k.data(), k.size_bytes());
  }
  int64_t n_slots, row;
  Buffer k, v;
  KvCacheLayer layer;
};

inline RopeTable test_rope(int hd) {
  RopeTable t;
  t.rot_dim = hd;
  for (int i = 0; i < hd / 2; ++i)
    t.inv_freq.push_back(static_cast<float>(std::pow(500000.0, -2.0 * i / hd)));
  return t;
}

inline void check_qkv_rope_append(Ops& ops) {
  for (int hd : {32, 64, 128}) {
    for (bool norm : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "head_dim " << hd << " qk_norm " << norm);
      const int n_heads = 8, n_kv = 2;
      FusedStep st;
      const int n = st.n();
      const int64_t q_dim = int64_t(n_heads) * hd, kv_dim = int64_t(n_kv) * hd;
      const int64_t ld = q_dim + 2 * kv_dim;
      const auto qkv = random_floats(size_t(n * ld), 31, -2.0f, 2.0f);
      std::vector<float> q(size_t(n * q_dim)), k(size_t(n * kv_dim)), v(size_t(n * kv_dim));
      for (int t = 0; t < n; ++t) {
        std::memcpy(&q[size_t(t * q_dim)], &qkv[size_t(t * ld)], 4 * size_t(q_dim));
        std::memcpy(&k[size_t(t * kv_dim)], &qkv[size_t(t * ld + q_dim)], 4 * size_t(kv_dim));
        std::memcpy(&v[size_t(t * kv_dim)], &qkv[size_t(t * ld + q_dim + kv_dim)],
                    4 * size_t(kv_dim));
      }
      const auto qn = random_floats(size_t(hd), 32, 0.5f, 1.5f);
      const auto kn = random_floats(size_t(hd), 33, 0.5f, 1.5f);
      const RopeTable rope = test_rope(hd);
      DeviceArray<float> dqkv(ops, qkv), dq(ops, q), dk(ops, k), dv(ops, v), dqn(ops, qn),
          dkn(ops, kn), q_out(ops, q.size());
      DeviceArray<int32_t> pos(ops, st.positions), seqs(ops, st.seq_of_token), tabs(ops, st.tables);
      StepBatch b;
      b.n_tokens = n;
      b.positions = pos.data();
      b.seq_of_token = seqs.data();
      b.slots = pos.data();  // slot = position (block b is physical b)
      b.n_seqs = 1;
      b.max_blocks = FusedStep::kBlocks;
      b.block_tables = tabs.data();
      OpsCache fused(ops, n_kv, hd, 40), apart(ops, n_kv, hd, 40);

      ops.qkv_rope_append(dqkv.data(), n, n_heads, norm ? dqn.data() : nullptr,
                          norm ? dkn.data() : nullptr, 1e-6f, rope, b, fused.layer,
                          q_out.data());
      if (norm) {
        ops.rmsnorm(dq.data(), dqn.data(), n * n_heads, hd, 1e-6f, dq.data());
        ops.rmsnorm(dk.data(), dkn.data(), n * n_kv, hd, 1e-6f, dk.data());
      }
      ops.rope(dq.data(), n, n_heads, hd, b.positions, rope);
      ops.rope(dk.data(), n, n_kv, hd, b.positions, rope);
      ops.kv_append(dk.data(), dv.data(), b, apart.layer);

      const auto got_q = q_out.download(), want_q = dq.download();
      EXPECT_BITS_EQ(got_q.data(), want_q.data(), int64_t(got_q.size()));
      EXPECT_TRUE(fused.bytes(ops, false) == apart.bytes(ops, false)) << "K cache differs";
      EXPECT_TRUE(fused.bytes(ops, true) == apart.bytes(ops, true)) << "V cache differs";

      // attention_rounded = attention, rounded as a GEMM input.
      DeviceArray<float> att(ops, q.size());
      Buffer att_in(ops, q.size() * gemm_input_bytes(ops));
      const float scale = 1.0f / std::sqrt(float(hd));
      ops.attention(q_out.data(), fused.layer, b, n_heads, scale, att.data());
      ops.attention_rounded(q_out.data(), fused.layer, b, n_heads, scale, att_in.data());
      EXPECT_EQ(first_byte_element_difference(get_bytes(ops, att_in.data(), att_in.size_bytes()),
                                              as_gemm_input(ops, att.download()),
                                              gemm_input_bytes(ops)),
                -1)
          << "attention_rounded";
    }
  }
}

inline void check_silu_mul_rows(Ops& ops) {
  for (int ffn : {64, 1000, 1536}) {
    for (int n : {1, 7}) {
      SCOPED_TRACE(::testing::Message() << "ffn " << ffn << " n " << n);
      const auto gu = random_floats(size_t(n) * 2 * ffn, 51, -6.0f, 6.0f);
      std::vector<float> g(size_t(n) * ffn), u(size_t(n) * ffn);
      for (int r = 0; r < n; ++r) {
        std::memcpy(&g[size_t(r) * ffn], &gu[size_t(r) * 2 * ffn], 4 * size_t(ffn));
        std::memcpy(&u[size_t(r) * ffn], &gu[size_t(r) * 2 * ffn + ffn], 4 * size_t(ffn));
      }
      DeviceArray<float> dgu(ops, gu), dg(ops, g), du(ops, u), want(ops, g.size());
      Buffer out(ops, g.size() * gemm_input_bytes(ops));
      ops.silu_mul_rows(dgu.data(), n, ffn, out.data());
      ops.silu_mul(dg.data(), du.data(), int64_t(g.size()), want.data());
      EXPECT_EQ(first_byte_element_difference(get_bytes(ops, out.data(), out.size_bytes()),
                                              as_gemm_input(ops, want.download()),
                                              gemm_input_bytes(ops)),
                -1);
    }
  }
}

}  // namespace detllm::kernels::testing
