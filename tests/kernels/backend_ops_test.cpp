// Every op of kernels/ops.h on every backend built, against the plain reference (kernels/ref),
// in the shape of ggml's test-backend-ops: a table of op cases (op × shape) crossed with a table
// of backends. Each case runs the op on the backend and on the reference with the same inputs
// and compares them — bit for bit where the op is exact on that backend (copies, rope on the
// CPU, sampling, synthetic fills), within the backend's stated tolerance elsewhere (Tolerance
// below: each bound follows from fp32 rounding in another reduction order) — and checks the
// backend's invariance, bit for bit: a row computed alone equals the same row inside a batch
// (matmul, rmsnorm, rope, pointwise), and attention rows do not depend on chunking, batch
// mates, token order or physical pages. Backends of one family with other settings (threads,
// split placement) must give each other's bits.
//
// Backends: ref, cpu (1 and 3 threads) in test_kernels; in test_cuda (DETLLM_BACKEND_OPS_CUDA)
// the CUDA backend — invariant with its split placements, and fast (matmul against the
// reference only; fast claims no invariance) — each case skipping without a GPU.
// Adding an op: one entry in op_cases(). Adding a backend: one entry in backends().
// Run: build/tests/test_kernels --gtest_filter='BackendOps*'
//      build/tests/test_cuda --gtest_filter='cuda*BackendOps*' (H200).
#include <fmt/format.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "conformance/delegating_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/fused_ops_checks.h"
#include "kernels/masked_sampling_checks.h"
#include "kernels/ops.h"
#include "kernels/sampling/logit_penalties.h"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler.h"

#ifdef DETLLM_BACKEND_OPS_CUDA
#include "cuda/require_gpu.h"
#include "kernels/cuda/cuda_ops.h"
#endif

