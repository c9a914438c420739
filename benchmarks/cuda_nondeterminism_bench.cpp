// Nondeterminism demonstration (design.md section 3): per determinism mode, ONE greedy prompt
// sent N times to engines under varying load — alone, with 1, 7 or 31 other random requests,
// in other arrival orders and steps, with other prefill chunk sizes — and the number of
// distinct completions (token ids) and the first position where any of them diverges. In
// `fast` mode they are expected to differ on a model where cuBLAS's kernel choice changes with
// M (--model wide); every deterministic mode should give exactly one completion.
//
//   build-cuda/benchmarks/cuda_nondeterminism_bench --model wide            # the demo on the H200
//   build-cuda/benchmarks/cuda_nondeterminism_bench --backend cpu           # the CPU (all modes: 1)
//   options: --modes fast,invariant,bi-naive,padded  --runs N (32)  --prompt-len N (24)
//            --max-new N (48)  --seed S  --wide-layers N  --wide-vocab N  --device D
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "mode_bench_util.h"
#include "verify/guarantee_matrix.h"

using namespace detllm;
using namespace detllm::conformance;

namespace {

struct DemoResult {
  int n_runs = 0;
  int n_distinct = 0;
  int n_distinct_logprobs = 0;  // distinct sequences of the probe's token logprobs (bits)
  int first_divergence = -1;    // -1: all equal
  std::string error;
  double seconds = 0;
};

int run(int argc, char** argv) {
  bench_util::ModeBenchArgs args;
  args.modes = "fast,invariant,bi-naive,padded";
  int n_runs = 32, prompt_len = 24, max_new = 48;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return argv[++i];
    };
    if (args.parse(a, next)) continue;
    if (a == "--runs")
      n_runs = std::stoi(next());
    else if (a == "--prompt-len")
      prompt_len = std::stoi(next());
    else if (a == "--max-new")
      max_new = std::stoi(next());
    else if (a == "--seed")
      seed = std::stoull(next());
    else
      throw std::runtime_error("unknown option " + a + " (see the comment at the top)");
  }
  if (!bench_util::backend_usable(args.backend)) return 2;
  const std::vector<DeterminismMode> modes = bench_util::parse_modes(args.modes);
  const auto model = make_matrix_model(args.model_name, args.wide_layers, args.wide_vocab);
  const int32_t vocab = model->config.vocab_size;

  // The probe: one greedy prompt, no stop token, max_new tokens.
  std::mt19937_64 rng(seed);
  engine::Request probe;
  for (int i = 0; i < prompt_len; ++i) probe.prompt.push_back(static_cast<int32_t>(rng() % vocab));
  probe.max_tokens = max_new;
  probe.ignore_eos = true;
  probe.sampling.temperature = 0.0f;
  probe.deterministic = true;

  // The loads: run r has loads[r % 4] other requests, chunk size chunks[r % 3], its own
  // arrival steps and add order (the probe arrives among them), seeded by r: the same loads
  // in every mode.
  const int loads[] = {0, 1, 7, 31};
  const int32_t chunks[] = {0, 16, 5};
  std::map<DeterminismMode, DemoResult> results;
  for (DeterminismMode mode : modes) {
    DemoResult& res = results[mode];
    const auto t0 = std::chrono::steady_clock::now();
    try {
      Target t = model->target();
      t.policy = policy_for_mode(mode);
      t.policy.validate();  // refuses an inconsistent policy, saying why
      t.make_ops = bench_util::ops_for(args.backend, mode, args.device);
      std::vector<std::vector<int32_t>> completions;
      std::vector<std::vector<uint32_t>> logprob_bits;
      for (int r = 0; r < n_runs; ++r) {
        WorkloadSpec ws;
        ws.n_requests = std::max(1, loads[r % 4]);
        ws.vocab_size = vocab;
        ws.max_prompt = 64;
        ws.max_new_tokens = max_new;
        ws.nondet_share = 0.3;
        std::vector<engine::Request> reqs;
        if (loads[r % 4] > 0) reqs = random_workload(seed * 7919 + r, ws);
        const size_t probe_at = reqs.empty() ? 0 : static_cast<size_t>(r) % (reqs.size() + 1);
        reqs.insert(reqs.begin() + static_cast<ptrdiff_t>(probe_at), probe);
        Execution e;
        e.label = fmt::format("run {}", r);
        e.engine.scheduler.kv.block_size = 16;
        e.engine.kv_cache_tokens = 32768;
        e.engine.scheduler.max_seqs = 64;
        e.engine.scheduler.chunk_size = chunks[r % 3];
        e.engine.scheduler.max_tokens_per_step = chunks[r % 3] == 0 ? 4096 : 64;
        e.check_kv_every_step = false;
        std::mt19937 arr(static_cast<uint32_t>(r));
        for (size_t i = 0; i < reqs.size(); ++i)
          e.arrival.push_back(static_cast<int32_t>(arr() % 6));
        apply_mode(mode, e.engine);
        const auto trace = conformance::run(t, e, reqs).traces.at(probe_at);
        completions.push_back(trace.tokens.at(0));
        std::vector<uint32_t> bits;
        for (float lp : trace.logprobs.at(0)) {
          uint32_t b = 0;
          std::memcpy(&b, &lp, 4);
          bits.push_back(b);
        }
        logprob_bits.push_back(std::move(bits));
      }
      std::sort(logprob_bits.begin(), logprob_bits.end());
      res.n_distinct_logprobs = static_cast<int>(
          std::unique(logprob_bits.begin(), logprob_bits.end()) - logprob_bits.begin());
      std::vector<std::vector<int32_t>> distinct = completions;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      res.n_runs = n_runs;
      res.n_distinct = static_cast<int>(distinct.size());
      for (const auto& c : completions) {
        const auto& ref = completions[0];
        size_t p = 0;
        while (p < std::min(c.size(), ref.size()) && c[p] == ref[p]) ++p;
        if (p < std::max(c.size(), ref.size()) &&
            (res.first_divergence < 0 || static_cast<int>(p) < res.first_divergence)) {
          res.first_divergence = static_cast<int>(p);
        }
      }
    } catch (const std::exception& ex) {
      res.error = ex.what();
    }
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "%-10s %6.1f s  distinct %d of %d%s\n",
                 std::string(determinism_mode_name(mode)).c_str(), res.seconds, res.n_distinct,
                 res.n_runs, res.error.empty() ? "" : (" ERROR " + res.error).c_str());
  }

  std::printf("## Nondeterminism demo: %s\n\n", model->name.c_str());
  std::printf(
      "Backend: %s. Model: %s. One greedy prompt of %d random tokens, %d new tokens "
      "(EOS ignored), sent %d times; run r: %s other random requests (loads 0/1/7/31 "
      "cycled, 30%% non-deterministic, prompts up to 64 tokens), chunk size 0/16/5 "
      "cycled (budget 4096/64), random arrival steps 0-5, the probe at position r mod "
      "(n+1); block size 16, max_seqs 64. Same loads in every mode.\n\n",
      args.backend == "cpu" ? "cpu" : kernels::cuda_device_description(args.device).c_str(),
      model->conditions.c_str(), prompt_len, max_new, n_runs, "n");
  std::printf(
      "| mode | runs | distinct completions | first diverging position | distinct logprob "
      "sequences (bits) |\n|---|---|---|---|---|\n");
  for (DeterminismMode mode : modes) {
    const DemoResult& r = results[mode];
    if (!r.error.empty()) {
      std::printf("| `%s` | — | ERROR: %s | — | — |\n",
                  std::string(determinism_mode_name(mode)).c_str(), r.error.c_str());
      continue;
    }
    std::printf(
        "| `%s` | %d | %d | %s | %d |\n", std::string(determinism_mode_name(mode)).c_str(),
        r.n_runs, r.n_distinct,
        r.first_divergence < 0 ? "— (all equal)" : std::to_string(r.first_divergence).c_str(),
        r.n_distinct_logprobs);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_nondeterminism_bench: %s\n", e.what());
    return 1;
  }
}
