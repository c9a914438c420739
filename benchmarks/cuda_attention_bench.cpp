// Invariant paged attention on the GPU (Llama-3.1-8B heads: 32 query / 8 KV, head_dim 128, or
// --heads Q,KV,D;
// blocks of 16 scattered): the tensor-core kernel over a bf16 KV cache (attention_tc.cu, the
// CUDA default) and the CUDA-core kernel over fp32 KV (attention.cu), measured in one run:
// decode at batch 1…256 and context 512…32768 in TB/s of KV read (and against the device copy
// rate), causal prefill at 512…16384 tokens and a batch of mixed lengths in TFLOP/s, and the
// ratio of the two kernels. Run: build-cuda/benchmarks/cuda_attention_bench (exits without a GPU).
// Machine-readable mode, for scripts/gpu/attention_vs_torch.py: --kv-dtype bf16|fp32 (default
// bf16) with --prefill-csv 512,1024,4x2048 (causal prefill of one sequence of L tokens, or B
// sequences: BxL), --mixed-csv 512+2048+8192 (one step prefilling sequences of those lengths
// together) and/or --decode-csv 1,8,64x8192 (batch B of one query token at context --context N,
// default 2048, or BxC: at context C) print only
// `kind,batch,q_len,context,heads,kv_heads,head_dim,kv_dtype,us` lines after a header.
// --prefill-shapes 2048,8192,16384: causal prefill of one sequence of each L (and the mixed
// step 512+2048+8192+1000) under each CTA kernel of the tensor-core attention (chosen; the
// packed CTA, the packed streams, the warpgroup CTA: CudaOptions::attention_kernel), one
// markdown table of µs and TFLOP/s (the kernels give the same bits; only the speed differs).
// --decode-variants 1x32768,8x8192,256x512: decode at those (batch, context) under each kernel
// the planner can choose for decode (the decode warps in each split placement, the packed and
// the shared-split CTA), one markdown table of µs and KV TB/s (same bits throughout).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/attention_plan.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

using namespace detllm;
using namespace detllm::kernels;

namespace {

constexpr int kBlock = 16;
// The head geometry: Llama-3.1-8B's unless --heads Q,KV,D says otherwise (e.g. 9,3,64: SmolLM2).
int g_heads = 32, g_kv_heads = 8, g_head_dim = 128;

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

// One sequence of the step: ctx positions, the last q_len of them queried in this step (all
// KV already in the cache).
struct SeqSpec {
  int ctx, q_len;
};

// Times one attention call over `seqs` (KV filled on the device in the ops' KV dtype).
double run_step(Ops& ops, const std::vector<SeqSpec>& seqs) {
  int max_blocks = 0, n_blocks = 0;
  for (const SeqSpec& s : seqs) {
    const int b = (s.ctx + kBlock - 1) / kBlock;
    max_blocks = std::max(max_blocks, b);
    n_blocks += b;
  }
  const DType dtype = ops.kv_dtype();
  const int64_t kv_elems = int64_t(n_blocks) * kBlock * g_kv_heads * g_head_dim;
  Buffer k(ops, kv_elems * dtype_size(dtype)), v(ops, kv_elems * dtype_size(dtype));
  ops.fill_uniform(k.data(), dtype, kv_elems, 1, 0.0f, 1.0f);
  ops.fill_uniform(v.data(), dtype, kv_elems, 2, 0.0f, 1.0f);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(3));  // pages scattered
  std::vector<int32_t> table(seqs.size() * size_t(max_blocks), 0), pos, seq;
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int b = 0; b < (seqs[s].ctx + kBlock - 1) / kBlock; ++b)
      table[s * max_blocks + b] = ids[next++];
    for (int i = 0; i < seqs[s].q_len; ++i) {
      pos.push_back(seqs[s].ctx - seqs[s].q_len + i);
      seq.push_back(static_cast<int32_t>(s));
    }
  }
  const int n = static_cast<int>(pos.size());
  Buffer dtab(ops, table.size() * 4), dpos(ops, size_t(n) * 4), dseq(ops, size_t(n) * 4);
  ops.upload(dtab.data(), table.data(), table.size() * 4);
  ops.upload(dpos.data(), pos.data(), pos.size() * 4);
  ops.upload(dseq.data(), seq.data(), seq.size() * 4);
  const int64_t q_elems = int64_t(n) * g_heads * g_head_dim;
  Buffer q(ops, q_elems * 4), out(ops, q_elems * 4);
  ops.fill_uniform(q.data(), DType::kF32, q_elems, 3, 0.0f, 2.0f);
  const StepBatch batch{n, dpos.i32(), dseq.i32(), nullptr, static_cast<int32_t>(seqs.size()),
                        max_blocks, dtab.i32()};
  const KvCacheLayer cache{k.data(), v.data(), n_blocks, kBlock, g_kv_heads, g_head_dim, dtype};
  const float scale = 1.0f / std::sqrt(float(g_head_dim));
  return time_us(ops, [&] { ops.attention(q.f32(), cache, batch, g_heads, scale, out.f32()); });
}

