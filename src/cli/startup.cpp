// Startup preparation with progress on stderr (commands.h): the GEMM plans and the decode
// graphs before serving.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "backends/backends.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "engine/engine.h"
#include "model/llama_model.h"

namespace detllm::cli {

void prepare_gemms_with_progress(const LlamaModel& model, int32_t max_rows, const char* who) {
  const bool device = !model.ops().host_memory();
  if (device) {
    std::fprintf(stderr, "%s: GEMM plans: preparing for steps of up to %d tokens\n", who,
                 max_rows);
    std::fflush(stderr);
  }
  const auto t0 = std::chrono::steady_clock::now();
  model.prepare_gemms(max_rows);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string summary = backends::gemm_plan_summary(model.ops());
  if (device || !summary.empty())
    std::fprintf(stderr, "%s: GEMM plans ready in %.1f s%s%s\n", who, s,
                 summary.empty() ? "" : ": ", summary.c_str());
  std::fflush(stderr);
}

void warm_up_decode_graphs_with_progress(engine::Engine& engine, const char* who) {
  Progress progress(std::string(who) + ": decode graph warm-up");
  const DecodeWarmupResult r =
      engine.warm_up_decode_graphs([&](size_t done, size_t total) { progress.update(done, total); });
  if (r.steps == 0) return;  // decode steps are not padded here: nothing to capture
  progress.finish(fmt::format("{} padded decode steps, {} graphs captured", r.steps, r.captures));
}

}  // namespace detllm::cli
