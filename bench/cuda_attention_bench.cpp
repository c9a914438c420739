// Invariant paged attention on the GPU (Llama-3.1-8B heads: 32 query / 8 KV, head_dim 128,
// fp32 KV, blocks of 16): decode at batch 1…256 and context 512…8192 against the bandwidth
// roofline (KV bytes read ÷ the device copy rate measured in the same run), and causal prefill
// in TFLOP/s. Run: build-cuda/bench/cuda_attention_bench   (exits without a CUDA device)
// Machine-readable mode, for scripts/gpu/attention_vs_torch.py: --prefill-csv 512,1024,4x2048
// (causal prefill of one sequence of L tokens, or B sequences: BxL) and/or --decode-csv 1,8,64
// (batches of one query token at context --context N, default 2048) print only
// `kind,batch,q_len,context,heads,kv_heads,head_dim,kv_dtype,us` lines after a header.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

using namespace detllm;
using namespace detllm::kernels;

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename F>
double time_us(Ops& ops, F&& call) {
  for (int i = 0; i < 2; ++i) call();
  ops.synchronize();
  double t0 = seconds();
  call();
  ops.synchronize();
  const double one = seconds() - t0;
  const int iters = static_cast<int>(std::clamp(0.02 / std::max(one, 1e-6), 3.0, 1000.0));
  std::vector<double> reps;
  for (int r = 0; r < 3; ++r) {
    t0 = seconds();
    for (int i = 0; i < iters; ++i) call();
    ops.synchronize();
    reps.push_back((seconds() - t0) / iters * 1e6);
  }
  std::sort(reps.begin(), reps.end());
  return reps[1];
}

std::vector<float> noise(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<float>(s >> 40) / 8388608.0f - 1.0f;
  }
  return v;
}

// n_seqs sequences of ctx positions each, every position already in the cache; the step holds
// `q_per_seq` query tokens per sequence at the last positions.
double run_case(Ops& ops, int n_seqs, int ctx, int q_per_seq) {
  const int blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const int n_blocks = n_seqs * blocks_per_seq;
  const size_t kv_floats = size_t(n_blocks) * kBlock * kKvHeads * kHeadDim;
  Buffer k(ops, kv_floats * 4), v(ops, kv_floats * 4);
  {
    const auto h = noise(kv_floats, 1);
    ops.upload(k.data(), h.data(), kv_floats * 4);
    ops.upload(v.data(), h.data(), kv_floats * 4);
  }
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(3));  // pages scattered
  std::vector<int32_t> pos, seq;
  for (int s = 0; s < n_seqs; ++s)
    for (int i = 0; i < q_per_seq; ++i) {
      pos.push_back(ctx - q_per_seq + i);
      seq.push_back(s);
    }
  const int n = static_cast<int>(pos.size());
  Buffer dtab(ops, table.size() * 4), dpos(ops, size_t(n) * 4), dseq(ops, size_t(n) * 4);
  ops.upload(dtab.data(), table.data(), table.size() * 4);
  ops.upload(dpos.data(), pos.data(), pos.size() * 4);
  ops.upload(dseq.data(), seq.data(), seq.size() * 4);
  Buffer q(ops, size_t(n) * kHeads * kHeadDim * 4), out(ops, size_t(n) * kHeads * kHeadDim * 4);
  {
    const auto h = noise(size_t(n) * kHeads * kHeadDim, 2);
    ops.upload(q.data(), h.data(), h.size() * 4);
  }
  const StepBatch batch{n, dpos.i32(), dseq.i32(), nullptr, n_seqs, blocks_per_seq, dtab.i32()};
  const KvCacheLayer cache{k.f32(), v.f32(), n_blocks, kBlock, kKvHeads, kHeadDim};
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  return time_us(ops, [&] { ops.attention(q.f32(), cache, batch, kHeads, scale, out.f32()); });
}

// One case of the CSV mode: `batch` sequences with q_len query tokens each at context `ctx`.
struct CsvCase {
  const char* kind;  // "prefill" (q_len = ctx, causal) or "decode" (q_len = 1)
  int batch, q_len, ctx;
};

