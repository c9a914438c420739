// The startup self-check (see self_check.h): each check computes a reference on random data,
// then the same outputs in other ways — fewer or more rows, a row alone, rows moved to other
// positions, chunked and token-by-token attention, shuffled KV pages, a mixed batch — and
// compares the bits (memcmp of fp32). The data moves through the ops' memory functions, so
// the same code checks host and device backends.
#include "verify/self_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"
#include "kernels/fp8_device_matrix.h"
#include "kernels/ops.h"
#include "kernels/ref/fp8_linear.h"
#include "model/config.h"

namespace detllm {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::Buffer;
using kernels::Ops;

// ---- random data: a portable counter-based generator (splitmix64), same values everywhere ----

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t stream(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return mix64(mix64(mix64(seed ^ a) ^ b) ^ c);
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = mix64(seed + i * 0xD1B54A32D192ED03ull);
    v[i] = lo + (hi - lo) * static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
  }
  return v;
}

// A permutation of 0…n-1 (Fisher–Yates on mix64: the same on every standard library).
std::vector<int32_t> permutation(int32_t n, uint64_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (int32_t i = n - 1; i > 0; --i) {
    const auto j =
        static_cast<int32_t>(mix64(seed + static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

// ---- backend memory ---------------------------------------------------------------------------

template <typename T>
Buffer to_backend(Ops& ops, const std::vector<T>& host) {
  Buffer b(ops, host.size() * sizeof(T));
  if (!host.empty()) ops.upload(b.data(), host.data(), host.size() * sizeof(T));
  return b;
}

std::vector<float> from_backend(Ops& ops, const float* src, size_t n) {
  std::vector<float> h(n);
  if (n) ops.download(h.data(), src, n * sizeof(float));
  return h;
}

// Rows [n_distinct, n) of `base` (rows of row_bytes, in backend memory) as copies of rows
// [0, n_distinct), on the backend: a weight of many rows costs only its distinct ones on the host.
void repeat_rows(Ops& ops, char* base, size_t row_bytes, int64_t n_distinct, int64_t n) {
  for (int64_t r0 = n_distinct; r0 < n; r0 += n_distinct) {
    const int64_t rows = std::min(n_distinct, n - r0);
    ops.copy(base + static_cast<size_t>(r0) * row_bytes, base, static_cast<size_t>(rows) * row_bytes);
  }
}

// A random (n, k) weight in the backend's weight dtype. Only the first 1024 rows are drawn;
// the rest repeat them (device copies), so lm_head-sized weights cost no host memory. Every
// output column is still computed by the kernel under test.
Buffer random_weight(Ops& ops, int64_t n, int64_t k, uint64_t seed) {
  const DType dt = ops.weight_dtype();
  const size_t es = dtype_size(dt);
  const int64_t n_distinct = std::min<int64_t>(n, 1024);
  const size_t n_host = static_cast<size_t>(n_distinct * k);
  const float amp = 1.0f / std::sqrt(static_cast<float>(k));
  const std::vector<float> w = random_floats(n_host, seed, -amp, amp);
  Buffer b(ops, static_cast<size_t>(n * k) * es);
  if (dt == DType::kF32) {
    ops.upload(b.data(), w.data(), n_host * es);
  } else {
    std::vector<uint16_t> h(n_host);
    for (size_t i = 0; i < n_host; ++i) {
      if (dt == DType::kBF16) {
        h[i] = f32_to_bf16(w[i]);
      } else {  // f16: a random normal half in ±[2^-6, 2^0), built from its bits
        const uint64_t r = mix64(seed + i);
        h[i] = static_cast<uint16_t>(((r & 1u) << 15) | ((9u + (r >> 1) % 6u) << 10) |
                                     ((r >> 8) & 0x3ffu));
      }
    }
    ops.upload(b.data(), h.data(), n_host * es);
  }
  repeat_rows(ops, b.data<char>(), static_cast<size_t>(k) * es, n_distinct, n);
  return b;
}

// A random (n, k) weight as FP8 rows of type dt in the form the backend's FP8 linear reads: the
// host rows on a host backend, codes and scales apart on a device (kernels/fp8_device_matrix.h).
// Per channel: kernels/ref/fp8_linear.h fp8_quantize_weight_row. Block types: the same codes,
// with each 128-column block's scale a different multiple (1…3×) of the channel's, so a kernel
// that applied one scale to every block would be seen. As random_weight, only the first 1024
// rows are drawn; the rest repeat them, copied on the backend.
Buffer random_fp8_weight(Ops& ops, int64_t n, int64_t k, uint64_t seed, DType dt) {
  const int64_t d = std::min<int64_t>(n, 1024);
  const float amp = 1.0f / std::sqrt(static_cast<float>(k));
  const std::vector<float> w = random_floats(static_cast<size_t>(d * k), seed, -amp, amp);
  const size_t rc = dtype_row_bytes(DType::kF8E4M3, k), rb = dtype_row_bytes(dt, k);
  std::vector<uint8_t> channel(rc), rows(static_cast<size_t>(d) * rb);
  std::vector<float> scales(static_cast<size_t>(fp8_row_scales(dt, k) - 2));
  for (int64_t r = 0; r < d; ++r) {
    kernels::ref::fp8_quantize_weight_row(w.data() + r * k, k, channel.data());
    for (size_t b = 0; b < scales.size(); ++b)
      scales[b] = fp8_row_weight_scale(channel.data(), 0) * static_cast<float>(1 + b % 3);
    uint8_t* row = rows.data() + r * rb;
    fp8_write_row_header(dt, row, k, 0.0f, 0.0f, scales.data());
    std::memcpy(row + 4 * fp8_row_scales(dt, k), fp8_row_codes(DType::kF8E4M3, channel.data(), k),
                static_cast<size_t>(k));
  }
  if (ops.host_memory()) {
    Buffer b(ops, static_cast<size_t>(n) * rb);
    ops.upload(b.data(), rows.data(), rows.size());
    repeat_rows(ops, b.data<char>(), rb, d, n);
    return b;
  }
  // The device form of the distinct rows, placed as parts of the n-row form: codes, scales (each
  // row's repeated), then the matrix's activation parameters.
  const size_t row_scales = sizeof(float) * static_cast<size_t>(kernels::fp8_device_row_scales(dt, k));
  std::vector<uint8_t> part(kernels::fp8_device_bytes(dt, d, k));
  kernels::fp8_device_split(dt, rows.data(), d, k, part.data());
  Buffer b(ops, kernels::fp8_device_bytes(dt, n, k));
  char* codes = b.data<char>();
  char* dev_scales = codes + kernels::fp8_device_scale_offset(dt, n, k);
  ops.upload(codes, part.data(), static_cast<size_t>(d * k));
  ops.upload(dev_scales, part.data() + kernels::fp8_device_scale_offset(dt, d, k), row_scales * d);
  ops.upload(codes + kernels::fp8_device_params_offset(dt, n, k),
             part.data() + kernels::fp8_device_params_offset(dt, d, k), 2 * sizeof(float));
  repeat_rows(ops, codes, static_cast<size_t>(k), d, n);
  repeat_rows(ops, dev_scales, row_scales, d, n);
  return b;
}

// ---- comparison -------------------------------------------------------------------------------

// Compares `got` (n_rows, row_len) with `expected` bit for bit; row labels (for the report)
// are row_of[i] when given, else first_row + i. Records the first mismatch in r and returns
// false when there is one.
bool same_bits(SelfCheckResult& r, const std::string& variant, const float* expected,
               const float* got, int64_t n_rows, int64_t row_len,
               const std::vector<int32_t>& row_of = {}, int64_t first_row = 0) {
  ++r.n_variants;
  const int64_t n = n_rows * row_len;
  if (std::memcmp(expected, got, static_cast<size_t>(n) * sizeof(float)) == 0) return true;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(expected + i, got + i, sizeof(float)) != 0) {
      const int64_t row = i / row_len;
      r.mismatch = SelfCheckMismatch{
          variant, row_of.empty() ? first_row + row : row_of[static_cast<size_t>(row)], i % row_len,
          expected[i], got[i]};
      return false;
    }
  }
  return true;
}

// Runs one check body, timing it; an exception fails the check with its message.
template <typename Body>
SelfCheckResult run_one(std::string name, Ops& ops, Body&& body) {
  SelfCheckResult r;
  r.name = std::move(name);
  const auto t0 = Clock::now();
  try {
    body(r);
    ops.synchronize();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.passed = r.error.empty() && !r.mismatch;
  r.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return r;
}

// ---- GEMM: rows of X[:m]·Wᵀ for several m, a row alone, rows moved -----------------------------

void check_gemm(Ops& ops, const SelfCheckGemm& g, uint64_t seed, SelfCheckResult& r) {
  check(g.n > 0 && g.k > 0 && g.max_m > 0, "self-check GEMM {}: bad shape n {} k {} max_m {}",
        g.name, g.n, g.k, g.max_m);
  const int64_t big_m = g.max_m, n = g.n, k = g.k;
  const std::vector<float> x =
      random_floats(static_cast<size_t>(big_m * k), stream(seed, 1), -1.0f, 1.0f);
  const Buffer x_dev = to_backend(ops, x);
  check(!g.fp8 || ops.reads_weight_dtype(g.fp8_rows),
        "self-check GEMM {}: an FP8 weight ({}), but the backend ({}) has no FP8 linear for it",
        g.name, dtype_name(g.fp8_rows), ops.name());
  const Buffer w_dev = g.fp8 ? random_fp8_weight(ops, n, k, stream(seed, 2), g.fp8_rows)
                             : random_weight(ops, n, k, stream(seed, 2));
  const Buffer bias_dev =
      g.bias ? to_backend(ops, random_floats(static_cast<size_t>(n), stream(seed, 3), -0.5f, 0.5f))
             : Buffer();
  const kernels::WeightMatrix w{w_dev.data(), g.fp8 ? g.fp8_rows : ops.weight_dtype(), n, k};
  const float* bias = g.bias ? bias_dev.f32() : nullptr;
  Buffer y(ops, static_cast<size_t>(big_m * n) * sizeof(float));

  ops.matmul(x_dev.f32(), g.max_m, w, bias, y.f32());
  const std::vector<float> full = from_backend(ops, y.f32(), static_cast<size_t>(big_m * n));

  // Fewer rows: each row of X[:m]·Wᵀ equals the same row of the full batch.
  for (int32_t m : {1, 2, 3, 8, 17, 64, 130}) {
    if (m >= g.max_m) break;
    ops.matmul(x_dev.f32(), m, w, bias, y.f32());
    const auto got = from_backend(ops, y.f32(), static_cast<size_t>(m * n));
    if (!same_bits(r, fmt::format("m={} vs m={}", m, big_m), full.data(), got.data(), m, n)) {
      return;
    }
  }
  // A row alone.
  for (int64_t row : {big_m / 2, big_m - 1}) {
    if (row == 0) continue;
    ops.matmul(x_dev.f32() + row * k, 1, w, bias, y.f32());
    const auto got = from_backend(ops, y.f32(), static_cast<size_t>(n));
    if (!same_bits(r, fmt::format("row {} alone vs m={}", row, big_m), full.data() + row * n,
                   got.data(), 1, n, {}, row)) {
      return;
    }
  }
  // Rows drawn from the whole batch, in shuffled order, as a batch of their own.
  if (big_m > 1) {
    const int32_t mp = std::min<int32_t>(g.max_m, 61);
    std::vector<int32_t> rows = permutation(g.max_m, stream(seed, 4));
    rows.resize(static_cast<size_t>(mp));
    std::vector<float> xp(static_cast<size_t>(mp * k)), expected(static_cast<size_t>(mp * n));
    for (int32_t i = 0; i < mp; ++i) {
      const int64_t src = rows[static_cast<size_t>(i)];
      std::copy_n(x.begin() + src * k, k, xp.begin() + i * k);
      std::copy_n(full.begin() + src * n, n, expected.begin() + i * n);
    }
    const Buffer xp_dev = to_backend(ops, xp);
    ops.matmul(xp_dev.f32(), mp, w, bias, y.f32());
    const auto got = from_backend(ops, y.f32(), static_cast<size_t>(mp * n));
    same_bits(r, fmt::format("{} shuffled rows vs m={}", mp, big_m), expected.data(), got.data(),
              mp, n, rows);
  }
}

// ---- attention: one sequence computed whole, chunked, on shuffled pages, in a mixed batch ------

struct Chunk {
  int32_t seq = 0;
  int32_t start = 0;
  int32_t count = 0;
};

struct AttnVariant {
  std::string name;
  std::vector<std::vector<Chunk>> steps;
  uint64_t layout_seed = 0;  // 0: blocks in order; else a shuffled physical layout
  bool shuffle_tokens = false;
};

// Sequences 0 and 1 with their q/k/v contents (a pure function of (sequence, position)) and a
// paged cache; run() plays a variant's steps and returns sequence 0's output rows.
class AttentionWorld {
 public:
  AttentionWorld(Ops& ops, const SelfCheckAttention& a, std::vector<int32_t> lengths, uint64_t seed)
      : ops_(ops), a_(a), lengths_(std::move(lengths)), seed_(seed) {
    check(a.n_heads > 0 && a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0 && a.head_dim > 0 &&
              a.block_size > 0 && a.length > 0,
          "self-check attention: bad geometry {}/{}x{} block {} length {}", a.n_heads, a.n_kv_heads,
          a.head_dim, a.block_size, a.length);
    q_row_ = int64_t{a.n_heads} * a.head_dim;
    kv_row_ = int64_t{a.n_kv_heads} * a.head_dim;
    for (size_t s = 0; s < lengths_.size(); ++s) {
      const auto len = static_cast<size_t>(lengths_[s]);
      q_.push_back(random_floats(len * q_row_, stream(seed, 10, s), -4.0f, 4.0f));
      k_.push_back(random_floats(len * kv_row_, stream(seed, 11, s), -1.0f, 1.0f));
      v_.push_back(random_floats(len * kv_row_, stream(seed, 12, s), -1.0f, 1.0f));
      max_blocks_ = std::max(max_blocks_, (lengths_[s] + a.block_size - 1) / a.block_size);
      n_tokens_max_ += lengths_[s];
    }
    n_blocks_ = static_cast<int32_t>(lengths_.size()) * max_blocks_ + 3;
  }

  std::vector<float> run(const AttnVariant& v) {
    const int32_t n_seqs = static_cast<int32_t>(lengths_.size());
    // Physical blocks: in order, or shuffled.
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks_));
    std::iota(ids.begin(), ids.end(), 0);
    if (v.layout_seed) ids = permutation(n_blocks_, v.layout_seed);
    std::vector<int32_t> tables(static_cast<size_t>(n_seqs * max_blocks_), -1);
    size_t next = 0;
    for (int32_t s = 0; s < n_seqs; ++s) {
      for (int32_t b = 0; b < (lengths_[s] + a_.block_size - 1) / a_.block_size; ++b) {
        tables[static_cast<size_t>(s * max_blocks_ + b)] = ids[next++];
      }
    }
    // A fresh cache, NaN outside written slots: a kernel reading a masked slot shows up.
    const size_t cache_floats = static_cast<size_t>(n_blocks_) * a_.block_size * kv_row_;
    // In the backend's KV dtype (bf16 NaN is 0x7fc0, the top half of the fp32 one).
    const DType kv_dtype = ops_.kv_dtype();
    Buffer k_cache, v_cache;
    if (kv_dtype == DType::kBF16) {
      const std::vector<uint16_t> nan(cache_floats, uint16_t{0x7fc0});
      k_cache = to_backend(ops_, nan);
      v_cache = to_backend(ops_, nan);
    } else {
      const std::vector<float> nan(cache_floats, std::numeric_limits<float>::quiet_NaN());
      k_cache = to_backend(ops_, nan);
      v_cache = to_backend(ops_, nan);
    }
    const Buffer tables_dev = to_backend(ops_, tables);
    const kernels::KvCacheLayer cache{k_cache.data(), v_cache.data(), n_blocks_,    a_.block_size,
                                      a_.n_kv_heads,  a_.head_dim,    kv_dtype};
    // Step buffers, sized for the largest step.
    const auto nt = static_cast<size_t>(n_tokens_max_);
    Buffer q(ops_, nt * q_row_ * 4), k(ops_, nt * kv_row_ * 4), vv(ops_, nt * kv_row_ * 4);
    Buffer out(ops_, nt * q_row_ * 4);
    Buffer pos_dev(ops_, nt * 4), seq_dev(ops_, nt * 4), slot_dev(ops_, nt * 4);

    std::vector<float> result(static_cast<size_t>(lengths_[0]) * q_row_);
    const float scale = 1.0f / std::sqrt(static_cast<float>(a_.head_dim));
    uint64_t step_index = 0;
    for (const std::vector<Chunk>& step : v.steps) {
      std::vector<std::pair<int32_t, int32_t>> tokens;  // (seq, position)
      for (const Chunk& c : step) {
        for (int32_t i = 0; i < c.count; ++i) tokens.emplace_back(c.seq, c.start + i);
      }
      const auto n = static_cast<int32_t>(tokens.size());
      if (n == 0) continue;
      if (v.shuffle_tokens) {
        const std::vector<int32_t> order = permutation(n, stream(seed_, 20, step_index));
        std::vector<std::pair<int32_t, int32_t>> shuffled;
        for (int32_t i : order) shuffled.push_back(tokens[static_cast<size_t>(i)]);
        tokens = std::move(shuffled);
      }
      ++step_index;
      std::vector<float> qh(static_cast<size_t>(n * q_row_)), kh(static_cast<size_t>(n * kv_row_)),
          vh(static_cast<size_t>(n * kv_row_));
      std::vector<int32_t> positions(n), seqs(n), slots(n);
      for (int32_t t = 0; t < n; ++t) {
        const auto [s, p] = tokens[static_cast<size_t>(t)];
        std::copy_n(q_[s].begin() + p * q_row_, q_row_, qh.begin() + t * q_row_);
        std::copy_n(k_[s].begin() + p * kv_row_, kv_row_, kh.begin() + t * kv_row_);
        std::copy_n(v_[s].begin() + p * kv_row_, kv_row_, vh.begin() + t * kv_row_);
        positions[t] = p;
        seqs[t] = s;
        slots[t] =
            tables[static_cast<size_t>(s * max_blocks_ + p / a_.block_size)] * a_.block_size +
            p % a_.block_size;
      }
      ops_.upload(q.data(), qh.data(), qh.size() * 4);
      ops_.upload(k.data(), kh.data(), kh.size() * 4);
      ops_.upload(vv.data(), vh.data(), vh.size() * 4);
      ops_.upload(pos_dev.data(), positions.data(), positions.size() * 4);
      ops_.upload(seq_dev.data(), seqs.data(), seqs.size() * 4);
      ops_.upload(slot_dev.data(), slots.data(), slots.size() * 4);
      const kernels::StepBatch batch{n,      pos_dev.i32(), seq_dev.i32(),   slot_dev.i32(),
                                     n_seqs, max_blocks_,   tables_dev.i32()};
      ops_.kv_append(k.f32(), vv.f32(), batch, cache);
      ops_.attention(q.f32(), cache, batch, a_.n_heads, scale, out.f32());
      const std::vector<float> oh = from_backend(ops_, out.f32(), static_cast<size_t>(n * q_row_));
      for (int32_t t = 0; t < n; ++t) {
        const auto [s, p] = tokens[static_cast<size_t>(t)];
        if (s == 0) std::copy_n(oh.begin() + t * q_row_, q_row_, result.begin() + p * q_row_);
      }
    }
    return result;
  }

  int64_t row_len() const { return q_row_; }

 private:
  Ops& ops_;
  SelfCheckAttention a_;
  std::vector<int32_t> lengths_;
  uint64_t seed_;
  int64_t q_row_ = 0, kv_row_ = 0;
  int32_t max_blocks_ = 1, n_blocks_ = 0, n_tokens_max_ = 0;
  std::vector<std::vector<float>> q_, k_, v_;  // per sequence: (length, heads, head_dim)
};

// Steps covering [0, length) of `seq` in chunks of `size`.
std::vector<std::vector<Chunk>> chunked(int32_t seq, int32_t length, int32_t size) {
  std::vector<std::vector<Chunk>> steps;
  for (int32_t s = 0; s < length; s += size)
    steps.push_back({{seq, s, std::min(size, length - s)}});
  return steps;
}

void check_attention(Ops& ops, const SelfCheckAttention& a, uint64_t seed, SelfCheckResult& r) {
  const int32_t len = a.length, len_b = a.length / 2 + 5;
  AttentionWorld world(ops, a, {len, len_b}, seed);
  AttnVariant ref{"whole prefill", chunked(0, len, len), 0, false};
  const std::vector<float> expected = world.run(ref);

  std::vector<AttnVariant> variants;
  variants.push_back({"decode (chunks of 1)", chunked(0, len, 1), 0, false});
  variants.push_back({"chunks of 7", chunked(0, len, 7), 0, false});
  variants.push_back({"chunks of 64", chunked(0, len, 64), 0, false});
  variants.push_back({"shuffled pages", chunked(0, len, len), stream(seed, 30), false});
  // Mixed with a second sequence (chunks of 37 and 23 side by side), tokens in shuffled order
  // within each step, on shuffled pages.
  AttnVariant mixed{
      "batch with another sequence, shuffled tokens and pages", {}, stream(seed, 31), true};
  for (int32_t a0 = 0, b0 = 0; a0 < len || b0 < len_b; a0 += 37, b0 += 23) {
    std::vector<Chunk> step;
    if (b0 < len_b) step.push_back({1, b0, std::min(23, len_b - b0)});
    if (a0 < len) step.push_back({0, a0, std::min(37, len - a0)});
    mixed.steps.push_back(std::move(step));
  }
  variants.push_back(std::move(mixed));

  for (const AttnVariant& v : variants) {
    const std::vector<float> got = world.run(v);
    if (!same_bits(r, v.name + " vs whole prefill", expected.data(), got.data(), len,
                   world.row_len())) {
      return;
    }
  }
}

// ---- RMSNorm: rows at several row counts, alone, in place ---------------------------------------

void check_rmsnorm(Ops& ops, int32_t dim, int32_t max_rows, uint64_t seed, SelfCheckResult& r) {
  check(dim > 0 && max_rows > 0, "self-check RMSNorm: bad shape dim {} rows {}", dim, max_rows);
  const float eps = 1e-5f;
  const auto n_all = static_cast<size_t>(int64_t{max_rows} * dim);
  const Buffer x = to_backend(ops, random_floats(n_all, stream(seed, 40), -2.0f, 2.0f));
  const Buffer w =
      to_backend(ops, random_floats(static_cast<size_t>(dim), stream(seed, 41), 0.5f, 1.5f));
  Buffer y(ops, n_all * 4);
  ops.rmsnorm(x.f32(), w.f32(), max_rows, dim, eps, y.f32());
  const std::vector<float> full = from_backend(ops, y.f32(), n_all);
  for (int32_t m : {1, 2, 3, 8, 17, 64}) {
    if (m >= max_rows) break;
    ops.rmsnorm(x.f32(), w.f32(), m, dim, eps, y.f32());
    const auto got = from_backend(ops, y.f32(), static_cast<size_t>(int64_t{m} * dim));
    if (!same_bits(r, fmt::format("{} rows vs {}", m, max_rows), full.data(), got.data(), m, dim)) {
      return;
    }
  }
  for (int64_t row : {int64_t{max_rows} / 2, int64_t{max_rows} - 1}) {
    if (row == 0) continue;
    ops.rmsnorm(x.f32() + row * dim, w.f32(), 1, dim, eps, y.f32());
    const auto got = from_backend(ops, y.f32(), static_cast<size_t>(dim));
    if (!same_bits(r, fmt::format("row {} alone vs {} rows", row, max_rows),
                   full.data() + row * dim, got.data(), 1, dim, {}, row)) {
      return;
    }
  }
  ops.copy(y.data(), x.data(), n_all * 4);
  ops.rmsnorm(y.f32(), w.f32(), max_rows, dim, eps, y.f32());
  const auto got = from_backend(ops, y.f32(), n_all);
  same_bits(r, "in place vs out of place", full.data(), got.data(), max_rows, dim);
}

void add_gemm(std::vector<SelfCheckGemm>& out, const std::string& name, int32_t n, int32_t k,
              int32_t max_m, bool bias, bool fp8 = false, DType fp8_rows = DType::kF8E4M3) {
  for (SelfCheckGemm& g : out) {
    if (g.n == n && g.k == k && g.bias == bias && g.fp8 == fp8 && g.fp8_rows == fp8_rows) {
      g.name += "," + name;
      g.max_m = std::max(g.max_m, max_m);
      return;
    }
  }
  out.push_back({name, n, k, max_m, bias, fp8, fp8_rows});
}

}  // namespace

