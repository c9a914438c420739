// detllm: command-line entry point. Dispatches to the subcommands in cli/*_cmd.cpp; turns
// detllm::Error into a one-line message and exit code 1.
#include <cstdio>
#include <vector>

#include "cli/commands.h"
#include "cli/data_parallel.h"
#include "core/error.h"
#include "core/version.h"

int main(int argc, char** argv) {
  CLI::App app{
      "detllm — an LLM inference engine whose deterministic requests are bitwise "
      "reproducible"};
  app.set_version_flag("--version", std::string(detllm::engine_version()));
  app.require_subcommand(1);
  const std::vector<detllm::cli::Command> commands = {
      detllm::cli::add_generate_command(app),
      detllm::cli::add_serve_command(app),
      detllm::cli::add_check_command(app),
      detllm::cli::add_bench_command(app),
      detllm::cli::add_score_command(app),
  };
  detllm::cli::set_raw_arguments(argc, argv);  // --data-parallel-size passes them on
  CLI11_PARSE(app, argc, argv);
  try {
    for (const auto& c : commands) {
      if (c.app->parsed()) return c.run();
    }
    return 1;
  } catch (const detllm::Error& e) {
    std::fprintf(stderr, "detllm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detllm: internal error: %s\n", e.what());
    return 2;
  }
}
