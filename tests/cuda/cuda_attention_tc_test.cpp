// The tensor-core attention over a bf16 KV cache (attention_tc.cu):
//  - against a double-precision reference on the same bf16-rounded q, k, v, within a stated
//    bound (P is rounded to bf16 once before P·V: relative 2^-9, so |Δ| ≤ 2^-9 · max|v|; we
//    allow 2^-8 · max|v| = 2^-8 for v in [-1, 1]);
//  - bit for bit, in ONE test per head shape: whole prefill = decode one token at a time =
//    chunks of 1, 7, 64 and 333 = mixed batches in shuffled token order = shuffled/fragmented
//    pages = a prefix-cache hit (the second half computed on the first half's shared blocks),
//    under the planner's choice and with each kernel it can choose forced on every step it can
//    run (kernels/attention_plan.h: the decode warps, the shared-split CTA, the warpgroup CTA,
//    the packed CTA, the packed streams), each in every split placement (in the row's CTA or
//    warp, a CTA or warp per split + the merge kernel, chosen);
//  - rows of 67 and 130 splits (LongRowsMergeToTheSameBits): the scan merge kernel, the in-CTA
//    merge and the decode warps' in-warp merge, bit for bit;
//  - speculative decoding's windows verified as decode rows (a table row each, sharing the
//    sequence's pages, K/V appended in the same step) give the decode bits, under every kernel;
//  - a negative control: a deliberately layout-dependent variant is caught by the same checks,
//    and on it windows as decode rows keep the decode bits where windows as chunks do not.
// Run: test_cuda --gtest_filter='CudaAttentionTc*' (skips without a GPU).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "conformance/delegating_ops.h"
#include "cuda/attention_negative_control.h"
#include "cuda/cuda_test_util.h"
#include "kernels/attention_plan.h"
#include "kernels/cuda/attention_args.h"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels {
namespace {

using namespace cuda_testing;

constexpr int kLen = 1100;  // five KV splits of 256 (the last partial), tile edges everywhere

constexpr int kDecodeWarps = static_cast<int>(AttentionKernel::kDecodeWarps);
constexpr int kSharedSplit = static_cast<int>(AttentionKernel::kSharedSplit);
constexpr int kWarpgroup = static_cast<int>(AttentionKernel::kWarpgroup);
constexpr int kPacked = static_cast<int>(AttentionKernel::kPacked);
constexpr int kPackedStreams = static_cast<int>(AttentionKernel::kPackedStreams);

// kernel, split_blocks: CudaOptions::attention_kernel / attention_split_blocks (-1 chosen).
std::unique_ptr<Ops> tc_ops(int split_blocks = -1, int kernel = -1) {
  CudaOptions o;
  o.kv_dtype = DType::kBF16;
  o.attention_split_blocks = split_blocks;
  o.attention_kernel = kernel;
  return make_cuda_ops(o);
}

// The CUDA ops with attention over the bf16 cache on the tests' negative control
// (attention_negative_control.h: the packed CTA whose row sums follow the row's place in the
// warp tile), a token a CTA on decode-like steps, 64 / n_rep otherwise, as the packed CTA runs.
class LayoutDependentOps final : public conformance::DelegatingOps {
 public:
  LayoutDependentOps() : DelegatingOps(tc_ops(), "cuda-layout-dependent") {}
  // The CUDA ops whose memory holds the test's arrays and cache (DelegatingOps forwards the
  // ops, not the memory functions).
  Ops& memory() { return *inner_; }
  void attention(const float* q, const KvCacheLayer& cache, const StepBatch& batch,
                 int32_t n_heads, float scale, float* out) override {
    ASSERT_EQ(cache.dtype, DType::kBF16);
    cuda::AttentionArgs a = cuda::attention_step_args(q, cache, batch, n_heads, scale, out);
    a.k_bf16 = static_cast<const uint16_t*>(cache.k);
    a.v_bf16 = static_cast<const uint16_t*>(cache.v);
    const int n_rep = n_heads / cache.n_kv_heads;
    const int tq = batch.n_tokens <= 2 * batch.n_seqs ? 1 : 64 / n_rep;
    inner_->synchronize();  // the KV append and the uploads, on the inner ops' stream
    ASSERT_EQ(cuda_testing::launch_layout_dependent_attention(a, tq), cudaSuccess);
  }
};

std::vector<std::vector<Chunk>> chunked(int seq, int begin, int len, int chunk) {
  std::vector<std::vector<Chunk>> steps;
  for (int start = begin; start < len; start += chunk)
    steps.push_back({Chunk{seq, start, std::min(chunk, len - start)}});
  return steps;
}

// Rows of positions [begin, end) that differ in any bit; the first one is described in `what`.
int count_different_rows(const DevicePagedWorld& a, int seq_a, const DevicePagedWorld& b, int seq_b,
                         int begin, int end, std::string* what) {
  int bad = 0;
  for (int p = begin; p < end; ++p) {
    const int64_t d =
        first_bit_difference(a.output(seq_a, p).data(), b.output(seq_b, p).data(), a.row_floats());
    if (d < 0) continue;
    if (bad++ == 0 && what != nullptr)
      *what = fmt::format("position {} element {}: {} vs {}", p, d, a.output(seq_a, p)[d],
                          b.output(seq_b, p)[d]);
  }
  return bad;
}

void expect_same_rows(const DevicePagedWorld& a, int seq_a, const DevicePagedWorld& b, int seq_b,
                      int begin, int end) {
  std::string what;
  const int bad = count_different_rows(a, seq_a, b, seq_b, begin, end, &what);
  EXPECT_EQ(bad, 0) << bad << " rows differ; first: " << what;
}

// Every schedule of the test against `base` (seq 0: content 42, kLen positions).
void run_schedules(Ops& ops, const AttnShape& shape, const DevicePagedWorld& base) {
  {
    SCOPED_TRACE("whole prefill, shuffled pages");
    DevicePagedWorld w(ops, shape, {42}, {kLen}, 11);
    w.step({{0, 0, kLen}});
    expect_same_rows(base, 0, w, 0, 0, kLen);
  }
  for (int chunk : {1, 7, 64, 333}) {
    SCOPED_TRACE(::testing::Message() << "chunks of " << chunk << " (1 = decode)");
    DevicePagedWorld w(ops, shape, {42}, {kLen}, 100 + chunk);
    for (const auto& step : chunked(0, 0, kLen, chunk)) w.step(step);
    expect_same_rows(base, 0, w, 0, 0, kLen);
  }
  {
    SCOPED_TRACE("mixed batches, shuffled token order, fragmented pages");
    const std::vector<int> lens = {50, kLen, 9, 600, 300};
    DevicePagedWorld w(ops, shape, {7, 42, 8, 9, 10}, lens, 1234);
    std::mt19937 rng(99);
    std::vector<int> done(lens.size(), 0);
    const int chunk_of[5] = {13, 37, 1, 80, 1};  // prefill chunks beside decode rows
    for (bool more = true; more;) {
      more = false;
      std::vector<Chunk> step;
      for (size_t s = 0; s < lens.size(); ++s) {
        const int count = std::min(chunk_of[s], lens[s] - done[s]);
        if (count > 0) step.push_back({static_cast<int>(s), done[s], count});
        done[s] += count;
        more = more || done[s] < lens[s];
      }
      int n_tok = 0;
      for (const Chunk& c : step) n_tok += c.count;
      std::vector<int> order(n_tok);
      for (int i = 0; i < n_tok; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      w.step(step, order);
    }
    expect_same_rows(base, 0, w, 1, 0, kLen);
  }
  {
    // Speculative decoding's verify step with windows as decode rows (docs/speculative.md):
    // the last committed token and k drafts, each on a block-table row of its own (a copy of
    // the sequence's: the rows share its pages), at consecutive positions whose K/V is appended
    // in the same step, beside another sequence's decode row. Windows of 1 … 9 rows (k = 0 … 8).
    SCOPED_TRACE("windows of drafts as decode rows, a table row each");
    DevicePagedWorld w(ops, shape, {42, 9}, {kLen, kLen}, 55);
    const int from = kLen - 45;
    for (const auto& step : chunked(0, 0, from, 333)) w.step(step);
    w.step({{1, 0, from}});
    int p0 = from, p1 = from;
    for (int k = 0; p0 < kLen; k = (k + 1) % 9) {
      std::vector<Chunk> step{{0, p0, std::min(k + 1, kLen - p0)}, {1, p1++, 1}};
      p0 += step[0].count;
      w.step_rows(step);
    }
    expect_same_rows(base, 0, w, 0, 0, kLen);
  }
  {
    SCOPED_TRACE("prefix-cache hit: the second copy computes only past the shared blocks");
    DevicePagedWorld w(ops, shape, {42, 42}, {kLen, kLen}, 77);
    const int shared_blocks = (kLen / 2) / shape.block_size;
    const int from = shared_blocks * shape.block_size;
    for (const auto& step : chunked(0, 0, kLen, 333)) w.step(step);
    w.share_prefix(1, 0, shared_blocks);
    for (const auto& step : chunked(1, from, kLen, 64)) w.step(step);
    expect_same_rows(base, 0, w, 1, from, kLen);
  }
}

class CudaAttentionTc : public ::testing::TestWithParam<AttnShape> {};

TEST_P(CudaAttentionTc, MatchesReferenceWithinBound) {
  DETLLM_SKIP_WITHOUT_GPU();
  const AttnShape shape = GetParam();
  auto ops = tc_ops();
  const std::vector<int> lens = {700, 33};
  DevicePagedWorld w(*ops, shape, {3, 4}, lens, 5);
  w.step({{0, 0, 700}, {1, 0, 33}});
  const int n_rep = shape.n_heads / shape.n_kv_heads;
  const double bound = std::ldexp(1.0, -8);  // max|v| = 1
  double worst = 0;
  int bad = 0;
  for (int s = 0; s < 2; ++s) {
    std::vector<std::vector<float>> k(lens[s]), v(lens[s]);
    for (int p = 0; p < lens[s]; ++p) {
      k[p] = round_bf16(w.content(s, p, 1));
      v[p] = round_bf16(w.content(s, p, 2));
    }
    for (int p = 0; p < lens[s]; ++p) {
      const std::vector<float> q = round_bf16(w.content(s, p, 0));
      const std::vector<float>& got = w.output(s, p);
      for (int h = 0; h < shape.n_heads; ++h) {
        const int kvh = h / n_rep, hd = shape.head_dim;
        std::vector<double> sc(p + 1);
        double mx = -INFINITY;
        for (int j = 0; j <= p; ++j) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(q[h * hd + d]) * double(k[j][kvh * hd + d]);
          sc[j] = dot * w.scale();
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int d = 0; d < hd; ++d) {
          double o = 0;
          for (int j = 0; j <= p; ++j) o += sc[j] * double(v[j][kvh * hd + d]);
          const double err = std::fabs(o / sum - double(got[h * hd + d]));
          worst = std::max(worst, err);
          if (!(err <= bound) && ++bad <= 3)
            ADD_FAILURE() << "seq " << s << " pos " << p << " head " << h << " dim " << d
                          << ": gpu " << got[h * hd + d] << " ref " << o / sum;
        }
      }
    }
  }
  std::printf("  [tc attention h%d kv%d d%d] max |gpu - ref| = %.3g (bound %.3g)\n", shape.n_heads,
              shape.n_kv_heads, shape.head_dim, worst, bound);
  EXPECT_EQ(bad, 0);
}

TEST_P(CudaAttentionTc, BitIdenticalAcrossSchedulesLayoutsSplitsAndCtaShapes) {
  DETLLM_SKIP_WITHOUT_GPU();
  const AttnShape shape = GetParam();
  auto base_ops = tc_ops();
  DevicePagedWorld base(*base_ops, shape, {42}, {kLen}, 0);
  base.step({{0, 0, kLen}});
  // Each kernel forced on every step it can run (-1: the planner's choice), in every split
  // placement; a kernel that cannot run the heads runs the chosen plan.
  for (int kernel = -1; kernel < kAttentionKernels; ++kernel)
    for (int split_blocks : {-1, 0, 1}) {
      SCOPED_TRACE(::testing::Message()
                   << "kernel "
                   << (kernel < 0 ? "chosen"
                                  : attention_kernel_name(static_cast<AttentionKernel>(kernel)))
                   << ", split placement " << split_blocks);
      auto ops = tc_ops(split_blocks, kernel);
      run_schedules(*ops, shape, base);
    }
}

// Rows of many splits: 67 and 130 at the last position (the merge kernel's scan keeps four
// 32-split chunks in a ring: 67 ends in the third chunk, 130 wraps to the first). Every merge
// gives the in-warp merge's bits: the merge kernel after a CTA per split and after the decode
// warps' splits, the in-CTA merge, and the chosen plan.
// Prefill in chunks of 512 (rows past position 8192 have more than 32 splits too), then three
// decode steps.
TEST_P(CudaAttentionTc, LongRowsMergeToTheSameBits) {
  DETLLM_SKIP_WITHOUT_GPU();
  const AttnShape shape = GetParam();
  // positions 0 … n − 1: 67 and 130 splits of 256 at the last
  for (const int n_pos : {16900, 33100}) {
    SCOPED_TRACE(fmt::format("{} positions", n_pos));
    const auto run = [&](Ops& ops, uint32_t layout_seed) {
      auto w = std::make_unique<DevicePagedWorld>(ops, shape, std::vector<int>{42},
                                                  std::vector<int>{n_pos}, layout_seed);
      for (const auto& step : chunked(0, 0, n_pos - 3, 512)) w->step(step);
      for (const auto& step : chunked(0, n_pos - 3, n_pos, 1)) w->step(step);
      return w;
    };
    // The decode warps on every step, each running every split of its rows and merging them
    // itself (merge_row): the base.
    auto base_ops = tc_ops(0, kDecodeWarps);
    const auto base = run(*base_ops, 0);
    struct Variant {
      const char* name;
      std::unique_ptr<Ops> ops;
    };
    Variant variants[] = {
        {"a packed CTA per split, the merge kernel", tc_ops(1, kPacked)},
        {"a shared-split CTA per split, the merge kernel", tc_ops(1, kSharedSplit)},
        {"the row's splits in its packed CTA (in-CTA merge)", tc_ops(0, kPacked)},
        {"the decode warps a split each, the merge kernel", tc_ops(1, kDecodeWarps)},
        {"chosen", tc_ops()}};
    for (Variant& v : variants) {
      SCOPED_TRACE(v.name);
      const auto w = run(*v.ops, 21);
      expect_same_rows(*base, 0, *w, 0, 0, n_pos);
    }
  }
}

// The same checks catch a kernel whose row sum follows the row's place in the warp tile.
TEST_P(CudaAttentionTc, NegativeControlLayoutDependentIsCaught) {
  DETLLM_SKIP_WITHOUT_GPU();
  const AttnShape shape = GetParam();
  if ((shape.n_heads / shape.n_kv_heads) % 16 == 0)
    GTEST_SKIP() << "n_rep " << shape.n_heads / shape.n_kv_heads
                 << ": every packing puts query head h at tile row h % 16, so no schedule moves "
                    "a row to another place in the tile — there is no layout to depend on";
  // The whole prefill against chunks of 7 (test-only code: the library has no such kernel).
  LayoutDependentOps ops;
  DevicePagedWorld base(ops.memory(), shape, {42}, {kLen}, 0);
  base.step(ops, {{0, 0, kLen}});
  DevicePagedWorld w(ops.memory(), shape, {42}, {kLen}, 3);
  for (const auto& step : chunked(0, 0, kLen, 7)) w.step(ops, step);
  if (HasFatalFailure()) return;
  EXPECT_GT(count_different_rows(base, 0, w, 0, 0, kLen, nullptr), 0)
      << "the layout-dependent variant went unnoticed: the check cannot fail";
}

// Windows of drafts as decode rows are what keeps a verify row a decode row where attention
// depends on the row's place (the layout-dependent kernel above: a chunk of k + 1 rows of one
// sequence packs them into a warp tile; decode rows run a token a CTA, as decoding does). The
// decode-row windows must give the one-token decode steps' bits on it; windows verified as
// chunks must not (the control: the check can fail).
TEST_P(CudaAttentionTc, NegativeControlWindowRowsHoldWhereChunksDoNot) {
  DETLLM_SKIP_WITHOUT_GPU();
  const AttnShape shape = GetParam();
  if ((shape.n_heads / shape.n_kv_heads) % 16 == 0)
    GTEST_SKIP() << "n_rep " << shape.n_heads / shape.n_kv_heads
                 << ": no schedule moves a row to another place in the tile";
  LayoutDependentOps ops;
  const int from = 300, to = 360, window = 5;
  auto world = [&](int how) {  // 0: decode steps, 1: windows as decode rows, 2: as chunks
    auto w = std::make_unique<DevicePagedWorld>(ops.memory(), shape, std::vector<int>{42},
                                                std::vector<int>{to}, 3);
    w->step(ops, {{0, 0, from}});
    for (int p = from; p < to; p += how == 0 ? 1 : window) {
      const Chunk c{0, p, how == 0 ? 1 : std::min(window, to - p)};
      if (how == 1)
        w->step_rows(ops, {c});
      else
        w->step(ops, {c});
    }
    return w;
  };
  const auto decode = world(0), rows = world(1), chunks = world(2);
  if (HasFatalFailure()) return;
  std::string what;
  EXPECT_EQ(count_different_rows(*decode, 0, *rows, 0, from, to, &what), 0)
      << "windows as decode rows differ from decoding: " << what;
  EXPECT_GT(count_different_rows(*decode, 0, *chunks, 0, from, to, nullptr), 0)
      << "windows verified as chunks went unnoticed on the layout-dependent kernel: the check "
         "cannot fail";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTc,
                         ::testing::Values(AttnShape{32, 8, 128, 16},  // Llama-3.1-8B
                                           AttnShape{9, 3, 64, 16},    // SmolLM2-135M
                                           AttnShape{4, 2, 16, 4},     // tiny-llama
                                           AttnShape{8, 2, 32, 5},     // odd block size
                                           // n_rep 8: every column of the transposed decode
                                           // warp; n_rep 16: past it (half tiles instead)
                                           AttnShape{16, 2, 64, 16}, AttnShape{32, 2, 32, 16},
                                           // head_dim 128 with a block size that is not a
                                           // power of two: the copies' shuffle path
                                           AttnShape{8, 2, 128, 24}),
                         [](const auto& info) {
                           const AttnShape& s = info.param;
                           return fmt::format("h{}kv{}d{}bs{}", s.n_heads, s.n_kv_heads, s.head_dim,
                                              s.block_size);
                         });

}  // namespace
}  // namespace detllm::kernels