namespace detllm::kernels {
namespace {

using testing::AttnShape;
using testing::Chunk;
using testing::DeviceArray;
using testing::first_bit_difference;
using testing::PagedWorld;
using testing::random_floats;

constexpr double kU = 5.9604645e-8;  // fp32 unit roundoff 2^-24

// ---- backends ---------------------------------------------------------------------------

// How far a backend may be from the reference where it is not exact.
struct Tolerance {
  // matmul: |got - ref| <= factor (K + slack) u (Σ_k |x_k w_k| + |bias|): two fp32 sums of the
  // same products in other orders (each within (K + c) u Σ|x w| of the exact value).
  double matmul_factor = 2.0;
  int matmul_slack = 8;
  // rmsnorm: |got - ref| <= factor (dim + slack) u |ref| (sum of squares reordered).
  double rmsnorm_factor = 1.0;
  int rmsnorm_slack = 8;
  // rope: |got - ref| <= rel (|a| + |b|) of the pair; 0 = exact (same libm calls, same order).
  double rope_rel = 0.0;
  // attention: |got - ref| <= abs + per_pos (pos + 1 + head_dim) u (outputs are convex
  // combinations of v in [-1, 1]; scores, exp and sums reordered: online softmax over tiles).
  double attention_abs = 2e-5;
  double attention_per_pos = 0.0;
};

struct Backend {
  std::string name;
  std::function<std::unique_ptr<Ops>()> make;
  // Activations are rounded to this dtype before the GEMM (the reference runs on the rounded
  // values): fp32 on the CPU, bf16 on CUDA's tensor cores.
  DType gemm_input = DType::kF32;
  std::vector<DType> weight_dtypes;  // weight dtypes its matmul and embedding take
  Tolerance tol;
  bool invariant = true;  // claims batch invariance (ops.h's contract); fast does not
  bool gpu = false;       // skips without a GPU
  bool long_attention = false;  // also runs the long attention cases (many KV splits)
  // The same family with other settings (threads, split placement): must give these bits.
  std::function<std::unique_ptr<Ops>()> sibling;
};

std::vector<Backend> backends() {
  std::vector<Backend> b;
#ifndef DETLLM_BACKEND_OPS_CUDA
  const std::vector<DType> host_weights = {DType::kF32, DType::kBF16, DType::kF16};
  b.push_back({"ref", [] { return make_ref_ops(); }, DType::kF32, host_weights, {}, true, false,
               false, nullptr});
  for (int threads : {1, 3}) {
    b.push_back({fmt::format("cpu{}", threads), [threads] { return make_cpu_ops(threads); },
                 DType::kF32, host_weights, {}, true, false, false,
                 [threads] { return make_cpu_ops(threads == 1 ? 4 : 2); }});
  }
#else
  // fp32 KV: the CUDA-core attention kernel (attention.cu), compared with the reference; the
  // bf16-KV tensor-core kernel (the default) has its own test (cuda_attention_tc_test.cpp).
  Tolerance gpu_tol;
  gpu_tol.matmul_factor = 4.0;  // room for the MMA's internal truncation
  gpu_tol.matmul_slack = 64;
  gpu_tol.rmsnorm_factor = 2.0;
  gpu_tol.rmsnorm_slack = 4;
  gpu_tol.rope_rel = 1e-6;  // sincosf vs libm: a few ulp per cos/sin
  gpu_tol.attention_abs = 0.0;
  gpu_tol.attention_per_pos = 4.0;
  auto cuda = [](NumericsMode mode, int split_blocks) {
    return [mode, split_blocks] {
      CudaOptions o;
      o.mode = mode;
      o.attention_split_blocks = split_blocks;
      o.kv_dtype = DType::kF32;
      return make_cuda_ops(o);
    };
  };
  const std::vector<DType> gpu_weights = {DType::kBF16};
  // Split placement: -1 chosen by grid size, 0 all splits in the row's CTA, 1 a CTA per split.
  for (int split : {-1, 0, 1}) {
    b.push_back({split < 0 ? std::string("cuda") : fmt::format("cuda_split{}", split),
                 cuda(NumericsMode::kInvariant, split), DType::kBF16, gpu_weights, gpu_tol, true,
                 true, true, cuda(NumericsMode::kInvariant, split < 0 ? 0 : -1)});
  }
  b.push_back({"cuda_fast", cuda(NumericsMode::kFast, -1), DType::kBF16, gpu_weights, gpu_tol,
               false, true, true, nullptr});
#endif
  return b;
}

// ---- helpers ----------------------------------------------------------------------------

uint16_t f32_to_f16(float f) {  // round to nearest even, normal range (test data is in [-1, 1])
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (a < 6.1035156e-05f) {  // subnormal half: multiples of 2^-24, rint is round-to-even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t ua;
  std::memcpy(&ua, &a, 4);
  const uint32_t exp = ((ua >> 23) & 0xff) - 127 + 15;
  uint32_t mant = ua & 0x7fffff;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// A weight matrix (n, k) in dtype on the host, and its values as fp32 (the exact widening).
struct HostWeights {
  std::vector<float> f32;       // (n, k) values the weights hold
  std::vector<uint16_t> half;   // (n, k) the bf16/f16 encoding
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  WeightMatrix host() const {
    return {dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : half.data(), dtype,
            rows, cols};
  }
  size_t bytes() const { return f32.size() * dtype_size(dtype); }
};

HostWeights make_weights(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  HostWeights w;
  w.dtype = dtype;
  w.rows = rows;
  w.cols = cols;
  w.f32 = random_floats(static_cast<size_t>(rows * cols), seed);
  if (dtype != DType::kF32) {
    w.half.resize(w.f32.size());
    for (size_t i = 0; i < w.f32.size(); ++i) {
      w.half[i] = dtype == DType::kBF16 ? f32_to_bf16(w.f32[i]) : f32_to_f16(w.f32[i]);
      w.f32[i] = dtype == DType::kBF16 ? bf16_to_f32(w.half[i]) : f16_to_f32(w.half[i]);
    }
  }
  return w;
}

// The weights in the backend's memory.
struct BackendWeights {
  BackendWeights(Ops& ops, const HostWeights& w) : buf(ops, w.bytes()), w(w.host()) {
    ops.upload(buf.data(), this->w.data, w.bytes());
    this->w.data = buf.data();
  }
  Buffer buf;
  WeightMatrix w;
};

std::vector<float> rounded_to(DType dtype, const std::vector<float>& x) {
  return dtype == DType::kBF16 ? testing::round_bf16(x) : x;
}

// Counts elements outside |got - want| <= tol(i); reports the first three.
template <typename Tol>
void expect_within(const std::vector<float>& got, const std::vector<float>& want, Tol tol,
                   const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double t = tol(i);
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= t) && ++bad <= 3) {
      ADD_FAILURE() << what << "[" << i << "] got " << got[i] << " ref " << want[i] << " tol " << t;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements outside the tolerance";
}

void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const int64_t d = first_bit_difference(got.data(), want.data(), static_cast<int64_t>(got.size()));
  EXPECT_EQ(d, -1) << what << ": first differing element " << d << ": "
                   << (d >= 0 ? got[d] : 0.0f) << " vs " << (d >= 0 ? want[d] : 0.0f);
}

std::vector<float> slice(const std::vector<float>& v, int64_t row, int64_t width) {
  return {v.begin() + row * width, v.begin() + (row + 1) * width};
}

// ---- op cases ---------------------------------------------------------------------------

struct MatmulCase {
  int m, n, k;
  DType dtype;
  bool bias;
};

// y (m, n) = x (m, k) · wᵀ (+ bias) on `ops`, every buffer in its memory.
std::vector<float> matmul_on(Ops& ops, const HostWeights& hw, const std::vector<float>& x, int m,
                             const float* bias) {
  const BackendWeights w(ops, hw);
  DeviceArray<float> dx(ops, x), dy(ops, static_cast<size_t>(m) * hw.rows);
  std::unique_ptr<DeviceArray<float>> db;
  if (bias != nullptr) {
    db = std::make_unique<DeviceArray<float>>(ops, std::vector<float>(bias, bias + hw.rows));
  }
  ops.matmul(dx.data(), m, w.w, db ? db->data() : nullptr, dy.data());
  return dy.download();
}

// y = x · wᵀ (+ bias) against the reference on the backend's GEMM input; rows {0, m/2, m-1}
// computed alone give the same bits as in the batch; the sibling gives the same bits.
void check_matmul(const Backend& b, Ops& ops, Ops& ref, const MatmulCase& c) {
  const auto x = random_floats(static_cast<size_t>(c.m) * c.k, 1 + c.m);
  const HostWeights hw = make_weights(c.dtype, c.n, c.k, 2 + c.n);
  const auto bias_values = random_floats(c.n, 3);
  const float* bias = c.bias ? bias_values.data() : nullptr;
  const auto xr = rounded_to(b.gemm_input, x);
  std::vector<float> want(static_cast<size_t>(c.m) * c.n);
  ref.matmul(xr.data(), c.m, hw.host(), bias, want.data());
  const std::vector<float> got = matmul_on(ops, hw, x, c.m, bias);
  expect_within(got, want, [&](size_t e) {
    const size_t i = e / c.n, j = e % c.n;
    double abs_sum = bias != nullptr ? std::fabs(bias[j]) : 0.0;
    for (int kk = 0; kk < c.k; ++kk)
      abs_sum += std::fabs(static_cast<double>(xr[i * c.k + kk]) * hw.f32[j * c.k + kk]);
    return b.tol.matmul_factor * (c.k + b.tol.matmul_slack) * kU * abs_sum + 1e-30;
  }, "matmul");
  if (!b.invariant) return;
  for (int row : {0, c.m / 2, c.m - 1}) {
    SCOPED_TRACE(::testing::Message() << "row " << row << " alone");
    expect_bits(matmul_on(ops, hw, slice(x, row, c.k), 1, bias), slice(got, row, c.n),
                "matmul row alone vs in batch");
  }
  if (b.sibling) {
    auto sib = b.sibling();
    expect_bits(matmul_on(*sib, hw, x, c.m, bias), got, "matmul on the sibling backend");
  }
}

struct RmsnormCase {
  int n, dim;
};

// Within the tolerance of the reference; in place (out aliases x) and rows alone give the same
// bits; so does the sibling.
void check_rmsnorm(const Backend& b, Ops& ops, Ops& ref, const RmsnormCase& c) {
  const auto x = random_floats(static_cast<size_t>(c.n) * c.dim, 6, -3.0f, 3.0f);
  const auto w = random_floats(c.dim, 7, 0.5f, 1.5f);
  std::vector<float> want(x.size());
  ref.rmsnorm(x.data(), w.data(), c.n, c.dim, 1e-5f, want.data());
  DeviceArray<float> dx(ops, x), dw(ops, w), dout(ops, x.size());
  ops.rmsnorm(dx.data(), dw.data(), c.n, c.dim, 1e-5f, dout.data());
  const std::vector<float> got = dout.download();
  expect_within(got, want, [&](size_t i) {
    return b.tol.rmsnorm_factor * (c.dim + b.tol.rmsnorm_slack) * kU * std::fabs(want[i]) + 1e-30;
  }, "rmsnorm");
  ops.rmsnorm(dx.data(), dw.data(), c.n, c.dim, 1e-5f, dx.data());
  expect_bits(dx.download(), got, "rmsnorm in place");
  if (!b.invariant) return;
  for (int row : {0, c.n / 2, c.n - 1}) {
    DeviceArray<float> one(ops, slice(x, row, c.dim)), o1(ops, c.dim);
    ops.rmsnorm(one.data(), dw.data(), 1, c.dim, 1e-5f, o1.data());
    expect_bits(o1.download(), slice(got, row, c.dim), "rmsnorm row alone vs in batch");
  }
  if (b.sibling) {
    auto sib = b.sibling();
    DeviceArray<float> sx(*sib, x), sw(*sib, w), so(*sib, x.size());
    sib->rmsnorm(sx.data(), sw.data(), c.n, c.dim, 1e-5f, so.data());
    expect_bits(so.download(), got, "rmsnorm on the sibling backend");
  }
}

struct RopeCase {
  int heads, head_dim, rot_dim;
  float theta;
};

// Exact on the CPU (the reference's mul/sub sequence, same libm calls), within rope_rel on
// CUDA; a token alone gives the bits it has inside the batch.
void check_rope(const Backend& b, Ops& ops, Ops& ref, const RopeCase& c) {
  RopeTable table;
  table.rot_dim = c.rot_dim;
  for (int i = 0; i < c.rot_dim / 2; ++i)
    table.inv_freq.push_back(std::pow(c.theta, -2.0f * i / static_cast<float>(c.rot_dim)));
  const std::vector<int32_t> pos = {0, 1, 2, 31, 32, 100, 1000, 4095, 70000, 131071};
  const int n = static_cast<int>(pos.size());
  const int64_t row = static_cast<int64_t>(c.heads) * c.head_dim;
  const auto x = random_floats(static_cast<size_t>(n * row), 8);
  std::vector<float> want = x;
  ref.rope(want.data(), n, c.heads, c.head_dim, pos.data(), table);
  DeviceArray<float> dx(ops, x);
  DeviceArray<int32_t> dp(ops, pos);
  ops.rope(dx.data(), n, c.heads, c.head_dim, dp.data(), table);
  const std::vector<float> got = dx.download();
  if (b.tol.rope_rel == 0.0) {
    expect_bits(got, want, "rope");
  } else {
    const int half = c.rot_dim / 2;
    expect_within(got, want, [&](size_t e) {
      const int d = static_cast<int>(e % c.head_dim);
      if (d >= c.rot_dim) return 0.0;  // not rotated: copied
      const size_t base = e - d;
      const int pair = d < half ? d : d - half;
      return b.tol.rope_rel * (std::fabs(x[base + pair]) + std::fabs(x[base + pair + half])) +
             1e-30;
    }, "rope");
  }
  if (!b.invariant) return;
  for (int t : {0, n / 2, n - 1}) {
    DeviceArray<float> one(ops, slice(x, t, row));
    DeviceArray<int32_t> p1(ops, std::vector<int32_t>{pos[t]});
    ops.rope(one.data(), 1, c.heads, c.head_dim, p1.data(), table);
    expect_bits(one.download(), slice(got, t, row), "rope token alone vs in batch");
  }
}

// silu_mul within 8 u of the reference (exp within a few ulp of libm's), the same bits for an
// element wherever it sits in the call (shifted sub-ranges: other vector lanes, the tail);
// add and gather_rows exact.
void check_pointwise(const Backend& b, Ops& ops, Ops& ref, int64_t n) {
  const auto g = random_floats(n, 9, -20.0f, 20.0f), u = random_floats(n, 10);
  std::vector<float> want(n);
  ref.silu_mul(g.data(), u.data(), n, want.data());
  DeviceArray<float> dg(ops, g), du(ops, u), dout(ops, n);
  ops.silu_mul(dg.data(), du.data(), n, dout.data());
  const std::vector<float> got = dout.download();
  expect_within(got, want, [&](size_t i) { return 8 * kU * std::fabs(want[i]) + 1e-35; },
                "silu_mul");
  if (b.invariant) {
    for (int64_t offset : {1, 3, 7, 13}) {
      const int64_t len = std::min<int64_t>(1000 + offset, n - offset);
      DeviceArray<float> sg(ops, std::vector<float>(g.begin() + offset, g.begin() + offset + len));
      DeviceArray<float> su(ops, std::vector<float>(u.begin() + offset, u.begin() + offset + len));
      DeviceArray<float> so(ops, len);
      ops.silu_mul(sg.data(), su.data(), len, so.data());
      expect_bits(so.download(), std::vector<float>(got.begin() + offset, got.begin() + offset + len),
                  "silu_mul shifted sub-range");
    }
  }
  std::vector<float> sum = g;
  ref.add(sum.data(), u.data(), n);
  ops.add(dg.data(), du.data(), n);
  expect_bits(dg.download(), sum, "add");

  const int dim = 33;
  const std::vector<int32_t> rows = {4, 0, static_cast<int32_t>(n / dim - 1), 4};
  std::vector<float> gathered(rows.size() * dim);
  ref.gather_rows(sum.data(), dim, rows.data(), static_cast<int32_t>(rows.size()), gathered.data());
  DeviceArray<int32_t> dr(ops, rows);
  DeviceArray<float> dgat(ops, gathered.size());
  ops.gather_rows(dg.data(), dim, dr.data(), static_cast<int32_t>(rows.size()), dgat.data());
  expect_bits(dgat.download(), gathered, "gather_rows");
}

struct EmbeddingCase {
  int vocab, dim;
  DType dtype;
};

// A copy (widening): exact. Host backends refuse an id outside the vocabulary.
void check_embedding(const Backend& /*b*/, Ops& ops, Ops& ref, const EmbeddingCase& c) {
  const HostWeights table = make_weights(c.dtype, c.vocab, c.dim, 11);
  const std::vector<int32_t> ids = {3, 0, c.vocab - 1, 3, 17 % c.vocab, c.vocab / 2};
  const int n = static_cast<int>(ids.size());
  std::vector<float> want(static_cast<size_t>(n) * c.dim);
  ref.embedding(table.host(), ids.data(), n, want.data());
  const BackendWeights dt(ops, table);
  DeviceArray<int32_t> di(ops, ids);
  DeviceArray<float> dout(ops, want.size());
  ops.embedding(dt.w, di.data(), n, dout.data());
  expect_bits(dout.download(), want, "embedding");
  if (ops.host_memory()) {
    const int32_t bad = c.vocab;
    std::vector<float> out(c.dim);
    EXPECT_THROW(ops.embedding(table.host(), &bad, 1, out.data()), Error);
  }
}

struct AttentionCase {
  AttnShape shape;
  int len;                  // the sequence under test
  std::vector<int> chunks;  // chunk sizes whose schedules must give the whole prefill's bits
  bool long_case = false;   // GPU backends only (many KV splits)
};

int64_t first_row_difference(const PagedWorld& a, int seq_a, const PagedWorld& b, int seq_b,
                             int len) {
  for (int p = 0; p < len; ++p) {
    if (first_bit_difference(a.output(seq_a, p).data(), b.output(seq_b, p).data(),
                             a.row_floats()) != -1) {
      return p;
    }
  }
  return -1;
}

// kv_append exact and attention within the tolerance of the reference (a prefill of two
// sequences, then decode steps); then invariance: the sequence's rows from one whole prefill
// equal those of shuffled pages, of every chunking, of mixed batches in shuffled token order,
// of a re-scoring into fresh blocks after a decode (V4/V6), and of the sibling backend.
void check_attention(const Backend& b, Ops& ops, Ops& ref, const AttentionCase& c) {
  const AttnShape& shape = c.shape;
  {
    SCOPED_TRACE("against the reference");
    const int ref_len = c.long_case ? c.len : 100;  // prefill ref_len - 10, then decode 10
    const int prefill = ref_len - 10;
    const std::vector<int> lens = {ref_len, 33};
    PagedWorld want(ref, shape, {1, 2}, lens, 5), got(ops, shape, {1, 2}, lens, 5);
    for (PagedWorld* w : {&want, &got}) {
      w->step({{0, 0, prefill}, {1, 0, 33}});
      for (int p = prefill; p < ref_len; ++p) w->step({{0, p, 1}});
    }
    // The caches: a copy of the same values (fp32 KV).
    const KvCacheLayer wc = want.cache(), gc = got.cache();
    const size_t floats = static_cast<size_t>(wc.n_blocks) * wc.block_size * wc.n_kv_heads *
                          wc.head_dim;
    ASSERT_EQ(gc.dtype, DType::kF32) << "the test compares fp32 KV caches";
    std::vector<float> gk(floats), gv(floats);
    ops.download(gk.data(), gc.k, floats * 4);
    ops.download(gv.data(), gc.v, floats * 4);
    expect_bits(gk, std::vector<float>(wc.k_f32(), wc.k_f32() + floats), "kv_append K");
    expect_bits(gv, std::vector<float>(wc.v_f32(), wc.v_f32() + floats), "kv_append V");
    for (int s = 0; s < 2; ++s) {
      for (int p = 0; p < lens[s]; ++p) {
        SCOPED_TRACE(::testing::Message() << "seq " << s << " position " << p);
        const double tol =
            b.tol.attention_abs + b.tol.attention_per_pos * (p + 1 + shape.head_dim) * kU;
        expect_within(got.output(s, p), want.output(s, p), [&](size_t) { return tol; },
                      "attention");
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  if (!b.invariant) return;
  const int len = c.len;
  PagedWorld base(ops, shape, {42}, {len}, /*block_seed=*/0);
  base.step({{0, 0, len}});
  {
    SCOPED_TRACE("whole prefill, shuffled blocks");
    PagedWorld w(ops, shape, {42}, {len}, 11);
    w.step({{0, 0, len}});
    EXPECT_EQ(first_row_difference(base, 0, w, 0, len), -1);
  }
  for (int chunk : c.chunks) {
    SCOPED_TRACE(::testing::Message() << "chunks of " << chunk);
    PagedWorld w(ops, shape, {42}, {len}, 100 + chunk);
    for (int start = 0; start < len; start += chunk)
      w.step({{0, start, std::min(chunk, len - start)}});
    EXPECT_EQ(first_row_difference(base, 0, w, 0, len), -1);
  }
  {
    // The sequence under test (seq 1) shares steps with others of other lengths, prefill
    // chunks mixed with decode tokens, tokens in shuffled order, shuffled blocks.
    SCOPED_TRACE("mixed batches");
    const std::vector<int> lens = {50, len, 9, len + 53};
    const int chunk_of[4] = {13, len > 200 ? 37 : 5, 1, 40};  // tokens per step for each
    PagedWorld w(ops, shape, {7, 42, 8, 9}, lens, 1234);
    std::mt19937 rng(99);
    int done[4] = {0, 0, 0, 0};
    while (done[0] < lens[0] || done[1] < lens[1] || done[2] < lens[2] || done[3] < lens[3]) {
      std::vector<Chunk> step;
      for (int s = 0; s < 4; ++s) {
        const int count = std::min(chunk_of[s], lens[s] - done[s]);
        if (count > 0) step.push_back({s, done[s], count});
        done[s] += count;
      }
      int n_tok = 0;
      for (const Chunk& ch : step) n_tok += ch.count;
      std::vector<int> order(n_tok);
      for (int i = 0; i < n_tok; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      w.step(step, order);
    }
    EXPECT_EQ(first_row_difference(base, 0, w, 1, len), -1);
  }
  {
    SCOPED_TRACE("re-scoring into fresh blocks equals the decode");
    PagedWorld decode(ops, shape, {5}, {len}, 3);
    for (int p = 0; p < len; ++p) decode.step({{0, p, 1}});
    PagedWorld rescore(ops, shape, {6, 5}, {20, len}, 4);
    rescore.step({{0, 0, 20}});
    rescore.step({{1, 0, len}});
    EXPECT_EQ(first_row_difference(decode, 0, rescore, 1, len), -1);
  }
  {
    // A window of drafts verified as decode rows (ScheduledSeq::decode_rows): the window's
    // tokens each on a table row of its own, K/V appended in the same step, beside another
    // sequence's decode row; windows of 1, 3, 5, … tokens.
    SCOPED_TRACE("windows as decode rows equal the prefill");
    PagedWorld w(ops, shape, {42, 9}, {len, len}, 77);
    const int from = len > 12 ? len - 12 : 1;
    w.step({{0, 0, from}, {1, 0, from}});
    int p0 = from, p1 = from;
    for (int k = 1; p0 < len; k += 2) {
      std::vector<Chunk> step{{0, p0, std::min(k, len - p0)}};
      if (p1 < len) step.push_back({1, p1++, 1});
      p0 += step[0].count;
      w.step_rows(step);
    }
    EXPECT_EQ(first_row_difference(base, 0, w, 0, len), -1);
  }
  if (b.sibling) {
    SCOPED_TRACE("sibling backend");
    auto sib = b.sibling();
    PagedWorld w(*sib, shape, {42}, {len}, 0);
    w.step({{0, 0, len}});
    EXPECT_EQ(first_row_difference(base, 0, w, 0, len), -1);
  }
}

// Ops::sample_rows: bit-identical to detllm::sample() on every backend (token, logprob, top
// logprobs), for greedy, temperature, top-k, top-p and min-p rows in one call.
void check_sample_rows(const Backend& /*b*/, Ops& ops, Ops& /*ref*/, int vocab) {
  const int rows = 6;
  const auto logits = random_floats(static_cast<size_t>(rows) * vocab, 12, -8.0f, 8.0f);
  std::vector<SampleRowParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    SampleRowParams& p = params[r];
    p.temperature = r == 0 ? 0.0f : 0.5f + 0.25f * r;
    p.top_k = r == 2 ? 40 : 0;
    p.top_p = r == 3 ? 0.9f : 1.0f;
    p.min_p = r == 4 ? 0.05f : 0.0f;
    p.seed = 1000 + r;
    p.position = 17 + r;
    p.sample_index = r % 2;
    p.n_logprobs = r == 5 ? SamplingParams::kMaxLogprobs : 3;
  }
  DeviceArray<float> dl(ops, logits);
  std::vector<SampleRowResult> out(rows);
  ops.sample_rows(dl.data(), rows, vocab, params.data(), out.data());
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    const SampleResult want =
        sample(std::span<const float>(logits).subspan(static_cast<size_t>(r) * vocab, vocab),
               params[r], params[r].position, params[r].sample_index);
    const SampleResult got = sample_result_of(out[r]);
    EXPECT_EQ(got.token, want.token);
    EXPECT_EQ(std::memcmp(&got.logprob, &want.logprob, 4), 0) << got.logprob << " vs "
                                                              << want.logprob;
    EXPECT_EQ(got.top_logprobs, want.top_logprobs);
  }
}

// Ops::apply_logit_penalties: the host formula's bits on every backend (rows with random
// histories and penalties, masked and signed-zero logits among them).
void check_logit_penalties_op(const Backend& /*b*/, Ops& ops, Ops& /*ref*/, int vocab) {
  const int rows = 5;
  auto logits = random_floats(static_cast<size_t>(rows) * vocab, 13, -30.0f, 30.0f);
  logits[1] = -std::numeric_limits<float>::infinity();
  logits[2] = -0.0f;
  std::mt19937 rng(5);
  std::vector<LogitPenalty> entries;
  std::vector<int64_t> scratch;
  for (int r = 0; r < rows; ++r) {
    SamplingParams p;
    p.presence_penalty = r == 1 ? 0.0f : 0.37f * static_cast<float>(r) - 0.5f;
    p.frequency_penalty = r == 2 ? 0.0f : 1.9f - 0.41f * static_cast<float>(r);
    p.repetition_penalty = r == 3 ? 1.0f : 0.6f + 0.3f * static_cast<float>(r);
    for (int t = r; t < vocab; t += 7 + r)
      p.logit_bias.push_back({t, 0.5f * static_cast<float>(t % 9) - 2.0f});
    std::vector<int32_t> history;
    for (int i = 0; i < 200; ++i)
      history.push_back(static_cast<int32_t>(rng() % std::min(vocab, 60 + 40 * r)));
    build_logit_penalties(p, history, 50 + 10 * r, r, entries, scratch);
  }
  std::vector<float> want = logits;
  apply_logit_penalties_host(want.data(), rows, vocab, entries);
  DeviceArray<float> d(ops, logits);
  ops.apply_logit_penalties(d.data(), rows, vocab, entries.data(),
                            static_cast<int32_t>(entries.size()));
  expect_bits(d.download(), want, "apply_logit_penalties");
}

// Ops::fill_uniform: every backend gives the reference's bits (a model generated in device
// memory equals the host-generated one).
void check_fill_uniform(const Backend& /*b*/, Ops& ops, Ops& ref, DType dtype) {
  const int64_t n = 4099;
  std::vector<uint8_t> want(n * dtype_size(dtype)), got(want.size());
  ref.fill_uniform(want.data(), dtype, n, 77, 0.25f, 0.5f);
  Buffer d(ops, got.size());
  ops.fill_uniform(d.data(), dtype, n, 77, 0.25f, 0.5f);
  ops.download(got.data(), d.data(), got.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
}

struct OpCase {
  std::string name;  // op and shape: part of the test name
  std::function<void(const Backend&, Ops& ops, Ops& ref)> run;
  DType weight_dtype = DType::kF32;  // the weights it needs (kF32: none, or any backend's)
  bool needs_weights = false;
  bool long_case = false;  // GPU backends only
  // Whether the backend takes this shape at all (null: every backend). CUDA refuses, with an
  // error, GEMMs whose in_features are not a multiple of 8 and attention with head_dim not a
  // multiple of 4 (cuda_ops.cpp); those cases do not run there.
  std::function<bool(const Backend&)> runs_on = nullptr;
};

// The table: one entry per (op, shape).
std::vector<OpCase> op_cases() {
  std::vector<OpCase> t;
  for (const DType dt : {DType::kF32, DType::kBF16}) {
    for (const EmbeddingCase c : {EmbeddingCase{50, 20, dt}, EmbeddingCase{300, 72, dt}}) {
      t.push_back({fmt::format("embedding_v{}_d{}_{}", c.vocab, c.dim, dtype_name(dt)),
                   [c](const Backend& b, Ops& o, Ops& r) { check_embedding(b, o, r, c); }, dt,
                   true});
    }
  }
  std::vector<RmsnormCase> norms = {{300, 61}};
  for (const int dim : {1, 13, 16, 64, 576, 1000, 4096})
    for (const int n : {1, 7, 40}) norms.push_back({n, dim});
  for (const RmsnormCase c : norms) {
    t.push_back({fmt::format("rmsnorm_n{}_d{}", c.n, c.dim),
                 [c](const Backend& b, Ops& o, Ops& r) { check_rmsnorm(b, o, r, c); }});
  }
  std::vector<MatmulCase> mm;
  for (const DType dt : {DType::kF32, DType::kBF16}) {
    for (const bool bias : {false, true}) {
      for (const MatmulCase c :
           {MatmulCase{1, 576, 576, dt, bias}, {5, 192, 576, dt, bias}, {9, 37, 29, dt, bias},
            {17, 13, 7, dt, bias}, {64, 50, 1536, dt, bias}, {3, 1, 1, dt, bias},
            {17, 100, 64, dt, bias}, {40, 1000, 256, dt, bias}, {3, 37, 520, dt, bias},
            {129, 136, 160, dt, bias}, {129, 25, 3, dt, bias}, {33, 13, 1537, dt, bias}}) {
        mm.push_back(c);
      }
    }
  }
  for (const DType dt : {DType::kBF16, DType::kF16}) {
    mm.push_back({6, 45, 83, dt, false});
    mm.push_back({8, 41, 75, dt, true});
  }
  for (const MatmulCase c : mm) {
    t.push_back({fmt::format("matmul_m{}_n{}_k{}_{}{}", c.m, c.n, c.k, dtype_name(c.dtype),
                             c.bias ? "_bias" : ""),
                 [c](const Backend& b, Ops& o, Ops& r) { check_matmul(b, o, r, c); }, c.dtype,
                 true, false, [k = c.k](const Backend& b) { return !b.gpu || k % 8 == 0; }});
  }
  for (const MatmulCase c : {MatmulCase{300, 520, 1024, DType::kBF16, true},
                             {16, 4096, 4096, DType::kBF16, true},
                             {64, 256, 14336, DType::kBF16, true}}) {
    OpCase oc{fmt::format("matmul_m{}_n{}_k{}_bf16{}", c.m, c.n, c.k, c.bias ? "_bias" : ""),
              [c](const Backend& b, Ops& o, Ops& r) { check_matmul(b, o, r, c); }, c.dtype, true};
    oc.long_case = true;
    t.push_back(oc);
  }
  for (const RopeCase c : {RopeCase{3, 64, 64, 10000.0f}, {3, 64, 32, 10000.0f},
                           {3, 64, 18, 10000.0f}, {9, 64, 64, 100000.0f}, {3, 64, 64, 500000.0f},
                           {3, 64, 32, 500000.0f}}) {
    t.push_back({fmt::format("rope_h{}_d{}_rot{}_theta{}", c.heads, c.head_dim, c.rot_dim,
                             static_cast<int>(c.theta)),
                 [c](const Backend& b, Ops& o, Ops& r) { check_rope(b, o, r, c); }});
  }
  for (const int64_t n : {int64_t{10007}, int64_t{100003}}) {
    t.push_back({fmt::format("pointwise_n{}", n),
                 [n](const Backend& b, Ops& o, Ops& r) { check_pointwise(b, o, r, n); }});
  }
  const std::vector<AttentionCase> attn = {
      // len 77 crosses two 32-position tile edges
      {AttnShape{6, 2, 64, 16}, 77, {1, 7, 32}},  // GQA 3:1, SmolLM2-like
      {AttnShape{4, 4, 36, 5}, 77, {1, 7, 32}},   // head_dim % 8 != 0
      {AttnShape{9, 3, 64, 32}, 77, {1, 7}},
      {AttnShape{2, 1, 8, 64}, 77, {1, 7, 32}},  // block > tile
      {AttnShape{2, 1, 7, 3}, 77, {1, 7}},
      {AttnShape{4, 4, 16, 1}, 77, {1, 7}},    // one position per block
      {AttnShape{4, 2, 16, 4}, 300, {7, 64}},  // tiny-llama; > 2 KV splits of 128
      // nine KV splits of 128, tile edges everywhere
      {AttnShape{32, 8, 128, 16}, 1100, {1, 7, 333}, true},  // Llama-3.1-8B
      {AttnShape{6, 2, 64, 16}, 1100, {1, 7, 333}, true},
      {AttnShape{4, 2, 16, 4}, 1100, {1, 7, 333}, true},
      {AttnShape{2, 1, 36, 5}, 1100, {1, 7, 333}, true},  // odd head_dim and block
      {AttnShape{8, 1, 256, 32}, 700, {7, 333}, true},
  };
  for (const AttentionCase& c : attn) {
    OpCase oc{fmt::format("attention_h{}kv{}d{}bs{}_len{}", c.shape.n_heads, c.shape.n_kv_heads,
                          c.shape.head_dim, c.shape.block_size, c.len),
              [c](const Backend& b, Ops& o, Ops& r) { check_attention(b, o, r, c); }};
    oc.long_case = c.long_case;
    oc.runs_on = [hd = c.shape.head_dim](const Backend& b) { return !b.gpu || hd % 4 == 0; };
    t.push_back(oc);
  }
  for (const int vocab : {50, 1000, 49152}) {
    t.push_back({fmt::format("sample_rows_v{}", vocab),
                 [vocab](const Backend& b, Ops& o, Ops& r) { check_sample_rows(b, o, r, vocab); }});
  }
  for (const int vocab : {50, 1000, 49152}) {
    t.push_back({fmt::format("sample_rows_masked_v{}", vocab),
                 [vocab](const Backend&, Ops& o, Ops&) {
                   testing::check_sample_rows_masked(o, vocab);
                 }});
    t.push_back({fmt::format("score_rows_v{}", vocab), [vocab](const Backend&, Ops& o, Ops&) {
                   testing::check_score_rows(o, vocab);
                 }});
  }
  for (const int vocab : {50, 49152}) {
    t.push_back(
        {fmt::format("logit_penalties_v{}", vocab),
         [vocab](const Backend& b, Ops& o, Ops& r) { check_logit_penalties_op(b, o, r, vocab); }});
  }
  // The model's fused ops against the op sequences they replace on the same backend, bit for
  // bit (kernels/fused_ops_checks.h; the sequences themselves are checked above).
  const std::pair<const char*, void (*)(Ops&)> fused[] = {
      {"fused_add_rmsnorm", testing::check_add_rmsnorm},
      {"fused_matmul_rounded", testing::check_matmul_rounded},
      {"fused_qkv_rope_append", testing::check_qkv_rope_append},
      {"fused_silu_mul_rows", testing::check_silu_mul_rows}};
  for (const auto& [name, check] : fused)
    t.push_back({name, [check](const Backend&, Ops& o, Ops&) { check(o); }});
  for (const DType dt : {DType::kF32, DType::kBF16}) {
    t.push_back({fmt::format("fill_uniform_{}", dtype_name(dt)),
                 [dt](const Backend& b, Ops& o, Ops& r) { check_fill_uniform(b, o, r, dt); }});
  }
  return t;
}

// ---- the test: every (backend, op case) --------------------------------------------------

#ifndef DETLLM_BACKEND_OPS_CUDA
// Negative controls: a CPU backend with one planted fault of one ulp (or one too large an error)
// must make the check of its op fail — the checks above can fail.
class FaultOps final : public conformance::DelegatingOps {
 public:
  explicit FaultOps(std::string fault) : DelegatingOps(1, "fault:" + fault), fault_(fault) {}
  void matmul(const float* x, int32_t m, const WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    inner_->matmul(x, m, w, bias, y, numerics);
    if (fault_ == "matmul-batch" && m > 1) nudge(y, int64_t{m} * w.rows);
    if (fault_ == "matmul-error") {
      for (int64_t i = 0; i < int64_t{m} * w.rows; ++i) y[i] *= 1.001f;
    }
  }
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    inner_->rmsnorm(x, w, n, dim, eps, out);
    if (fault_ == "rmsnorm-batch" && n > 1) nudge(out, int64_t{n} * dim);
  }
  void rope(float* x, int32_t n, int32_t h, int32_t d, const int32_t* pos,
            const RopeTable& t) override {
    inner_->rope(x, n, h, d, pos, t);
    if (fault_ == "rope" && n > 1) nudge(x, int64_t{n} * h * d);
  }
  void silu_mul(const float* g, const float* u, int64_t n, float* out) override {
    inner_->silu_mul(g, u, n, out);
    if (fault_ == "silu-place") nudge(out, 1);  // the first element of every call
  }
  void attention(const float* q, const KvCacheLayer& c, const StepBatch& b, int32_t h, float sc,
                 float* out) override {
    inner_->attention(q, c, b, h, sc, out);
    const int64_t row = int64_t{h} * c.head_dim;
    for (int32_t t = 0; t < b.n_tokens; ++t) {
      const int32_t block = b.block_tables[int64_t{b.seq_of_token[t]} * b.max_blocks +
                                           b.positions[t] / c.block_size];
      if ((fault_ == "attention-qlen" && b.n_tokens > 1) ||
          (fault_ == "attention-layout" && block % 2 == 1)) {
        nudge(out + t * row, row);
      }
    }
  }

 private:
  std::string fault_;
};

int64_t failures_of(const std::function<void()>& f) {
  ::testing::TestPartResultArray results;
  {
    const ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    f();
  }
  return results.size();
}

TEST(BackendOpsNegativeControl, PlantedFaultsFail) {
  const Backend cpu = backends()[1];  // cpu1: its tolerances, no sibling
  ASSERT_EQ(cpu.name, "cpu1");
  Backend faulty = cpu;
  faulty.sibling = nullptr;
  auto ref = make_ref_ops();
  const MatmulCase mm{17, 100, 64, DType::kF32, true};
  const AttentionCase attn{AttnShape{6, 2, 64, 16}, 77, {7}};
  const std::vector<std::pair<std::string, std::function<void(Ops&)>>> faults = {
      {"matmul-batch", [&](Ops& o) { check_matmul(faulty, o, *ref, mm); }},
      {"matmul-error", [&](Ops& o) { check_matmul(faulty, o, *ref, mm); }},
      {"rmsnorm-batch", [&](Ops& o) { check_rmsnorm(faulty, o, *ref, {7, 64}); }},
      {"rope", [&](Ops& o) { check_rope(faulty, o, *ref, {3, 64, 64, 10000.0f}); }},
      {"silu-place", [&](Ops& o) { check_pointwise(faulty, o, *ref, 10007); }},
      {"attention-qlen", [&](Ops& o) { check_attention(faulty, o, *ref, attn); }},
      {"attention-layout", [&](Ops& o) { check_attention(faulty, o, *ref, attn); }},
  };
  for (const auto& [name, check] : faults) {
    FaultOps ops(name);
    EXPECT_GT(failures_of([&] { check(ops); }), 0) << "the planted fault " << name
                                                    << " went unnoticed";
  }
  // The control: the same checks on the unfaulted backend report nothing.
  FaultOps clean("none");
  for (const auto& [name, check] : faults) {
    EXPECT_EQ(failures_of([&] { check(clean); }), 0) << name << " on the clean backend";
  }
}

// Host backends refuse a slot or block outside the cache.
TEST(BackendOpsHost, KvAppendAndAttentionRejectBadMetadata) {
  auto cpu = make_cpu_ops(1);
  std::vector<float> k(2 * 4 * 8, 0.0f), v(k.size(), 0.0f), row(8, 1.0f), out(8);
  const KvCacheLayer cache{k.data(), v.data(), 2, 4, 1, 8};
  const int32_t pos = 0, seq = 0, bad_slot = 8, table_bad[1] = {5};
  const StepBatch bad_slot_batch{1, &pos, &seq, &bad_slot, 1, 1, table_bad};
  EXPECT_THROW(cpu->kv_append(row.data(), row.data(), bad_slot_batch, cache), Error);
  EXPECT_THROW(cpu->attention(row.data(), cache, bad_slot_batch, 1, 1.0f, out.data()), Error);
}
#endif

struct Param {
  const Backend* backend;
  const OpCase* op;
};

const std::vector<Backend>& all_backends() {
  static const std::vector<Backend> b = backends();
  return b;
}
const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> c = op_cases();
  return c;
}

std::vector<Param> params() {
  std::vector<Param> p;
  for (const Backend& b : all_backends()) {
    for (const OpCase& c : all_cases()) {
      if (c.long_case && !b.long_attention) continue;
      if (c.runs_on && !c.runs_on(b)) continue;
      if (c.needs_weights && std::find(b.weight_dtypes.begin(), b.weight_dtypes.end(),
                                       c.weight_dtype) == b.weight_dtypes.end()) {
        continue;
      }
      // The fast backend differs from the others in its GEMM only.
      if (!b.invariant && c.name.rfind("matmul", 0) != 0) continue;
      p.push_back({&b, &c});
    }
  }
  return p;
}

class BackendOps : public ::testing::TestWithParam<Param> {};

TEST_P(BackendOps, AgainstReferenceAndInvariant) {
  const Backend& b = *GetParam().backend;
#ifdef DETLLM_BACKEND_OPS_CUDA
  if (b.gpu) DETLLM_SKIP_WITHOUT_GPU();
#endif
  auto ops = b.make();
  auto ref = make_ref_ops();
  GetParam().op->run(b, *ops, *ref);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendOps, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.backend->name + "_" + info.param.op->name;
                         });

}  // namespace
}  // namespace detllm::kernels
