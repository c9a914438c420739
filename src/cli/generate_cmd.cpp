// `detllm generate PROMPT`: loads a model (the embedded default without --model), runs the
// prompt through the serving engine and streams the text to stdout as it is produced;
// statistics (tokens/s) go to stderr.
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/grammar_setup.h"
#include "cli/penalty_flags.h"
#include "cli/progress.h"
#include "cli/speculative_flags.h"
#include "cli/structured_flags.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/bundle.h"

namespace detllm::cli {
namespace {

struct GenerateOptions {
  std::string prompt;
  std::string model;
  int max_tokens = 128;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  uint64_t seed = 0;
  PenaltyFlags penalties;  // --presence-penalty, --frequency-penalty, ...
  StructuredFlags structured;  // --json-schema, --regex, ...
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool no_special = false;
  bool ignore_eos = false;
  bool print_token_ids = false;
  bool self_check = true;  // the startup self-check (--no-self-check turns it off)
  BackendOptions backend;  // --backend, --numerics, --device
  engine::SpeculativeConfig speculative;  // --speculative-method, --num-speculative-tokens, ...
};

int run_generate(const GenerateOptions& o) {
  // --numerics fast makes the request non-deterministic (the fast path promises nothing), so
  // the one request and the backend run the same mode. The backend first: a missing GPU
  // fails before the (slow) model load.
  // --mode (modes.h) sets numerics and execution constraints together; `fast` makes the
  // request non-deterministic as --numerics fast does.
  const std::optional<DeterminismMode> det_mode = selected_mode(o.backend);
  engine::EngineConfig cfg;
  cfg.speculative = o.speculative;
  if (det_mode) {
    cfg.scheduler.max_seqs = 1;  // one sequence: the padded mode's fixed decode shape is 1 row
    apply_mode(*det_mode, cfg);
  }
  const NumericsMode mode =
      det_mode ? mode_info(*det_mode).backend.numerics : parse_numerics_mode(o.backend.numerics);
  Backend backend = det_mode ? make_backend(o.backend, mode_info(*det_mode).backend, o.threads)
                             : make_backend(o.backend, mode, o.threads);
  Progress progress("loading model");
  ModelBundle b =
      open_model_bundle(o.model, o.threads, [&](size_t d, size_t t) { progress.update(d, t); });
  install_backend(b, backend);
  const ModelConfig& c = b.model->config;
  progress.finish(fmt::format("{} ({}, {} layers, dim {}, vocab {})", b.model->name,
                              model_arch_name(c.arch), c.n_layers, c.dim, c.vocab_size));
  // --speculative-model: on a backend made as the target's.
  const ModelBundle draft = load_draft_model(
      cfg.speculative, *b.tokenizer,
      [&] {
        return det_mode ? make_backend(o.backend, mode_info(*det_mode).backend, o.threads)
                        : make_backend(o.backend, mode, o.threads);
      },
      o.threads);

  engine::Request req;
  req.prompt = b.tokenizer->encode(o.prompt, /*add_special_tokens=*/!o.no_special);
  check(!req.prompt.empty(), "the prompt encodes to no tokens: give some text");
  req.max_tokens = o.max_tokens;
  req.ignore_eos = o.ignore_eos;
  req.sampling.temperature = o.temperature;
  req.sampling.top_p = o.top_p;
  req.sampling.top_k = o.top_k;
  req.sampling.min_p = o.min_p;
  req.sampling.seed = o.seed;
  apply_penalty_flags(o.penalties, req.sampling);
  if (const auto spec = grammar_spec_of(o.structured)) {
    const structured::ConstraintCompileFn compile = make_grammar_compiler(*b.tokenizer, c.vocab_size);
    check(static_cast<bool>(compile),
          "constraining the output needs the grammar engine, and this build of detllm has "
          "none (build with xgrammar: scripts/deps_xgrammar.sh, then scripts/build.sh)");
    req.constraint = compile(*spec);  // a structured::GrammarError names what is wrong
  }

  cfg.policy.default_mode = mode;
  cfg.policy.deterministic_by_default =
      det_mode ? *det_mode != DeterminismMode::kFast : mode == NumericsMode::kInvariant;
  cfg.kv_cache_tokens = static_cast<int32_t>(req.prompt.size()) + o.max_tokens + 16;
  cfg.scheduler.max_tokens_per_step = 512;
  // A failed self-check makes add_request refuse a deterministic request with the reason; a
  // non-deterministic run (--numerics fast) has nothing to verify.
  cfg.policy.self_check =
      o.self_check && cfg.policy.deterministic_by_default && mode == NumericsMode::kInvariant;
  LlamaModel& model = b.engine_model();  // a TpGroup's leader with --tensor-parallel
  cfg.self_check = startup_self_check(model, cfg, "detllm generate");
  engine::Engine eng(model, cfg, b.tokenizer.get(), draft.llama ? &draft.engine_model() : nullptr);

  StreamDecoder decoder(*b.tokenizer, /*skip_special_tokens=*/true);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Clock::time_point t_first;
  int n_generated = 0;
  std::string finish = "?";
  std::vector<int32_t> generated;
  engine::RequestCallbacks cb;
  cb.on_token = [&](const engine::TokenEvent& e) {
    if (n_generated++ == 0) t_first = Clock::now();
    generated.push_back(e.token);
    const std::string piece = decoder.push(e.token);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  cb.on_finish = [&](int32_t, engine::FinishReason r, const engine::Usage&) {
    finish = std::string(engine::finish_reason_name(r));
  };
  eng.add_request(req, cb);
  eng.run_until_idle();
  const auto t1 = Clock::now();
  const std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  if (o.print_token_ids) {
    std::fprintf(stderr, "[detllm] prompt token ids: %s\n",
                 fmt::format("{}", fmt::join(req.prompt, " ")).c_str());
    std::fprintf(stderr, "[detllm] generated token ids: %s\n",
                 fmt::format("{}", fmt::join(generated, " ")).c_str());
  }
  const double prefill_s = std::chrono::duration<double>(t_first - t0).count();
  const double decode_s = std::chrono::duration<double>(t1 - t_first).count();
  const std::string fingerprint = backends::backend_fingerprint(
      backend, b.model->weights_hash, cfg.policy, cfg.policy.deterministic_by_default);
  const std::string tp_note =
      b.tp ? fmt::format(" over {} tensor-parallel ranks", b.tp->degree()) : std::string();
  std::fprintf(stderr,
               "[detllm] prompt %zu tokens, prefill %.1f tok/s (%.0f ms to first token); "
               "generated %d tokens, decode %.1f tok/s; finish: %s; threads %d%s; fingerprint "
               "%s\n",
               req.prompt.size(), n_generated ? req.prompt.size() / prefill_s : 0.0,
               prefill_s * 1e3, n_generated, n_generated > 1 ? (n_generated - 1) / decode_s : 0.0,
               finish.c_str(), o.threads, tp_note.c_str(), fingerprint.c_str());
  if (cfg.speculative.enabled()) {
    const engine::EngineStats& st = eng.stats();
    std::fprintf(stderr,
                 "[detllm] speculative %s: %lld of %lld drafts accepted, %lld steps, %lld "
                 "drafting pauses\n",
                 std::string(engine::speculative_method_name(cfg.speculative.method)).c_str(),
                 static_cast<long long>(st.n_accepted_draft_tokens),
                 static_cast<long long>(st.n_draft_tokens), static_cast<long long>(st.n_steps),
                 static_cast<long long>(st.n_draft_pauses));
  }
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate text from PROMPT and stream it to stdout (statistics go to stderr).\n"
      "Deterministic: the same model, prompt and options (seed included) give the same tokens.");
  cmd->add_option("prompt", o->prompt, "The text to continue")->required();
  cmd->add_option("-m,--model", o->model,
                  "A GGUF file or a Hugging Face directory (config.json + *.safetensors).\n"
                  "Default: the embedded SmolLM2-135M-Instruct installed by scripts/setup.sh");
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Most tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-t,--temperature", o->temperature,
                  "Sampling temperature; 0 = greedy (argmax, lowest token id on ties)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p,
                  "Nucleus sampling: keep the smallest set of tokens whose "
                  "probability reaches P (1 = off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Keep only the K most likely tokens (0 = off)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--min-p", o->min_p,
                  "Keep tokens with probability >= MIN_P x the top probability (0 = off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("-s,--seed", o->seed,
                  "Seed of the per-token Philox streams; same seed, same "
                  "output")
      ->capture_default_str();
  add_penalty_options(*cmd, o->penalties);
  add_structured_options(*cmd, o->structured);
  cmd->add_option("--threads", o->threads,
                  "CPU threads (results do not depend on it; with --tensor-parallel N, shared "
                  "by the N ranks)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_flag("--no-special", o->no_special,
                "Do not add the tokenizer's special tokens (e.g. BOS) to the prompt");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-text token");
  cmd->add_flag("--print-token-ids", o->print_token_ids,
                "Also print the prompt's and the generated token ids to stderr (to compare a\n"
                "run with the same request made elsewhere, e.g. over HTTP)");
  add_backend_options(*cmd, o->backend,
                      "Numerics path: invariant (batch-invariant kernels: a deterministic "
                      "request) or fast (cuda: default cuBLAS GEMM, no guarantee: the request "
                      "is not deterministic). The CPU runs the same kernels for both");
  add_tensor_parallel_option(*cmd, o->backend);
  add_speculative_options(*cmd, o->speculative);
  cmd->add_flag_function(
      "--no-self-check", [o](std::int64_t) { o->self_check = false; },
      "Skip the startup self-check (bit-invariance of the kernels on this "
      "machine, see `detllm check`); the output is then not verified to be "
      "reproducible");
  return {cmd, [o] { return run_generate(*o); }};
}

}  // namespace detllm::cli