double run_case(Ops& ops, int n_seqs, int ctx, int q_per_seq) {
  return run_step(ops, std::vector<SeqSpec>(static_cast<size_t>(n_seqs), SeqSpec{ctx, q_per_seq}));
}

double prefill_flop(const std::vector<int>& lens) {
  double f = 0;
  for (int n : lens) f += 4.0 * g_heads * g_head_dim * double(n) * (n + 1) / 2;  // causal QKᵀ + PV
  return f;
}

// One case of the CSV mode.
struct CsvCase {
  std::string kind;  // "prefill" (q_len = ctx, causal), "mixed" (lens), "decode" (q_len = 1)
  int batch, q_len, ctx;
  std::vector<int> lens;  // mixed: the sequences' lengths
};

// "512,1024,4x2048" → (a, b) pairs ("b" alone → (1, b)); false on a malformed list.
bool parse_list(std::string_view s, std::vector<std::pair<int, int>>& out, char sep = ',') {
  while (!s.empty()) {
    const size_t comma = s.find(sep);
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

// "1,8,64x8192" → (batch, context) pairs, context 0 = --context; false on a malformed list.
bool parse_decode_list(std::string_view s, std::vector<std::pair<int, int>>& out) {
  std::vector<std::pair<int, int>> items;
  if (!parse_list(s, items)) return false;
  size_t i = 0;
  while (!s.empty()) {  // parse_list reads "B" as (1, B): tell "B" from "BxC" by the 'x'
    const size_t comma = s.find(',');
    const bool has_x = s.substr(0, comma).find('x') != std::string_view::npos;
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    out.push_back(has_x ? items[i] : std::pair<int, int>{items[i].second, 0});
    ++i;
  }
  return true;
}

int usage() {
  fmt::print(stderr,
             "usage: cuda_attention_bench [--kv-dtype bf16|fp32] [--prefill-csv L|BxL,...] "
             "[--mixed-csv L+L+...] [--decode-csv B|BxC,...] [--context N] [--prefill-shapes L,...]\n"
             "  [--decode-variants BxC,...] (decode under each kernel of the planner)\n"
             "  [--heads Q,KV,D] (query heads, KV heads, head dim; default 32,8,128: Llama-3.1-8B)\n"
             "  without csv options: the decode and prefill tables of both KV dtypes\n");
  return 2;
}

// kernel, split: CudaOptions::attention_kernel / attention_split_blocks (-1: the planner's
// choice, kernels/attention_plan.h).
std::unique_ptr<Ops> ops_for(DType kv, int kernel = -1, int split = -1) {
  CudaOptions o;
  o.kv_dtype = kv;
  o.attention_kernel = kernel;
  o.attention_split_blocks = split;
  return make_cuda_ops(o);
}

constexpr int kDecodeWarps = static_cast<int>(AttentionKernel::kDecodeWarps);
constexpr int kSharedSplit = static_cast<int>(AttentionKernel::kSharedSplit);
constexpr int kWarpgroup = static_cast<int>(AttentionKernel::kWarpgroup);
constexpr int kPacked = static_cast<int>(AttentionKernel::kPacked);
constexpr int kPackedStreams = static_cast<int>(AttentionKernel::kPackedStreams);

// Decode under each kernel the planner can choose for it (same bits). (The decode warps' other
// rings, chunks and copies, and the packed CTA's other merges, were measured and removed:
// docs/cuda.md "Decode: half-tile rings", "The batch-1 step's remaining levers".)
int run_decode_variants(const std::vector<std::pair<int, int>>& cases) {
  struct Variant {
    const char* name;
    int kernel, split;
  };
  const Variant variants[] = {{"chosen", -1, -1},
                              {"decode warps", kDecodeWarps, -1},
                              {"decode warps, a warp a split + merge kernel", kDecodeWarps, 1},
                              {"decode warps, whole rows merged in the warp", kDecodeWarps, 0},
                              {"packed CTA", kPacked, -1},
                              {"shared-split CTA", kSharedSplit, -1}};
  fmt::print("device: {}\n", cuda_device_description(0));
  std::vector<std::unique_ptr<Ops>> ops;
  for (const Variant& v : variants) ops.push_back(ops_for(DType::kBF16, v.kernel, v.split));
  std::string table = "| decode kernel |", rule = "|---|";
  for (const auto& [batch, ctx] : cases) {
    table += fmt::format(" {} × {} µs (TB/s) |", batch, ctx);
    rule += "---|";
  }
  table += "\n" + rule + "\n";
  fmt::print("{}", table);
  for (size_t i = 0; i < ops.size(); ++i) {
    std::string row = fmt::format("| {} |", variants[i].name);
    for (const auto& [batch, ctx] : cases) {
      const double us = run_case(*ops[i], batch, ctx, 1);
      const double bytes = 2.0 * 2.0 * batch * ctx * g_kv_heads * g_head_dim;
      row += fmt::format(" {:.1f} ({:.2f}) |", us, bytes / us * 1e-6);
    }
    row += "\n";
    fmt::print("{}", row);
    std::fflush(stdout);
    table += row;
  }
  fmt::print("\n{}", table);
  return 0;
}

// Causal prefill under each CTA kernel the planner can choose for it (a kernel that cannot
// run the heads runs the chosen plan).
int run_prefill_shapes(const std::vector<int>& lens) {
  struct Shape {
    const char* name;
    int kernel;
  };
  const Shape shapes[] = {{"chosen", -1},
                          {"packed CTA (4 × 16, fast path)", kPacked},
                          {"packed streams (2 × 4 × 32)", kPackedStreams},
                          {"warpgroup CTA (wgmma)", kWarpgroup}};
  std::vector<std::unique_ptr<Ops>> ops;
  std::string head = "| prefill (causal) |", rule = "|---|";
  for (const Shape& sh : shapes) {
    ops.push_back(ops_for(DType::kBF16, sh.kernel));
    head += fmt::format(" {} µs (TFLOP/s) |", sh.name);
    rule += "---|";
  }
  fmt::print("device: {}; heads {} query / {} KV × {}\n\n{}\n{}\n", cuda_device_description(0),
             g_heads, g_kv_heads, g_head_dim, head, rule);
  std::vector<std::vector<int>> cases;
  for (int n : lens) cases.push_back({n});
  cases.push_back({512, 2048, 8192, 1000});
  for (const auto& c : cases) {
    std::vector<SeqSpec> seqs;
    std::string name;
    for (int n : c) {
      seqs.push_back({n, n});
      if (!name.empty()) name += '+';
      name += fmt::format("{}", n);
    }
    std::string row = fmt::format("| {} |", name);
    for (auto& o : ops) {
      const double t = run_step(*o, seqs);
      row += fmt::format(" {:.1f} ({:.1f}) |", t, prefill_flop(c) / t * 1e-6);
    }
    fmt::print("{}\n", row);
    std::fflush(stdout);
  }
  return 0;
}

int run_csv(DType kv, const std::vector<CsvCase>& cases) {
  auto ops = ops_for(kv);
  fmt::print("kind,batch,q_len,context,heads,kv_heads,head_dim,kv_dtype,us\n");
  for (const CsvCase& c : cases) {
    std::vector<SeqSpec> seqs;
    if (c.kind == "mixed")
      for (int n : c.lens) seqs.push_back({n, n});
    else
      seqs.assign(static_cast<size_t>(c.batch), SeqSpec{c.ctx, c.q_len});
    const double t = run_step(*ops, seqs);
    fmt::print("{},{},{},{},{},{},{},{},{:.2f}\n", c.kind, c.batch, c.q_len, c.ctx, g_heads,
               g_kv_heads, g_head_dim, kv == DType::kF32 ? "fp32" : "bf16", t);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<CsvCase> csv;
  std::vector<int> shape_lens;  // --prefill-shapes
  std::vector<std::pair<int, int>> decode_variants;  // --decode-variants
  DType kv = DType::kBF16;
  {
    std::vector<std::pair<int, int>> prefill, decode, mixed, shapes;
    int context = 2048;
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (i + 1 >= argc) return usage();
      const std::string_view v = argv[++i];
      if (a == "--prefill-csv") {
        if (!parse_list(v, prefill)) return usage();
      } else if (a == "--decode-csv") {
        if (!parse_decode_list(v, decode)) return usage();
      } else if (a == "--decode-variants") {
        if (!parse_decode_list(v, decode_variants)) return usage();
        for (auto& [b, c] : decode_variants)
          if (c == 0) c = 2048;
      } else if (a == "--mixed-csv") {
        if (!parse_list(v, mixed, '+')) return usage();
      } else if (a == "--prefill-shapes") {
        if (!parse_list(v, shapes)) return usage();
        for (const auto& [one, len] : shapes) {
          if (one != 1) return usage();
          shape_lens.push_back(len);
        }
      } else if (a == "--context") {
        context = std::atoi(std::string(v).c_str());
        if (context < 1) return usage();
      } else if (a == "--heads") {
        if (std::sscanf(std::string(v).c_str(), "%d,%d,%d", &g_heads, &g_kv_heads, &g_head_dim) != 3 ||
            g_heads < 1 || g_kv_heads < 1 || g_heads % g_kv_heads != 0 || g_head_dim < 16)
          return usage();
      } else if (a == "--kv-dtype") {
        if (v != "bf16" && v != "fp32") return usage();
        kv = v == "bf16" ? DType::kBF16 : DType::kF32;
      } else {
        return usage();
      }
    }
    for (const auto& [b, len] : prefill) csv.push_back({"prefill", b, len, len, {}});
    if (!mixed.empty()) {
      CsvCase c{"mixed", 0, 0, 0, {}};
      for (const auto& [one, len] : mixed) {
        if (one != 1) return usage();
        c.lens.push_back(len);
        c.batch += 1;
        c.q_len += len;
        c.ctx = std::max(c.ctx, len);
      }
      csv.push_back(c);
    }
    for (const auto& [b, c] : decode) csv.push_back({"decode", b, 1, c > 0 ? c : context, {}});
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_attention_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  if (!shape_lens.empty()) return run_prefill_shapes(shape_lens);
  if (!decode_variants.empty()) return run_decode_variants(decode_variants);
  if (!csv.empty()) return run_csv(kv, csv);
  fmt::print("device: {}\n", cuda_device_description(0));
  auto bf16 = ops_for(DType::kBF16);
  auto fp32 = ops_for(DType::kF32);
  auto packed = ops_for(DType::kBF16, kPacked);  // the packed CTA on decode steps too
  // Copy roofline: bytes read + written by a 1 GiB device-to-device copy.
  double copy_tbs = 0;
  {
    const size_t bytes = size_t(1) << 30;
    Buffer a(*bf16, bytes), b(*bf16, bytes);
    const double t = time_us(*bf16, [&] { bf16->copy(b.data(), a.data(), bytes); });
    copy_tbs = 2.0 * bytes / t * 1e-6;
  }
  fmt::print("device copy: {:.2f} TB/s (read + write)\n\n", copy_tbs);
  std::string table =
      "| decode batch | context | bf16 KV (tensor cores) µs | TB/s | % of copy | packed schedule "
      "µs | decode ÷ packed speed | fp32 KV (CUDA cores) µs | TB/s | speed-up |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (int batch : {1, 8, 64, 256}) {
    for (int ctx : {512, 2048, 8192, 32768}) {
      const double tb = run_case(*bf16, batch, ctx, 1);
      const double tp = run_case(*packed, batch, ctx, 1);
      const double tf = run_case(*fp32, batch, ctx, 1);
      const double elems = 2.0 * batch * ctx * g_kv_heads * g_head_dim;
      const std::string row = fmt::format(
          "| {} | {} | {:.1f} | {:.2f} | {:.0f}% | {:.1f} | {:.2f} | {:.1f} | {:.2f} | {:.2f} |\n",
          batch, ctx, tb, elems * 2 / tb * 1e-6, elems * 2 / tb * 1e-6 / copy_tbs * 100, tp,
          tp / tb, tf, elems * 4 / tf * 1e-6, tf / tb);
      fmt::print("{}", row);
      std::fflush(stdout);
      table += row;
    }
  }
  // The decode warps' split placement: same bits.
  std::string rings =
      "| decode batch | context | decode warps µs | a warp a split µs | a warp a row µs |\n"
      "|---|---|---|---|---|\n";
  {
    std::vector<std::unique_ptr<Ops>> by_ring;
    by_ring.push_back(ops_for(DType::kBF16, kDecodeWarps));
    by_ring.push_back(ops_for(DType::kBF16, kDecodeWarps, 1));  // one split per warp
    by_ring.push_back(ops_for(DType::kBF16, kDecodeWarps, 0));  // all of a row's splits in one warp
    for (const auto& [batch, ctx] :
         std::vector<std::pair<int, int>>{{1, 32768}, {8, 8192}, {64, 2048}, {256, 512}, {256, 2048}}) {
      std::string row = fmt::format("| {} | {} |", batch, ctx);
      for (auto& o : by_ring) row += fmt::format(" {:.1f} |", run_case(*o, batch, ctx, 1));
      row += "\n";
      fmt::print("{}", row);
      std::fflush(stdout);
      rings += row;
    }
  }
  std::string prefill =
      "| prefill (causal) | bf16 KV µs | TFLOP/s | fp32 KV µs | TFLOP/s | speed-up |\n"
      "|---|---|---|---|---|---|\n";
  const std::vector<std::vector<int>> cases = {{512}, {2048}, {8192}, {16384}, {512, 2048, 8192, 1000}};
  for (const auto& lens : cases) {
    std::vector<SeqSpec> seqs;
    std::string name;
    for (int n : lens) {
      seqs.push_back({n, n});
      if (!name.empty()) name += '+';
      name += fmt::format("{}", n);
    }
    const double tb = run_step(*bf16, seqs), tf = run_step(*fp32, seqs);
    const double flop = prefill_flop(lens);
    const std::string row = fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.1f} |\n",
                                        name, tb, flop / tb * 1e-6, tf, flop / tf * 1e-6, tf / tb);
    fmt::print("{}", row);
    std::fflush(stdout);
    prefill += row;
  }
  fmt::print("\n{}\n{}\n{}", table, rings, prefill);
  return 0;
}