SelfCheckOptions self_check_options_for(const ModelConfig& c, int32_t block_size,
                                        bool fp8_projections, DType fp8_rows) {
  SelfCheckOptions o;
  const bool f = fp8_projections;
  const DType t = fp8_rows;
  add_gemm(o.gemms, "q_proj", c.q_dim(), c.dim, 256, c.qkv_bias, f, t);
  add_gemm(o.gemms, "k_proj", c.kv_dim(), c.dim, 256, c.qkv_bias, f, t);
  add_gemm(o.gemms, "v_proj", c.kv_dim(), c.dim, 256, c.qkv_bias, f, t);
  add_gemm(o.gemms, "o_proj", c.dim, c.q_dim(), 256, false, f, t);
  add_gemm(o.gemms, "gate_proj", c.ffn_dim, c.dim, 256, false, f, t);
  add_gemm(o.gemms, "up_proj", c.ffn_dim, c.dim, 256, false, f, t);
  add_gemm(o.gemms, "down_proj", c.dim, c.ffn_dim, 256, false, f, t);
  // The fused shapes a device backend runs (LlamaModel's ProjectionLayout::kFused).
  add_gemm(o.gemms, "qkv_proj", c.q_dim() + 2 * c.kv_dim(), c.dim, 256, c.qkv_bias, f, t);
  add_gemm(o.gemms, "gate_up_proj", 2 * c.ffn_dim, c.dim, 256, false, f, t);
  // lm_head runs only on the rows whose logits are wanted; 16 rows keep the widest GEMM cheap.
  add_gemm(o.gemms, "lm_head", c.vocab_size, c.dim, 16, false);
  o.attention.push_back({c.n_heads, c.n_kv_heads, c.head_dim, block_size, 300});
  o.rmsnorm_dims.push_back(c.dim);
  // The q/k norms: per head, or (OLMoE) over the whole q (q_dim == dim) and k projections.
  for (int32_t d : {c.q_norm_dim(), c.k_norm_dim()}) {
    if (c.qk_norm &&
        std::find(o.rmsnorm_dims.begin(), o.rmsnorm_dims.end(), d) == o.rmsnorm_dims.end()) {
      o.rmsnorm_dims.push_back(d);
    }
  }
  return o;
}

