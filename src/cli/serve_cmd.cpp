// `detllm serve`: an OpenAI-compatible HTTP server over the engine. Loads the model (the
// embedded default without --model), starts the engine thread and the HTTP server, and on
// SIGTERM/SIGINT stops taking requests, drains those in flight (bounded) and exits cleanly.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/backend.h"
#include "cli/grammar_setup.h"
#include "cli/commands.h"
#include "cli/data_parallel.h"
#include "cli/progress.h"
#include "cli/speculative_flags.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/version.h"
#include "model/bundle.h"
#include "model/fp8_weights.h"
#include "model/kv_storage.h"
#include "server/chat_parsers.h"
#include "server/chat_prompt.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/request_builder.h"
#include "server/server_context.h"
#include "server/weight_place.h"
#include "server/weight_sync.h"
#if DETLLM_HAVE_NCCL
#include "server/nccl/nccl_link.h"
#endif

namespace detllm::cli {
namespace {

struct ServeOptions {
  std::string model;
  std::vector<std::string> served_names;
  server::ServerOptions server;
  engine::EngineConfig engine;
  bool prefix_cache = true;
  bool deterministic_default = true;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BackendOptions backend;              // --backend, --numerics, --device, --kv-dtype
  bool kv_cache_tokens_given = false;  // --kv-cache-tokens: a fixed pool, not sized from memory
  bool max_seqs_given = false;  // --max-seqs: else engine::default_max_seqs for the backend
  bool graph_warmup = true;  // --no-graph-warmup: capture decode graphs on first use instead
  // --weight-transfer: the weights are held as host fp32 (GGUF blocks widened at load: the
  // same logits) so vLLM's weight-transfer endpoints can write them (server/weight_sync.h).
  bool weight_transfer = false;
  DataParallelOptions data_parallel;  // --data-parallel-size N > 1: replicas on Ray instead
};

// Waits for SIGTERM/SIGINT (blocked in every thread, taken here with sigtimedwait), then
// drains: new requests get 503, in-flight ones may finish for up to drain_timeout_s, the rest
// are aborted, and the HTTP server stops.
void wait_and_drain(server::ServerContext& ctx, server::HttpServer& http,
                    const std::atomic<bool>& serving) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  const timespec tick{0, 200'000'000};
  int sig = -1;
  while (serving.load()) {
    sig = sigtimedwait(&set, nullptr, &tick);
    if (sig > 0) break;
  }
  if (!serving.load()) return;
  std::fprintf(stderr, "detllm serve: %s received: draining (up to %d s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", ctx.options.drain_timeout_s);
  ctx.draining = true;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(ctx.options.drain_timeout_s);
  auto idle = [&] { return ctx.loop->n_tickets() == 0 && ctx.metrics.http_in_flight() == 0; };
  while (!idle() && Clock::now() < deadline) {
    // A second signal cuts the drain short.
    if (sigtimedwait(&set, nullptr, &tick) > 0) break;
  }
  if (!idle()) {
    std::fprintf(stderr, "detllm serve: aborting %d unfinished request(s)\n",
                 ctx.loop->n_tickets());
    ctx.loop->cancel_all();
    const auto grace = Clock::now() + std::chrono::seconds(2);
    while (!idle() && Clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  http.stop();
}

int run_serve(ServeOptions& o) {
  // Before any thread starts: the signals go to the drain thread only, and a client that
  // closes its socket must not kill the process with SIGPIPE.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Every connection is a file descriptor: allow as many as the hard limit permits.
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  {
    // Check the options before the (slow) model load; the model's names come after it.
    server::ServerOptions check_first = o.server;
    check_first.model_names = {"-"};
    check_first.validate();
  }
  // --numerics: the mode of the requests that are not deterministic (the backend is built
  // with the deterministic requests' numerics and switched per step). The backend first: a
  // missing GPU fails before the (slow) model load.
  // --mode (modes.h) instead: one mode for every request, with its execution constraints.
  const std::optional<DeterminismMode> det_mode = selected_mode(o.backend);
  if (!o.max_seqs_given)  // before apply_mode: the padded mode pads decode steps to it
    o.engine.scheduler.max_seqs = engine::default_max_seqs(o.backend.backend == "cuda");
  if (det_mode) apply_mode(*det_mode, o.engine);
  if (!det_mode) o.engine.policy.default_mode = parse_numerics_mode(o.backend.numerics);
  Backend backend = det_mode
                        ? make_backend(o.backend, mode_info(*det_mode).backend, o.threads)
                        : make_backend(o.backend, o.engine.policy.deterministic_mode, o.threads);
  if (o.weight_transfer) {
    check(o.backend.tensor_parallel == 0, "--weight-transfer with --tensor-parallel is not "
          "supported yet (the ranks hold slices of the weights); drop one of them");
  }
  Progress progress("loading model");
  ModelBundle b =
      open_model_bundle(o.model, o.threads, [&](size_t d, size_t t) { progress.update(d, t); });
  if (o.weight_transfer) {
    // Written in place by /finish_weight_update: every block type widened to fp32 before the
    // backend's forward takes pointers into the weights (as the Python facade does). A device
    // backend places them (bf16 matrices) and gets each update uploaded in place.
    check(o.backend.backend == "cpu" || !b.model->config.moe.active(), "--weight-transfer on "
          "--backend {}: a mixture-of-experts model's experts are placed fused on the device, "
          "and that write path is not built; use the CPU backend", o.backend.backend);
    // FP8 projections are codes and scales: an update would mean quantizing the trainer's
    // weights here, so they are refused rather than widened (which would serve another class).
    check(!has_fp8_weights(b.model->weights) && o.backend.quantization != "fp8",
          "--weight-transfer: this model's projections are FP8 ({}), and updating them would "
          "mean quantizing the new weights here, which is not supported: for RL, serve the bf16 "
          "checkpoint without --quantization fp8",
          has_fp8_weights(b.model->weights) ? fp8_class_name(b.model->weights)
                                            : std::string("--quantization fp8"));
    b.llama.reset();
    dequantize_weights(b.model->weights);
  }
  install_backend(b, backend);
  progress.finish(b.model->name);
  // --speculative-model: on a backend made as the target's, before the KV pool is sized.
  const ModelBundle draft = load_draft_model(
      o.engine.speculative, *b.tokenizer,
      [&] {
        return det_mode ? make_backend(o.backend, mode_info(*det_mode).backend, o.threads)
                        : make_backend(o.backend, o.engine.policy.deterministic_mode, o.threads);
      },
      o.threads);

  o.engine.scheduler.kv.enable_prefix_cache = o.prefix_cache;
  o.engine.policy.deterministic_by_default = o.deterministic_default;
  // GEMM plans for every step size now (CUDA: verified cuBLASLt plans, from the plan file
  // where it has them), not on first use; then the self-check runs on the plans that serve.
  LlamaModel& model = b.engine_model();  // a TpGroup's leader with --tensor-parallel
  kernels::Ops& ops = model.ops();
  prepare_gemms_with_progress(model, o.engine.scheduler.max_tokens_per_step, "detllm serve");
  o.engine.self_check = startup_self_check(model, o.engine, "detllm serve");
  if (!o.kv_cache_tokens_given && o.engine.scheduler.kv.n_blocks == 0) {
    // Device memory: the pool takes gpu_memory_fraction of what weights and plans left free.
    if (const size_t free = ops.device_memory_free(); free > 0) {
      o.engine.kv_cache_tokens = KvStorage::tokens_for_memory(b.kv_memory_config(), ops.kv_dtype(),
                                                              free, o.engine.gpu_memory_fraction,
                                                              o.engine.scheduler.kv.block_size);
      std::fprintf(stderr, "detllm serve: KV pool %d tokens (%s) = %.2f of %.1f GiB free\n",
                   o.engine.kv_cache_tokens, std::string(dtype_name(ops.kv_dtype())).c_str(),
                   o.engine.gpu_memory_fraction, static_cast<double>(free) / (1 << 30));
    }
  }
  server::EngineLoop loop(
      model, o.engine, b.tokenizer.get(),
      [&](engine::Engine& e) {
        if (o.graph_warmup) warm_up_decode_graphs_with_progress(e, "detllm serve");
      },
      draft.llama ? &draft.engine_model() : nullptr);
  const engine::EngineConfig& cfg = loop.config();

  server::ServerContext ctx;
  ctx.options = o.server;
  // The names a request's "model" may give: --served-model-name's (else the file or directory
  // name), and always "default", so clients written for the default model keep working.
  ctx.options.model_names = o.served_names;
  if (ctx.options.model_names.empty()) ctx.options.model_names.push_back(b.model->name);
  if (std::find(ctx.options.model_names.begin(), ctx.options.model_names.end(), "default") ==
      ctx.options.model_names.end()) {
    ctx.options.model_names.push_back("default");
  }
  ctx.options.validate();
  ctx.tokenizer = b.tokenizer.get();
  ctx.loop = &loop;
  ctx.vocab_size = b.model->config.vocab_size;
  ctx.n_experts_used = b.model->config.moe.active() ? b.model->config.moe.n_experts_used : 0;
  ctx.max_model_len = cfg.max_model_len;
  ctx.deterministic_by_default = cfg.policy.deterministic_by_default;
  ctx.mode = cfg.policy.mode;
  ctx.fingerprint_deterministic =
      backends::backend_fingerprint(backend, b.model->weights_hash, cfg.policy, true);
  ctx.fingerprint_fields = fingerprint_fields(
      backends::backend_fingerprint_inputs(backend, b.model->weights_hash, cfg.policy, true));
  ctx.fingerprint_other =
      backends::backend_fingerprint(backend, b.model->weights_hash, cfg.policy, false);
  ctx.policy_description = cfg.policy.describe();
  ctx.backend_description = backend.description;
  {
    auto initial = std::make_shared<server::WeightIdentity>();
    initial->fingerprint_deterministic = ctx.fingerprint_deterministic;
    initial->fingerprint_other = ctx.fingerprint_other;
    loop.set_identity(std::move(initial));
  }
  std::unique_ptr<server::WeightSync> weight_sync;
  if (o.weight_transfer) {
    // After an update the fingerprint's weight identity is the trainer's version keyed by the
    // loaded file's hash (as api::LlmSession::update_weights): hashing the weights at every
    // training step would cost seconds, so the trainer vouches for the version.
    const uint64_t file_hash = b.model->weights_hash;
    const DeterminismPolicy policy = cfg.policy;
    server::NcclLinkFactory nccl;
#if DETLLM_HAVE_NCCL
    nccl = server::nccl_link_factory();
#endif
    weight_sync = std::make_unique<server::WeightSync>(
        loop, b.model->config, b.model->weights,
        [&backend, file_hash, policy](const std::string& v) {
          const uint64_t h =
              hash_bytes(std::as_bytes(std::span(v.data(), v.size())), file_hash).lo;
          server::WeightIdentity id;
          id.version = v;
          id.fingerprint_deterministic = backends::backend_fingerprint(backend, h, policy, true);
          id.fingerprint_other = backends::backend_fingerprint(backend, h, policy, false);
          return id;
        },
        std::move(nccl), o.backend.device,
        b.llama && b.ops ? server::place_on_device(*b.llama, *b.ops, b.model->weights)
                         : server::WeightSync::PlaceFn{});
    ctx.weight_sync = weight_sync.get();
  } else {
    ctx.weight_sync_refusal = "start detllm serve with --weight-transfer";
  }
  ctx.self_check_status = std::string(self_check_state_name(cfg.self_check.state));
  ctx.started_at = server::unix_now();

  std::unique_ptr<server::ChatPrompt> chat;
  try {
    chat = server::ChatPrompt::from_tokenizer(*b.tokenizer);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "detllm serve: warning: the model's chat template does not load (%s); "
                 "/v1/chat/completions is disabled\n",
                 e.what());
  }
  ctx.chat = chat.get();
  ctx.compile_grammar = make_grammar_compiler(*b.tokenizer, b.model->config.vocab_size);
  server::configure_chat_parsers(ctx);
  if (ctx.chat != nullptr) {
    std::fprintf(stderr, "detllm serve: tool-call parser %s%s, reasoning parser %s\n",
                 std::string(server::tool_parser_name(ctx.tool_parser)).c_str(),
                 ctx.options.tool_call_parser == "auto" ? " (auto: from the chat template)" : "",
                 ctx.options.reasoning_parser.c_str());
  }

  server::HttpServer http(ctx);
  const int port = http.bind();
  const std::string tp_note =
      b.tp ? fmt::format(" over {} tensor-parallel ranks (canonical chunks: o_proj {}, "
                         "down_proj {})",
                         b.tp->degree(), b.tp->chunks().o, b.tp->chunks().ffn)
           : "";
  std::fprintf(stderr,
               "detllm serve: model %s (%s), context %d, KV %d blocks x %d, fingerprint %s, "
               "%d engine threads%s, %d HTTP worker threads%s\n",
               ctx.model_name().c_str(), o.model.empty() ? "default" : o.model.c_str(),
               ctx.max_model_len, cfg.scheduler.kv.n_blocks, cfg.scheduler.kv.block_size,
               ctx.fingerprint_deterministic.c_str(), o.threads, tp_note.c_str(),
               ctx.options.http_threads, ctx.options.api_key.empty() ? "" : ", API key required");
  std::fprintf(stderr, "detllm serve: listening on http://%s:%d\n", ctx.options.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> serving{true};
  std::thread drainer([&] { wait_and_drain(ctx, http, serving); });
  http.serve();
  serving = false;
  drainer.join();
  loop.stop();
  std::fprintf(stderr, "detllm serve: stopped\n");
  return 0;
}

// The model, its served name, where to listen and the API key.
void add_identity_options(CLI::App& cmd, const std::shared_ptr<ServeOptions>& o) {
  server::ServerOptions& s = o->server;
  cmd.add_option("-m,--model", o->model,
                 "A GGUF file or a Hugging Face directory. Default: the embedded "
                 "SmolLM2-135M-Instruct (also accepted as model name 'default')");
  cmd.add_option("--served-model-name", o->served_names,
                 "Model names accepted in a request's \"model\" (one or more, as vLLM); the first "
                 "is the one /v1/models and /health report. Default: the file or directory name. "
                 "\"default\" is always accepted too; a response's \"model\" echoes the name "
                 "the request used");
  cmd.add_option("--host", s.host, "Address to listen on")->capture_default_str();
  cmd.add_option("--port", s.port, "Port to listen on (0 = any free port, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd.add_option("--api-key", s.api_key,
                 "Require 'Authorization: Bearer KEY' on every endpoint but /health "
                 "(or set DETLLM_API_KEY, which keeps the key out of the process list)")
      ->envname("DETLLM_API_KEY");
}

// The HTTP server's limits and timeouts.
void add_limit_options(CLI::App& cmd, const std::shared_ptr<ServeOptions>& o) {
  server::ServerOptions& s = o->server;
  cmd.add_option("--max-body-bytes", s.limits.max_body_bytes, "Largest request body (413 above)")
      ->capture_default_str();
  cmd.add_option("--max-prompt-tokens", s.limits.max_prompt_tokens,
                 "Longest prompt in tokens (0 = the model's context)")
      ->capture_default_str();
  cmd.add_option("--max-tokens-limit", s.limits.max_tokens,
                 "Largest max_tokens a request may ask for")
      ->capture_default_str();
  cmd.add_option("--max-n", s.limits.max_n, "Largest n (samples per prompt)")
      ->capture_default_str();
  cmd.add_option("--max-prompts", s.limits.max_prompts,
                 "Most prompts in one /v1/completions request")
      ->capture_default_str();
  cmd.add_option("--http-threads", s.http_threads,
                 "Worker threads for request handlers (parse, tokenize, admission); "
                 "connections and streams hold no thread")
      ->capture_default_str();
  cmd.add_option("--keep-alive-timeout", s.keep_alive_timeout_s,
                 "Seconds an idle keep-alive connection is kept open")
      ->capture_default_str();
  cmd.add_option("--header-timeout", s.header_timeout_s,
                 "Seconds a request's header may take to arrive (408 after)")
      ->capture_default_str();
  cmd.add_option("--request-timeout", s.request_timeout_s,
                 "Seconds a request's body may take to arrive after its header (408 after)")
      ->capture_default_str();
  cmd.add_option("--write-timeout", s.write_timeout_s,
                 "Seconds a client may accept no response bytes before it is cut off (its "
                 "request aborted)")
      ->capture_default_str();
  cmd.add_option("--max-connections", s.max_connections,
                 "Open connections at most; further ones are closed at once")
      ->capture_default_str();
  cmd.add_option("--cors-origin", s.cors_origins,
                 "Allow browser calls from this origin (repeat for several; * = any). "
                 "Default: no CORS");
  cmd.add_option("--drain-timeout", s.drain_timeout_s,
                 "On SIGTERM, seconds to let in-flight requests finish before aborting them")
      ->capture_default_str();
  cmd.add_flag("--log-requests", s.log_requests, "Log one line per request to stderr");
}

// Chat output parsers: tool calls and reasoning (docs/server.md, "Tool calling and reasoning").
void add_chat_options(CLI::App& cmd, const std::shared_ptr<ServeOptions>& o) {
  server::ServerOptions& s = o->server;
  cmd.add_option("--tool-call-parser", s.tool_call_parser,
                 "How tool calls are read from a chat output when the request gives tools: "
                 "llama3_json (Llama 3.1/3.2 JSON), hermes (<tool_call> blocks: Qwen2.5, Qwen3, "
                 "Hermes), mistral ([TOOL_CALLS] + JSON list), none (never), or auto (from "
                 "the chat template's markers; none when it shows no tool format)")
      ->check(CLI::IsMember({"auto", "none", "llama3_json", "hermes", "mistral"}))
      ->capture_default_str();
  cmd.add_option("--reasoning-parser", s.reasoning_parser,
                 "Split <think>...</think> reasoning into message.reasoning_content: "
                 "deepseek_r1 (reasoning from the start of the output up to </think>), qwen3 "
                 "(only when the output starts with <think>), or none")
      ->check(CLI::IsMember({"none", "deepseek_r1", "qwen3"}))
      ->capture_default_str();
}

// The verified mode's window and group options (only with --mode verified: run_serve_command).
struct VerifyOptionFlags {
  CLI::Option* window = nullptr;
  CLI::Option* group_tokens = nullptr;
  CLI::Option* group_max_requests = nullptr;
  bool any() const {
    return window->count() + group_tokens->count() + group_max_requests->count() > 0;
  }
};

// The engine: KV pool, scheduler limits, context, the verified mode's windows and groups.
VerifyOptionFlags add_engine_options(CLI::App& cmd, const std::shared_ptr<ServeOptions>& o) {
  engine::EngineConfig& e = o->engine;
  cmd.add_option_function<int32_t>(
         "--kv-cache-tokens",
         [o](int32_t n) {
           o->engine.kv_cache_tokens = n;
           o->kv_cache_tokens_given = true;
         },
         "KV cache capacity in tokens (default on cuda: sized by --gpu-memory-fraction; "
         "cpu: 8192)")
      ->check(CLI::Range(1, 1 << 26));
  cmd.add_option("--gpu-memory-fraction", e.gpu_memory_fraction,
                 "cuda: share of the device memory free after loading that the KV pool takes "
                 "when --kv-cache-tokens is not given")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd.add_option("--block-size", e.scheduler.kv.block_size, "Tokens per KV cache block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd.add_option("--max-tokens-per-step", e.scheduler.max_tokens_per_step,
                 "Token budget of one engine step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option_function<int32_t>(
         "--max-seqs",
         [o](int32_t n) {
           o->engine.scheduler.max_seqs = n;
           o->max_seqs_given = true;
         },
         "Sequences per step and running at once (default: 512 on cuda, 256 on cpu)")
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--chunk-size", e.scheduler.chunk_size,
                 "Prefill chunk limit in tokens (0 = whole prompt within the step budget)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--max-model-len", e.max_model_len,
                 "Longest prompt + output in tokens (0 = the model's context)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  add_speculative_options(cmd, e.speculative);
  CLI::Option* vw = cmd.add_option("--verify-window", e.verify.window,
                                   "--mode verified: candidate tokens per verification window")
                        ->check(CLI::Range(1, 1 << 16))
                        ->capture_default_str();
  CLI::Option* vg =
      cmd.add_option("--verify-group-tokens", e.verify.group_tokens,
                     "--mode verified: recomputed rows per verification group (docs/perf.md "
                     "measures 64-512)")
          ->check(CLI::Range(2, 1 << 20))
          ->capture_default_str();
  CLI::Option* vr = cmd.add_option("--verify-group-max-requests", e.verify.group_max_requests,
                                   "--mode verified: windows per verification group at most")
                        ->check(CLI::Range(1, 1 << 16))
                        ->capture_default_str();
  return {vw, vg, vr};
}

// How requests run: prefix cache, threads, the default determinism, the backend, the startup
// warm-up and self-check.
void add_run_options(CLI::App& cmd, const std::shared_ptr<ServeOptions>& o) {
  cmd.add_option("--prefix-cache", o->prefix_cache,
                 "Reuse the KV of shared prompt prefixes "
                 "(true|false; results are the same either way)")
      ->capture_default_str();
  cmd.add_option("--threads", o->threads,
                 "CPU threads of the engine (results do not depend "
                 "on it; with --tensor-parallel N, shared by the N ranks)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd.add_option("--deterministic-default", o->deterministic_default,
                 "Whether a request that does not set 'deterministic' is deterministic "
                 "(true|false)")
      ->capture_default_str();
  add_backend_options(cmd, o->backend,
                      "Numerics path of the requests that are not deterministic (deterministic "
                      "ones always run invariant): invariant, or fast (no guarantee; cuda: "
                      "default cuBLAS GEMMs in every step that holds no deterministic request; "
                      "the CPU runs the same kernels for both)");
  add_tensor_parallel_option(cmd, o->backend);
  add_data_parallel_options(cmd, o->data_parallel);
  cmd.add_flag("--weight-transfer", o->weight_transfer,
               "Take new weights from a trainer through vLLM's endpoints "
               "(/init_weight_transfer_engine, /start_weight_update, /update_weights, "
               "/finish_weight_update; docs/server.md) over safetensors files, shared memory "
               "or NCCL (TRL's VLLMClient.init_communicator): the weights are held as fp32 on "
               "the host (GGUF blocks widened at load; the same logits), and a CUDA backend "
               "gets each update uploaded in place. No tensor parallelism");
  cmd.add_flag_function(
      "--no-graph-warmup", [o](std::int64_t) { o->graph_warmup = false; },
      "Do not capture every decode shape's CUDA graph before serving (row buckets x block-table "
      "widths, shortest contexts first); each is then captured in the first decode step that "
      "needs it. Changes no bit");
  cmd.add_flag_function(
      "--no-self-check", [o](std::int64_t) { o->engine.policy.self_check = false; },
      "Skip the startup self-check (bit-invariance of the kernels on this "
      "machine, see `detllm check`); deterministic requests are then served "
      "unverified");
}

int run_serve_command(ServeOptions& o, const VerifyOptionFlags& verify) {
  if (o.data_parallel.size > 1) run_data_parallel(o.data_parallel);
  if (verify.any()) {
    check(o.backend.mode == "verified",
          "--verify-window, --verify-group-tokens and --verify-group-max-requests "
          "set the verified mode's windows: add --mode verified");
    engine::VerifyConfig& v = o.engine.verify;
    v.set_group_max_requests(v.group_max_requests);
    v.validate();
  }
  return run_serve(o);
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve the model over an OpenAI-compatible HTTP API (/v1/completions, "
      "/v1/chat/completions, /v1/models, /health, /metrics, /tokenize, /detokenize).\n"
      "Deterministic requests replay bit for bit: responses carry system_fingerprint and the "
      "seed used. See docs/server.md.");
  add_identity_options(*cmd, o);
  add_limit_options(*cmd, o);
  add_chat_options(*cmd, o);
  const VerifyOptionFlags verify = add_engine_options(*cmd, o);
  add_run_options(*cmd, o);
  return {cmd, [o, verify] { return run_serve_command(*o, verify); }};
}

}  // namespace detllm::cli
