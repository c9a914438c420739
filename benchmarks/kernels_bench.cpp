// Kernel benchmark (a program, not a test): CPU matmul GFLOP/s and weight bandwidth at the
// SmolLM2-135M shapes, and attention tokens/s, as ratios to the memory copy bandwidth measured
// in the same run; GGUF block weights against fp32. Run:
// build/benchmarks/kernels_bench [--quick] [--only=matmul|quant|attention].
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace {

using detllm::ThreadPool;
using namespace detllm::kernels;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds used by the whole process (all threads), including memory stalls but not time
// the OS gave to other processes: on a shared machine a cleaner figure for 1-thread runs.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall = 0.0;  // seconds per call, wall clock
  double cpu = 0.0;   // seconds per call, process CPU time
};

// Runs fn until at least min_seconds have passed (and at least twice); returns per-call times.
template <typename Fn>
Timing time_per_call(Fn&& fn, double min_seconds) {
  fn();  // warm-up
  int calls = 0;
  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  double elapsed = 0.0;
  do {
    fn();
    ++calls;
    elapsed = seconds_since(t0);
  } while (elapsed < min_seconds || calls < 2);
  return Timing{elapsed / calls, (process_cpu_seconds() - c0) / calls};
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// memcpy of a buffer much larger than any cache, split over n_threads: GB/s of (read + write).
double copy_bandwidth(int n_threads, double min_seconds) {
  const size_t bytes = size_t{512} << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  ThreadPool pool(n_threads);
  const double s =
      time_per_call(
          [&] {
            pool.parallel_for(static_cast<int64_t>(bytes >> 20), [&](int64_t b, int64_t e) {
              std::memcpy(dst.data() + (b << 20), src.data() + (b << 20), (e - b) << 20);
            });
          },
          min_seconds)
          .wall;
  return 2.0 * bytes / s / 1e9;
}

struct MatmulShape {
  const char* name;
  int k, n;
};

void bench_matmul(const double copy_gbs[3], bool quick) {
  const MatmulShape shapes[] = {{"q/o", 576, 576},
                                {"k/v", 576, 192},
                                {"gate/up", 576, 1536},
                                {"down", 1536, 576},
                                {"lm_head", 576, 49152}};
  const double min_s = quick ? 0.05 : 0.25;
  fmt::print("\n## matmul y(m,N) = x(m,K)·Wᵀ, fp32 weights\n");
  fmt::print("cold = a ring of weight copies (>= 512 MiB) so W streams from DRAM, as in decode;\n");
  fmt::print("hot = the same W every call. GB/s = weight bytes / time; 'vs copy' = cold GB/s ÷\n");
  fmt::print("copy GB/s (read+write) at the same thread count. Wall clock, except the last\n");
  fmt::print(
      "column: cold GFLOP/s by process CPU time, 1-thread rows only (see load average).\n\n");
  fmt::print(
      "| shape (K→N) | m | thr | hot GFLOP/s | cold GFLOP/s | cold W GB/s | vs copy | "
      "cold GFLOP/s (cpu time) |\n");
  fmt::print("|---|---|---|---|---|---|---|---|\n");
  for (const MatmulShape& s : shapes) {
    const size_t w_floats = static_cast<size_t>(s.n) * s.k;
    const size_t ring = std::max<size_t>(2, (size_t{512} << 20) / (w_floats * 4) + 1);
    std::vector<std::vector<float>> ws(ring);
    for (size_t r = 0; r < ring; ++r)
      ws[r] = random_floats(w_floats, 100 + static_cast<uint32_t>(r));
    for (int m : {1, 8, 64, 256}) {
      const auto x = random_floats(static_cast<size_t>(m) * s.k, 7);
      std::vector<float> y(static_cast<size_t>(m) * s.n);
      for (int threads : {1, 2}) {
        auto ops = make_cpu_ops(threads);
        const WeightMatrix hot{ws[0].data(), detllm::DType::kF32, s.n, s.k};
        const double t_hot =
            time_per_call([&] { ops->matmul(x.data(), m, hot, nullptr, y.data()); }, min_s).wall;
        size_t next = 0;
        const Timing cold = time_per_call(
            [&] {
              const WeightMatrix w{ws[next].data(), detllm::DType::kF32, s.n, s.k};
              next = (next + 1) % ring;
              ops->matmul(x.data(), m, w, nullptr, y.data());
            },
            min_s);
        const double flop = 2.0 * m * s.n * s.k;
        const double w_gbs = w_floats * 4.0 / cold.wall / 1e9;
        const std::string by_cpu =
            threads == 1 ? fmt::format("{:.1f}", flop / cold.cpu / 1e9) : "–";
        fmt::print("| {} {}→{} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {} |\n", s.name, s.k,
                   s.n, m, threads, flop / t_hot / 1e9, flop / cold.wall / 1e9, w_gbs,
                   w_gbs / copy_gbs[threads], by_cpu);
        std::fflush(stdout);
      }
    }
  }
}

// Attention at SmolLM2 geometry (9 q heads, 3 kv heads, head_dim 64, blocks of 16).
void bench_attention(bool quick) {
  const int n_heads = 9, n_kv = 3, hd = 64, bs = 16;
  const double min_s = quick ? 0.05 : 0.25;
  struct Case {
    const char* name;
    int n_seqs, context, q_per_seq;  // each sequence: q_per_seq tokens ending at `context`
  };
  const Case cases[] = {{"prefill 512 (one call)", 1, 512, 512},
                        {"decode, 1 seq @ 2048", 1, 2048, 1},
                        {"decode, 16 seqs @ 512", 16, 512, 1},
                        {"chunked prefill 64 @ 1024", 1, 1024, 64}};
  fmt::print("\n## attention, 9 heads / 3 kv heads, head_dim 64, block 16 (KV already cached)\n\n");
  fmt::print("| case | thr | tokens/s | KV GB/s read | tokens/s (cpu time, 1 thread) |\n");
  fmt::print("|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    const int blocks_per_seq = (c.context + bs - 1) / bs;
    const int n_blocks = c.n_seqs * blocks_per_seq;
    std::vector<float> k = random_floats(static_cast<size_t>(n_blocks) * bs * n_kv * hd, 1);
    std::vector<float> v = random_floats(k.size(), 2);
    const KvCacheLayer cache{k.data(), v.data(), n_blocks, bs, n_kv, hd};
    std::vector<int32_t> tables(n_blocks);
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), std::mt19937(3));
    std::vector<int32_t> positions, seqs, slots;
    for (int s = 0; s < c.n_seqs; ++s) {
      for (int i = 0; i < c.q_per_seq; ++i) {
        const int p = c.context - c.q_per_seq + i;
        positions.push_back(p);
        seqs.push_back(s);
        slots.push_back(tables[s * blocks_per_seq + p / bs] * bs + p % bs);
      }
    }
    const int n_tok = static_cast<int>(positions.size());
    const StepBatch batch{n_tok,    positions.data(), seqs.data(),  slots.data(),
                          c.n_seqs, blocks_per_seq,   tables.data()};
    const auto q = random_floats(static_cast<size_t>(n_tok) * n_heads * hd, 4);
    std::vector<float> out(q.size());
    double kv_bytes = 0.0;  // K and V rows each (token, kv head) row reads
    for (int p : positions) kv_bytes += 2.0 * (p + 1) * n_kv * hd * 4;
    for (int threads : {1, 2}) {
      auto ops = make_cpu_ops(threads);
      const Timing t = time_per_call(
          [&] { ops->attention(q.data(), cache, batch, n_heads, 0.125f, out.data()); }, min_s);
      const std::string by_cpu = threads == 1 ? fmt::format("{:.0f}", n_tok / t.cpu) : "–";
      fmt::print("| {} | {} | {:.0f} | {:.1f} | {} |\n", c.name, threads, n_tok / t.wall,
                 kv_bytes / t.wall / 1e9, by_cpu);
      std::fflush(stdout);
    }
  }
}