SelfCheckReport run_self_check(kernels::Ops& ops, const SelfCheckOptions& opts) {
  SelfCheckReport report;
  report.backend = std::string(ops.name());
  const auto t0 = Clock::now();
  uint64_t index = 0;
  for (const SelfCheckGemm& g : opts.gemms) {
    const uint64_t seed = stream(opts.seed, 100, index++);
    const std::string fp8 = !g.fp8                           ? ""
                            : g.fp8_rows == DType::kF8E4M3 ? " fp8"
                                                           : " fp8 " + std::string(dtype_name(g.fp8_rows));
    report.checks.push_back(run_one(fmt::format("gemm {} {}->{}{}", g.name, g.k, g.n, fp8),
                                    ops,
                                    [&](SelfCheckResult& r) { check_gemm(ops, g, seed, r); }));
  }
  for (const SelfCheckAttention& a : opts.attention) {
    const uint64_t seed = stream(opts.seed, 200, index++);
    report.checks.push_back(
        run_one(fmt::format("attention {}/{}x{} block {}, {} positions", a.n_heads, a.n_kv_heads,
                            a.head_dim, a.block_size, a.length),
                ops, [&](SelfCheckResult& r) { check_attention(ops, a, seed, r); }));
  }
  for (int32_t dim : opts.rmsnorm_dims) {
    const uint64_t seed = stream(opts.seed, 300, index++);
    report.checks.push_back(run_one(fmt::format("rmsnorm {}", dim), ops, [&](SelfCheckResult& r) {
      check_rmsnorm(ops, dim, opts.rmsnorm_max_rows, seed, r);
    }));
  }
  report.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return report;
}

