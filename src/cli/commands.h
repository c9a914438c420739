// The detllm subcommands. Each registers its options on a CLI11 app and returns the function
// that runs it (exit code). main.cpp only dispatches.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace detllm::cli {

// A registered subcommand: its CLI11 node (parsed() tells whether it was chosen) and its body.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_generate_command(CLI::App& app);
Command add_serve_command(CLI::App& app);

}  // namespace detllm::cli