// "512,1024,4x2048" → (batch, length) pairs; false on a malformed list.
bool parse_list(std::string_view s, std::vector<std::pair<int, int>>& out) {
  while (!s.empty()) {
    const size_t comma = s.find(',');
    const std::string item(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    int b = 1, n = 0;
    char extra = 0;
    if (std::sscanf(item.c_str(), "%dx%d%c", &b, &n, &extra) != 2) {
      b = 1;
      if (std::sscanf(item.c_str(), "%d%c", &n, &extra) != 1) return false;
    }
    if (b < 1 || n < 1) return false;
    out.emplace_back(b, n);
  }
  return !out.empty();
}

int usage() {
  fmt::print(stderr,
             "usage: cuda_attention_bench [--prefill-csv L|BxL,...] [--decode-csv B,...] "
             "[--context N]\n  without options: the decode and prefill tables\n");
  return 2;
}

int run_csv(Ops& ops, const std::vector<CsvCase>& cases) {
  fmt::print("kind,batch,q_len,context,heads,kv_heads,head_dim,kv_dtype,us\n");
  for (const CsvCase& c : cases) {
    const double t = run_case(ops, c.batch, c.ctx, c.q_len);
    fmt::print("{},{},{},{},{},{},{},fp32,{:.2f}\n", c.kind, c.batch, c.q_len, c.ctx, kHeads,
               kKvHeads, kHeadDim, t);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<CsvCase> csv;
  {
    std::vector<std::pair<int, int>> prefill, decode;
    int context = 2048;
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (i + 1 >= argc) return usage();
      const char* v = argv[++i];
      if (a == "--prefill-csv") {
        if (!parse_list(v, prefill)) return usage();
      } else if (a == "--decode-csv") {
        if (!parse_list(v, decode)) return usage();
      } else if (a == "--context") {
        context = std::atoi(v);
        if (context < 1) return usage();
      } else {
        return usage();
      }
    }
    for (const auto& [b, len] : prefill) csv.push_back({"prefill", b, len, len});
    for (const auto& [one, b] : decode) {
      if (one != 1) return usage();  // decode lists are batch sizes
      csv.push_back({"decode", b, 1, context});
    }
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_attention_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  auto ops = make_cuda_ops({});
  if (!csv.empty()) return run_csv(*ops, csv);
  fmt::print("device: {}\n", cuda_device_description(0));
  // Copy roofline: bytes read + written by a 1 GiB device-to-device copy.
  double copy_tbs = 0;
  {
    const size_t bytes = size_t(1) << 30;
    Buffer a(*ops, bytes), b(*ops, bytes);
    const double t = time_us(*ops, [&] { ops->copy(b.data(), a.data(), bytes); });
    copy_tbs = 2.0 * bytes / t * 1e-6;
  }
  fmt::print("device copy: {:.2f} TB/s (read + write)\n\n", copy_tbs);
  std::string table =
      "| decode batch | context | µs | KV GB/s | % of copy roofline |\n|---|---|---|---|---|\n";
  for (int batch : {1, 8, 64, 256}) {
    for (int ctx : {512, 2048, 8192}) {
      if (size_t(batch) * ctx > size_t(256) * 2048) continue;  // keep the cache ≤ 8 GiB
      const double t = run_case(*ops, batch, ctx, 1);
      const double bytes = 2.0 * batch * ctx * kKvHeads * kHeadDim * 4;
      const std::string row = fmt::format("| {} | {} | {:.1f} | {:.0f} | {:.1f}% |\n", batch, ctx,
                                          t, bytes / t * 1e-3, bytes / t * 1e-6 / copy_tbs * 100);
      fmt::print("{}", row);
      table += row;
    }
  }
  std::string prefill = "| prefill tokens | µs | TFLOP/s (causal) |\n|---|---|---|\n";
  for (int len : {512, 1024, 4096}) {
    const double t = run_case(*ops, 1, len, len);
    const double flop = 4.0 * kHeads * kHeadDim * double(len) * (len + 1) / 2;
    const std::string row = fmt::format("| {} | {:.1f} | {:.2f} |\n", len, t, flop / t * 1e-6);
    fmt::print("{}", row);
    prefill += row;
  }
  fmt::print("\n{}\n{}", table, prefill);
  return 0;
}
