// `detllm check`: loads a model (the embedded default without --model) and runs the startup
// self-check (design.md Rule 3, verify/self_check.h) on its backend with its shapes,
// printing one line per check; exit code 0 when every check passed, 1 otherwise. Also defines
// startup_self_check(), the same check as `detllm serve` and `detllm generate` run it.
// Tests: tests/e2e/test_check.py (the command), tests/conformance/self_check_test.cpp (checks).
#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "model/bundle.h"
#include "verify/self_check.h"

namespace detllm::cli {
namespace {

struct CheckOptions {
  std::string model;
  int block_size = engine::EngineConfig{}.scheduler.kv.block_size;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BackendOptions backend;  // --backend, --numerics, --device
};

int run_check(const CheckOptions& o) {
  // The backend first: a missing GPU fails before the model load. Only the model's shapes are
  // needed (the checks run on random data), so its weights stay on the host.
  Backend backend = make_backend(o.backend, parse_numerics_mode(o.backend.numerics), o.threads);
  Progress progress("loading model");
  ModelBundle b =
      open_model_bundle(o.model, o.threads, [&](size_t d, size_t t) { progress.update(d, t); });
  const ModelConfig& c = b.model->config;
  progress.finish(fmt::format("{} ({} layers, dim {}, vocab {})", b.model->name, c.n_layers, c.dim,
                              c.vocab_size));
  const SelfCheckOptions opts = self_check_options_for(c, o.block_size);
  std::fprintf(stderr, "detllm check: %zu checks on %s\n",
               opts.gemms.size() + opts.attention.size() + opts.rmsnorm_dims.size(),
               backend.description.c_str());
  const SelfCheckReport report = run_self_check(*backend.ops, opts);
  std::fputs(report.describe().c_str(), stdout);
  std::fflush(stdout);
  if (!report.passed()) {
    std::fprintf(stderr,
                 "detllm check: the kernels are not batch-invariant on this machine: "
                 "`detllm serve` and `detllm generate` will refuse deterministic requests. "
                 "Compare the GPU driver and library versions with a machine where this check "
                 "passes.\n");
  }
  return report.passed() ? 0 : 1;
}

}  // namespace

SelfCheckVerdict startup_self_check(const LlamaModel& model, const engine::EngineConfig& config,
                                    const char* who) {
  if (!config.policy.self_check) {
    std::fprintf(stderr,
                 "%s: self-check: off: deterministic results are not verified on this machine\n",
                 who);
    return SelfCheckVerdict::disabled();
  }
  std::fprintf(stderr, "%s: self-check: running (kernels' bits across M, chunks, pages)\n", who);
  std::fflush(stderr);
  const SelfCheckReport report = run_self_check(
      model.ops(), self_check_options_for(model.config(), config.scheduler.kv.block_size));
  std::fprintf(stderr, "%s: self-check: %s\n", who, report.summary().c_str());
  if (!report.passed()) {
    std::fprintf(stderr,
                 "%s: deterministic requests will be refused (non-deterministic ones are "
                 "served); run `detllm check` for the full report\n",
                 who);
  }
  std::fflush(stderr);
  return SelfCheckVerdict::of(report);
}

Command add_check_command(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Run the determinism self-check and print one line per check; exit code 0 when all "
      "pass, 1 otherwise.\n"
      "On random data with the model's shapes, the backend's kernels must give the same fp32 "
      "bits for every output row however it is computed: GEMM at several batch sizes M, a row "
      "alone, rows moved; attention whole, token by token, in chunks, on shuffled KV pages, "
      "mixed with another sequence; RMSNorm at several row counts. `detllm serve` and "
      "`detllm generate` run the same check at start and refuse deterministic requests when "
      "it fails (e.g. after a driver or library change).");
  cmd->add_option("-m,--model", o->model,
                  "A GGUF file or a Hugging Face directory (its shapes are checked). Default: "
                  "the embedded SmolLM2-135M-Instruct");
  cmd->add_option("--block-size", o->block_size,
                  "KV cache block size to check attention with (use the server's)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (results do not depend on it)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  add_backend_options(*cmd, o->backend,
                      "Numerics path to check: invariant (what deterministic requests run) or "
                      "fast (cuda: default cuBLAS GEMM; expected to fail, a demonstration)");
  return {cmd, [o] { return run_check(*o); }};
}

}  // namespace detllm::cli