// Random blocks of type t (rows × cols), every f16 scale/min set to 0.01 so values stay finite.
std::vector<uint8_t> random_blocks(detllm::DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(static_cast<size_t>(rows * detllm::dtype_row_bytes(t, cols)));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  const uint16_t h = 0x211f;  // 0.01 in f16
  const int64_t bb = detllm::dtype_block_bytes(t);
  for (size_t off = 0; off < b.size(); off += bb) {
    uint8_t* blk = b.data() + off;
    const bool k6 = t == detllm::DType::kQ6_K;
    std::memcpy(blk + (k6 ? 208 : 0), &h, 2);
    if (t == detllm::DType::kQ4_1 || t == detllm::DType::kQ4_K) std::memcpy(blk + 2, &h, 2);
  }
  return b;
}

// Weights kept in GGUF block types against fp32 weights, same shapes, same run, weights
// streamed from DRAM (a ring of copies): the time ratio fp32 ÷ block (> 1: the block type is
// faster). 1 thread, process CPU time. Both give the same bits (tests/kernels/quant_matmul_test).
void bench_quant(bool quick) {
  using detllm::DType;
  // SmolLM2-135M's shapes (K = 576 is not whole k-quant blocks of 256: '–') and one of
  // Llama-8B's (K = 4096).
  const MatmulShape shapes[] = {{"q/o", 576, 576},       {"gate/up", 576, 1536},
                                {"down", 1536, 576},     {"lm_head", 576, 49152},
                                {"8B o", 4096, 4096}};
  const double min_s = quick ? 0.05 : 0.25;
  fmt::print("\n## matmul with block (GGUF) weights vs fp32 weights, 1 thread, cold W\n\n");
  fmt::print("| shape (K→N) | m | fp32 ms | q4_1 ms | q8_0 ms | q4_0 ms | q4_k ms | q6_k ms | "
             "fp32 ÷ q4_1 | fp32 ÷ q8_0 |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
  auto ops = make_cpu_ops(1);
  for (const MatmulShape& s : shapes) {
    for (int m : {1, 8, 32, 128}) {
      if (quick && m > 32) continue;
      const auto x = random_floats(static_cast<size_t>(m) * s.k, 7);
      std::vector<float> y(static_cast<size_t>(m) * s.n);
      auto time_type = [&](DType t) {
        if (s.k % detllm::dtype_block_elems(t) != 0) return -1.0;  // rows not whole blocks
        const size_t bytes = static_cast<size_t>(s.n) * detllm::dtype_row_bytes(t, s.k);
        const size_t ring = std::max<size_t>(2, (size_t{256} << 20) / bytes + 1);
        std::vector<std::vector<uint8_t>> ws(ring);
        for (size_t r = 0; r < ring; ++r) {
          if (t == DType::kF32) {
            const auto f = random_floats(static_cast<size_t>(s.n) * s.k, 100 + r);
            ws[r].resize(bytes);
            std::memcpy(ws[r].data(), f.data(), bytes);
          } else {
            ws[r] = random_blocks(t, s.n, s.k, 100 + static_cast<uint32_t>(r));
          }
        }
        size_t next = 0;
        return time_per_call(
                   [&] {
                     const WeightMatrix w{ws[next].data(), t, s.n, s.k};
                     next = (next + 1) % ring;
                     ops->matmul(x.data(), m, w, nullptr, y.data());
                   },
                   min_s)
            .cpu;
      };
      const double f32 = time_type(DType::kF32);
      const double q41 = time_type(DType::kQ4_1), q80 = time_type(DType::kQ8_0);
      const double q40 = time_type(DType::kQ4_0), q4k = time_type(DType::kQ4_K);
      const double q6k = time_type(DType::kQ6_K);
      auto ms = [](double t) { return t < 0 ? std::string("–") : fmt::format("{:.3f}", t * 1e3); };
      fmt::print("| {} {}→{} | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {:.2f} |\n", s.name,
                 s.k, s.n, m, ms(f32), ms(q41), ms(q80), ms(q40), ms(q4k), ms(q6k), f32 / q41,
                 f32 / q80);
    }
  }
}

// The scalar reference at one shape, to show what the SIMD kernel buys.
void bench_vs_ref(bool quick) {
  const int m = 64, k = 576, n = 576;
  const auto x = random_floats(static_cast<size_t>(m) * k, 1);
  const auto wd = random_floats(static_cast<size_t>(n) * k, 2);
  const WeightMatrix w{wd.data(), detllm::DType::kF32, n, k};
  std::vector<float> y(static_cast<size_t>(m) * n);
  auto ref = make_ref_ops();
  auto cpu = make_cpu_ops(1);
  const double min_s = quick ? 0.05 : 0.25;
  const double t_ref =
      time_per_call([&] { ref->matmul(x.data(), m, w, nullptr, y.data()); }, min_s).cpu;
  const double t_cpu =
      time_per_call([&] { cpu->matmul(x.data(), m, w, nullptr, y.data()); }, min_s).cpu;
  fmt::print(
      "\nmatmul 576→576, m 64, 1 thread, by CPU time: ref {:.2f} GFLOP/s, cpu {:.1f} GFLOP/s "
      "({:.0f}×)\n",
      2.0 * m * n * k / t_ref / 1e9, 2.0 * m * n * k / t_cpu / 1e9, t_ref / t_cpu);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;  // "", "matmul", "quant" or "attention"
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg.rfind("--only=", 0) == 0) {
      only = arg.substr(7);
    } else {
      fmt::print(stderr, "usage: kernels_bench [--quick] [--only=matmul|quant|attention]\n");
      return 2;
    }
  }
  double load[3] = {0.0, 0.0, 0.0};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1.0;
    std::fclose(f);
  }
  fmt::print("# detllm kernels_bench (CPU backend, {} hardware threads, build arch {})\n",
             std::thread::hardware_concurrency(), DETLLM_CPU_ARCH);
  fmt::print(
      "load average at start: {:.2f} (other processes share these cores: figures are\n"
      "only as clean as that number is low)\n",
      load[0]);
  double copy_gbs[3] = {0.0, 0.0, 0.0};
  if (only.empty() || only == "matmul") {
    for (int t : {1, 2}) {
      copy_gbs[t] = copy_bandwidth(t, quick ? 0.2 : 0.5);
      fmt::print("memcpy 512 MiB, {} thread(s): {:.1f} GB/s (read + write)\n", t, copy_gbs[t]);
    }
    bench_vs_ref(quick);
    bench_matmul(copy_gbs, quick);
  }
  if (only.empty() || only == "quant") bench_quant(quick);
  if (only.empty() || only == "attention") bench_attention(quick);
  return 0;
}