// ---- reporting --------------------------------------------------------------------------------

std::string SelfCheckResult::failure() const {
  if (!error.empty()) return "error: " + error;
  if (!mismatch) return {};
  const SelfCheckMismatch& m = *mismatch;
  return fmt::format("{}: row {} column {}: {:.9g} vs {:.9g}", m.variant, m.row, m.column,
                     m.reference, m.value);
}

bool SelfCheckReport::passed() const {
  return n_failed() == 0;
}

int32_t SelfCheckReport::n_failed() const {
  return static_cast<int32_t>(
      std::count_if(checks.begin(), checks.end(), [](const auto& c) { return !c.passed; }));
}

const SelfCheckResult* SelfCheckReport::first_failure() const {
  for (const SelfCheckResult& c : checks) {
    if (!c.passed) return &c;
  }
  return nullptr;
}

std::string SelfCheckReport::summary() const {
  if (const SelfCheckResult* f = first_failure()) {
    return fmt::format("FAILED {} of {} checks ({}): {}: {}", n_failed(), checks.size(), backend,
                       f->name, f->failure());
  }
  return fmt::format("{} checks passed in {:.2f} s ({})", checks.size(), elapsed_ms / 1e3, backend);
}

std::string SelfCheckReport::describe() const {
  size_t width = 5;
  for (const SelfCheckResult& c : checks) width = std::max(width, c.name.size());
  std::string out = fmt::format("{:<{}}  {:<6}  {:>8}  {:>9}  {}\n", "check", width, "status",
                                "variants", "ms", "first mismatch (reference vs variant)");
  for (const SelfCheckResult& c : checks) {
    out += fmt::format("{:<{}}  {:<6}  {:>8}  {:>9.1f}  {}\n", c.name, width,
                       c.passed ? "ok" : "FAILED", c.n_variants, c.elapsed_ms,
                       c.passed ? "-" : c.failure());
  }
  out += summary();
  out += '\n';
  return out;
}

SelfCheckVerdict SelfCheckVerdict::of(const SelfCheckReport& report) {
  const SelfCheckResult* f = report.first_failure();
  if (!f) return {SelfCheckState::kPassed, {}};
  return {SelfCheckState::kFailed, fmt::format("{}: {}", f->name, f->failure())};
}

}  // namespace detllm
