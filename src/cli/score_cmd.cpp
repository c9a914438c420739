// `detllm score`: re-scores token sequences (teacher forcing) on one model and backend, with no
// tokenizer and no server: for each sequence the logprob of every token given its prefix (the
// engine's own logprob_of, so the bits equal what generation reports), optionally a greedy
// continuation and the raw fp32 logits of every position. Used for parity checks against
// transformers (scripts/gpu/hf_checkpoint_check.py) and by users who score with token ids.
//   detllm score --model DIR --input seqs.json --output scores.json [--greedy 32]
//                [--logits-dir DIR] [--backend cuda]
// seqs.json: [[token ids], ...]. Load and scoring times go to stderr.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "kernels/sampling/sampler.h"
#include "model/bundle.h"
#include "model/model_loader.h"
#include "model/solo_runner.h"

namespace detllm::cli {
namespace {

struct ScoreOptions {
  std::string model;
  std::string input;
  std::string output;
  std::string logits_dir;
  int greedy = 0;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BackendOptions backend;
};

std::vector<std::vector<int32_t>> read_sequences(const std::string& path, int32_t vocab) {
  std::ifstream in(path);
  check(in.good(), "{}: cannot read the input file", path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  check(!j.is_discarded() && j.is_array() && !j.empty(),
        "{}: the input must be a JSON array of token-id arrays, e.g. [[1, 2, 3]]", path);
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : j) {
    check(s.is_array() && !s.empty(), "{}: sequence {} is not a non-empty array of token ids",
          path, out.size());
    std::vector<int32_t> ids;
    for (const auto& t : s) {
      check(t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab,
            "{}: sequence {} has token {} outside the vocabulary [0, {})", path, out.size(),
            t.dump(), vocab);
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    out.push_back(std::move(ids));
  }
  return out;
}

int run_score(const ScoreOptions& o) {
  using clock = std::chrono::steady_clock;
  // --mode sets the numerics as generate's does; the execution constraints of a mode
  // (padding, verification) are the engine's, and scoring runs one sequence without it.
  const std::optional<DeterminismMode> det_mode = selected_mode(o.backend);
  Backend backend = det_mode ? make_backend(o.backend, mode_info(*det_mode).backend, o.threads)
                             : make_backend(o.backend, parse_numerics_mode(o.backend.numerics),
                                            o.threads);
  const auto t0 = clock::now();
  Progress progress("loading model");
  std::string path = o.model.empty() ? find_default_model() : o.model;
  check(!path.empty(), "no --model given and the default model is not installed");
  ModelBundle bundle;  // no tokenizer: token ids in, logprobs out
  bundle.model = load_model(path, [&](size_t d, size_t t) { progress.update(d, t); });
  const LoadedModel* model = bundle.model.get();
  const auto t_read = clock::now();
  install_backend(bundle, backend);  // a TpGroup with --tensor-parallel
  LlamaModel& llama = bundle.engine_model();
  kernels::Ops* ops = &llama.ops();
  ops->synchronize();
  const auto t_placed = clock::now();
  const ModelConfig& c = model->config;
  progress.finish(fmt::format("{} ({}, {} layers, dim {}, vocab {})", model->name,
                              model_arch_name(c.arch), c.n_layers, c.dim, c.vocab_size));
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::fprintf(stderr, "score: model loaded in %.2f s (read %.2f s, to %s %.2f s)\n",
               secs(t0, t_placed), secs(t0, t_read), std::string(ops->name()).c_str(),
               secs(t_read, t_placed));

  const auto seqs = read_sequences(o.input, c.vocab_size);
  if (!o.logits_dir.empty()) std::filesystem::create_directories(o.logits_dir);
  nlohmann::json results = nlohmann::json::array();
  const auto t_score = clock::now();
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto& ids = seqs[s];
    const int32_t max_tokens = static_cast<int32_t>(ids.size()) + std::max(o.greedy, 0) + 1;
    check(max_tokens <= c.max_position, "sequence {} needs {} positions; the model has {}", s,
          max_tokens, c.max_position);
    SoloRunner runner(llama, max_tokens);
    const std::vector<float> logits = runner.feed(ids, /*all_logits=*/true);
    const size_t v = static_cast<size_t>(c.vocab_size);
    nlohmann::json lp = nlohmann::json::array({nullptr});  // the first token has no prefix
    for (size_t p = 1; p < ids.size(); ++p) {
      lp.push_back(logprob_of(std::span(logits.data() + (p - 1) * v, v), ids[p]));
    }
    if (!o.logits_dir.empty()) {
      const auto file = std::filesystem::path(o.logits_dir) / fmt::format("seq{}.f32", s);
      std::ofstream out(file, std::ios::binary);
      out.write(reinterpret_cast<const char*>(logits.data()),
                static_cast<std::streamsize>(logits.size() * sizeof(float)));
      check(out.good(), "{}: cannot write the logits", file.string());
    }
    std::vector<int32_t> greedy;
    std::vector<float> row(logits.end() - static_cast<std::ptrdiff_t>(v), logits.end());
    for (int g = 0; g < o.greedy; ++g) {
      const auto best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      greedy.push_back(best);
      row = runner.feed(std::span<const int32_t>(&best, 1));
    }
    results.push_back({{"tokens", ids}, {"logprobs", lp}, {"greedy", greedy}});
  }
  std::fprintf(stderr, "score: %zu sequences scored in %.2f s\n", seqs.size(),
               secs(t_score, clock::now()));
  const std::string text = results.dump();
  if (o.output.empty() || o.output == "-") {
    std::printf("%s\n", text.c_str());
  } else {
    std::ofstream out(o.output);
    out << text << "\n";
    check(out.good(), "{}: cannot write the output", o.output);
  }
  return 0;
}

}  // namespace

Command add_score_command(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  CLI::App* cmd = app.add_subcommand(
      "score",
      "Re-score token sequences (teacher forcing): the logprob of every token given its prefix, "
      "with the engine's own logprob bits; optionally a greedy continuation and raw logits");
  cmd->add_option("--model", o->model, "GGUF file or Hugging Face directory (default: the "
                  "embedded model)");
  cmd->add_option("--input", o->input, "JSON file: an array of token-id arrays, [[1, 2, 3], ...]")
      ->required();
  cmd->add_option("--output", o->output, "Where the JSON results go (default: stdout)");
  cmd->add_option("--greedy", o->greedy, "Greedy tokens to generate after each sequence")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--logits-dir", o->logits_dir,
                  "Also write each sequence's fp32 logits (positions x vocab, row-major) to "
                  "DIR/seq<i>.f32");
  cmd->add_option("--threads", o->threads,
                  "CPU threads (--backend cpu; with --tensor-parallel N, shared by the N ranks)")
      ->check(CLI::Range(1, 1024));
  add_backend_options(*cmd, o->backend,
                      "Numerics path: invariant (deterministic kernels) or fast (library kernels)");
  add_tensor_parallel_option(*cmd, o->backend);
  return {cmd, [o] { return run_score(*o); }};
}

}  // namespace detllm::cli
