// `detllm check`: loads a model (the embedded default without --model) and runs the startup
// self-check (design.md Rule 3, verify/self_check.h) on its backend with its shapes,
// printing one line per check; exit code 0 when every check passed, 1 otherwise. Also defines
// startup_self_check(), the same check as `detllm serve` and `detllm generate` run it.
// `detllm check --proof` instead runs the bounded model checker of the engine
// (verify/model_check/model_check.h: scheduling and the paged, prefix-sharing KV cache preserve
// every row's prefix) and the reduction-order analyzer of the kernels (verify/reduction_order:
// no kernel's reduction order depends on the batch, the query length, chunking, page layout,
// split placement or TP degree), and prints what they proved, within which bounds, and what is
// assumed, or a counterexample.
// Tests: tests/e2e/test_check.py (the command), tests/conformance/self_check_test.cpp (checks),
// tests/model_check (the checker), tests/reduction_order (the analyzer).
#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "kernels/attention_plan.h"
#include "model/bundle.h"
#include "model/fp8_weights.h"
#include "verify/model_check/model_check.h"
#include "verify/reduction_order/checker.h"
#include "verify/self_check.h"

namespace detllm::cli {
namespace {

struct CheckOptions {
  std::string model;
  int block_size = engine::EngineConfig{}.scheduler.kv.block_size;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BackendOptions backend;          // --backend, --numerics, --device
  bool proof = false;              // --proof: the bounded model checker instead
  std::string proof_bound = "ci";  // ci | large
  int proof_events = 0;            // > 0: paths of this many events instead of the bound's
  std::string proof_part = "all";  // all | engine (the model checker) | orders (the analyzer)
};

// `detllm check --proof`: the bounded model checker; exit code 0 when nothing was found.
int run_proof(const CheckOptions& o) {
  bool ok = true;
  if (o.proof_part != "orders") {
    model_check::ModelCheckBounds bounds =
        o.proof_bound == "large" ? model_check::large_bounds() : model_check::ci_bounds();
    if (o.proof_events > 0) bounds.max_events = o.proof_events;
    std::fprintf(stderr, "detllm check --proof: exploring (%s bound)...\n", o.proof_bound.c_str());
    const model_check::ModelCheckResult r = model_check::run_model_check(bounds);
    std::fputs(model_check::format_result(bounds, r).c_str(), stdout);
    ok = ok && r.ok();
  }
  if (o.proof_part != "engine") {
    const reduction_order::AnalyzerBounds bounds = o.proof_bound == "large"
                                                       ? reduction_order::analyzer_large_bounds()
                                                       : reduction_order::analyzer_ci_bounds();
    std::fprintf(stderr, "detllm check --proof: reduction orders (%s bound)...\n",
                 bounds.name.c_str());
    const reduction_order::AnalyzerResult r =
        reduction_order::run_reduction_order_analyzer(bounds, reduction_order::real_schedules());
    if (o.proof_part == "all") std::fputs("\n", stdout);
    std::fputs(reduction_order::format_analyzer_result(bounds, r).c_str(), stdout);
    ok = ok && r.ok();
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

// The CUDA backend's tensor-core attention plans (kernels/attention_plan.h) for the model's heads
// at a few representative steps, on stderr (stdout is the check table). Host logic: printed
// whatever the backend, marked when the backend does not run them.
void print_attention_plans(const ModelConfig& c, int block_size, const kernels::Ops& ops) {
  const int n_rep = c.n_kv_heads > 0 ? c.n_heads / c.n_kv_heads : 0;
  const bool runs = !ops.host_memory() && ops.kv_dtype() == DType::kBF16;
  if (!kernels::attention_tc_supported(c.head_dim, n_rep)) {
    std::fprintf(stderr,
                 "detllm check: attention plans: none (head_dim %d, %d query heads a KV head: the "
                 "CUDA backend runs this model's attention over fp32 KV)\n",
                 c.head_dim, n_rep);
    return;
  }
  std::fprintf(stderr,
               "detllm check: attention plans (CUDA, bf16 KV, blocks of %d; any plan gives the "
               "same bits)%s:\n",
               block_size, runs ? "" : " — not this backend's");
  struct Step {
    const char* kind;
    int batch, tokens_each, context, extra_tokens;  // + one sequence of extra_tokens (mixed)
  };
  const Step steps[] = {{"decode", 1, 1, 512, 0},     {"decode", 1, 1, 8192, 0},
                        {"decode", 8, 1, 2048, 0},    {"decode", 64, 1, 2048, 0},
                        {"decode", 256, 1, 512, 0},   {"prefill", 1, 512, 512, 0},
                        {"prefill", 1, 8192, 8192, 0}, {"mixed", 64, 1, 2048, 512}};
  for (const Step& st : steps) {
    kernels::AttentionStepShape s;
    s.n_heads = c.n_heads;
    s.n_kv_heads = c.n_kv_heads;
    s.head_dim = c.head_dim;
    s.block_size = block_size;
    s.max_blocks = (st.context + block_size - 1) / block_size;
    s.n_seqs = st.batch + (st.extra_tokens > 0 ? 1 : 0);
    s.n_tokens = st.batch * st.tokens_each + st.extra_tokens;
    const std::string what =
        st.extra_tokens > 0
            ? fmt::format("mixed {} x 1 + {} at {}", st.batch, st.extra_tokens, st.context)
            : fmt::format("{} {} x {}", st.kind, st.batch, st.context);
    std::fprintf(stderr, "  %-28s %s\n", what.c_str(),
                 kernels::describe(kernels::plan_attention(s)).c_str());
  }
}

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
  // FP8 projections (an FP8 checkpoint, or --quantization fp8): their GEMMs are checked as FP8.
  const bool fp8 = has_fp8_weights(b.model->weights) || o.backend.quantization == "fp8";
  const std::vector<DType> rows = fp8_weight_dtypes(b.model->weights);
  const SelfCheckOptions opts =
      self_check_options_for(c, o.block_size, fp8, rows.empty() ? DType::kF8E4M3 : rows.front());
  std::fprintf(stderr, "detllm check: %zu checks on %s\n",
               opts.gemms.size() + opts.attention.size() + opts.rmsnorm_dims.size(),
               backend.description.c_str());
  const SelfCheckReport report = run_self_check(*backend.ops, opts);
  std::fputs(report.describe().c_str(), stdout);
  std::fflush(stdout);
  print_attention_plans(c, o.block_size, *backend.ops);
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
      model.ops(), self_check_options_for(model.config(), config.scheduler.kv.block_size,
                                          model.fp8_projections(), model.fp8_projection_rows()));
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
  cmd->add_flag("--proof", o->proof,
                "Instead: run the bounded model checker of the engine (scheduler, paged KV, "
                "prefix cache, verified mode over an abstract hash backend) and the reduction-"
                "order analyzer of the kernels (GEMM, attention, TP: no order depends on the "
                "batch, chunking, pages or placement; z3 for every context length), and print "
                "what is proved, within which bounds, and what is assumed; or the shortest "
                "counterexample (docs/contract.md, \"What is proved\")");
  cmd->add_option("--proof-bound", o->proof_bound, "The checker's bound: ci or large")
      ->check(CLI::IsMember({"ci", "large"}))
      ->capture_default_str();
  cmd->add_option("--proof-part", o->proof_part,
                  "Which proof: all, engine (the model checker) or orders (the analyzer)")
      ->check(CLI::IsMember({"all", "engine", "orders"}))
      ->capture_default_str();
  cmd->add_option("--proof-events", o->proof_events,
                  "Events per explored path (default: the bound's)")
      ->check(CLI::Range(1, 64));
  return {cmd, [o] { return o->proof ? run_proof(*o) : run_check(*o); }};
}

}  // namespace detllm::cli
