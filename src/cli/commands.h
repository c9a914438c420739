// The detllm subcommands. Each registers its options on a CLI11 app and returns the function
// that runs it (exit code). main.cpp only dispatches.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "engine/engine_config.h"
#include "verify/self_check.h"

namespace detllm {
class LlamaModel;
}
namespace detllm::engine {
class Engine;
}

namespace detllm::cli {

// A registered subcommand: its CLI11 node (parsed() tells whether it was chosen) and its body.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_check_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_bench_command(CLI::App& app);  // bench_cmd.cpp
Command add_score_command(CLI::App& app);  // score_cmd.cpp

// The startup self-check (design.md Rule 3) before an engine is built: runs run_self_check on
// the model's ops with its shapes and the engine's block size, prints one line to stderr
// ("<who>: self-check: 9 checks passed in 0.41 s (cpu)", or the failure and what it means),
// and returns the verdict for EngineConfig::self_check — disabled, without running, when
// config.policy.self_check is off. Defined in check_cmd.cpp.
SelfCheckVerdict startup_self_check(const LlamaModel& model, const engine::EngineConfig& config,
                                    const char* who);

// model.prepare_gemms(max_rows) with progress on stderr (a line before; after it the time and,
// on CUDA, what the plan file gave: plans re-verified, tuned, rejected). startup.cpp.
void prepare_gemms_with_progress(const LlamaModel& model, int32_t max_rows, const char* who);
// engine.warm_up_decode_graphs() with progress on stderr (a bar or milestones, then the count
// of steps and graph captures and the time); nothing printed when decode steps are not padded.
void warm_up_decode_graphs_with_progress(engine::Engine& engine, const char* who);

}  // namespace detllm::cli
