// detllm bench results as JSON and markdown (report.h).
#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iterator>

#include "determinism/modes.h"
#include "model/step_padding.h"

namespace detllm::bench {
namespace {

nlohmann::json latency_json(const LatencySummary& s) {
  return {{"n", s.n}, {"mean", s.mean}, {"p50", s.p50}, {"p99", s.p99}};
}

nlohmann::json class_json(const ClassLatency& c) {
  return {{"ttft", latency_json(c.ttft_ms)},
          {"tpot", latency_json(c.tpot_ms)},
          {"e2e", latency_json(c.e2e_ms)}};
}

// Output of a shell command (first line), "" on any failure.
std::string command_line_output(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {};
  std::array<char, 256> buf{};
  std::string out;
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  const int rc = pclose(p);
  if (rc != 0) return {};
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The same (offline, det_share) or (rate, det_share) run of another mode, if any.
const RunResult* matching_run(const ModeReport& m, const RunResult& r) {
  for (const RunResult& x : m.runs) {
    if (x.rate == r.rate && x.det_share == r.det_share) return &x;
  }
  return nullptr;
}

const ModeReport* find_mode(const BenchReport& rep, const std::string& name) {
  for (const ModeReport& m : rep.modes)
    if (m.mode == name) return &m;
  return nullptr;
}

// out tok/s of r ÷ that of the same run in mode `ref`; negative when there is none.
double ratio_vs(const ModeReport* ref, const RunResult& r) {
  if (ref == nullptr) return -1.0;
  const RunResult* x = matching_run(*ref, r);
  if (x == nullptr || x->output_tokens_per_s <= 0.0) return -1.0;
  return r.output_tokens_per_s / x->output_tokens_per_s;
}

std::string ratio_cell(double r) {
  return r < 0.0 ? std::string("–") : fmt::format("{:.3f}", r);
}

std::string share_cell(double s) {
  return fmt::format("{:g}", s);
}

// "3: 15.56–16.11" (repetitions: fastest–slowest duration); "1" for a single run.
// The run column of the per-run tables: its arrival rate, or "offline".
std::string arrival_cell(const RunResult& r) {
  return r.online() ? fmt::format("{:g} req/s", r.rate) : std::string("offline");
}

// Whether any run of any mode satisfies pred (the optional tables print only then).
template <typename Pred>
bool any_run(const BenchReport& rep, Pred pred) {
  for (const ModeReport& m : rep.modes)
    for (const RunResult& r : m.runs)
      if (pred(r)) return true;
  return false;
}

std::string repeat_cell(const RunResult& r) {
  const std::vector<double>& d = r.repeat_durations_s;
  if (d.empty()) return "1";
  const auto [lo, hi] = std::minmax_element(d.begin(), d.end());
  return fmt::format("{}: {:.3f}–{:.3f}", d.size(), *lo, *hi);
}

}  // namespace

nlohmann::json verify_config_json(const engine::VerifyConfig& v) {
  return {{"window", v.window},
          {"group_tokens", v.group_tokens},
          {"group_min_requests", v.group_min_requests},
          {"group_max_requests", v.group_max_requests},
          {"max_wait_steps", v.max_wait_steps}};
}

nlohmann::json engine_config_json(const engine::EngineConfig& c) {
  const engine::SchedulerConfig& s = c.scheduler;
  nlohmann::json j = {{"max_tokens_per_step", s.max_tokens_per_step},
                      {"max_seqs", s.max_seqs},
                      {"chunk_size", s.chunk_size},
                      {"det_isolated_prefill", mode_info(c.policy.mode).isolate_prefill},
                      {"kv_block_size", s.kv.block_size},
                      {"kv_blocks", s.kv.n_blocks},
                      {"kv_cache_tokens", s.kv.capacity_tokens()},
                      {"prefix_cache", s.kv.enable_prefix_cache},
                      {"max_model_len", c.max_model_len},
                      {"cuda_graphs", graph_mode_name(c.cuda_graphs)},
                      {"decode_fixed_rows", c.decode_fixed_rows},
                      {"host_sampling", c.host_sampling}};
  if (c.policy.mode == DeterminismMode::kVerified) j["verify"] = verify_config_json(c.verify);
  if (c.speculative.enabled()) {
    const engine::SpeculativeConfig& sp = c.speculative;
    j["speculative"] = {{"method", std::string(engine::speculative_method_name(sp.method))},
                        {"num_speculative_tokens", sp.num_speculative_tokens},
                        {"prompt_lookup_min", sp.prompt_lookup_min},
                        {"prompt_lookup_max", sp.prompt_lookup_max},
                        {"model", sp.model},
                        {"adaptive", sp.adaptive}};
  }
  return j;
}

std::string current_git_commit() {
  // A copy of the tree without its git history (a GPU machine): the builder says which commit.
  if (const char* env = std::getenv("DETLLM_GIT_COMMIT"); env != nullptr && *env != '\0') {
    return env;
  }
  namespace fs = std::filesystem;
  std::vector<std::string> dirs = {"."};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().string());
  for (const std::string& d : dirs) {
    const std::string git = "git --no-optional-locks -C " + shell_quote(d);
    std::string head = command_line_output(git + " rev-parse --short=12 HEAD 2>/dev/null");
    while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.pop_back();
    if (head.empty()) continue;
    const std::string changes =
        command_line_output(git + " status --porcelain --untracked-files=no 2>/dev/null");
    return changes.empty() ? head : head + "-dirty";
  }
  return "unknown";
}

std::string utc_now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf.data();
}

nlohmann::json report_json(const BenchReport& rep) {
  const nlohmann::json shared = {{"version", rep.version},
                                 {"git_commit", rep.git_commit},
                                 {"started_at", rep.started_at},
                                 {"backend", rep.backend},
                                 {"host", rep.host},
                                 {"model", rep.model},
                                 {"model_description", rep.model_description},
                                 {"workload", rep.workload},
                                 {"workload_description", rep.workload_description},
                                 {"n_requests", rep.n_requests},
                                 {"prompt_tokens", rep.prompt_tokens},
                                 {"output_tokens", rep.output_tokens},
                                 {"sampling", rep.sampling},
                                 {"seed", rep.seed},
                                 {"warmup", rep.warmup},
                                 {"warmup_description", rep.warmup_description},
                                 {"repeat", rep.repeat}};
  const ModeReport* first = rep.modes.empty() ? nullptr : &rep.modes.front();
  const ModeReport* fast = find_mode(rep, "fast");
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json modes = nlohmann::json::array();
  for (const ModeReport& m : rep.modes) {
    const std::string base_mode = m.determinism_mode.empty() ? m.mode : m.determinism_mode;
    const nlohmann::json verify = m.verify ? verify_config_json(*m.verify) : nlohmann::json();
    nlohmann::json cond = shared;
    cond["mode"] = m.mode;
    cond["determinism_mode"] = base_mode;
    cond["verify"] = verify;
    cond["policy"] = m.policy;
    cond["backend_description"] = m.backend;
    cond["self_check"] = m.self_check;
    cond["engine"] = m.engine;
    modes.push_back({{"mode", m.mode},
                     {"determinism_mode", base_mode},
                     {"verify", verify},
                     {"policy", m.policy},
                     {"backend_description", m.backend},
                     {"self_check", m.self_check},
                     {"engine", m.engine},
                     {"setup_s", m.setup_s}});
    for (const RunResult& r : m.runs) {
      const double vs_first = ratio_vs(first, r), vs_fast = ratio_vs(fast, r);
      nlohmann::json j = {
          {"mode", m.mode},
          {"determinism_mode", base_mode},
          {"kind", r.online() ? "online" : "offline"},
          {"rate", r.rate},
          {"det_share", r.det_share},
          {"n_requests", r.n_requests},
          {"n_deterministic", r.n_deterministic},
          {"duration_s", r.duration_s},
          {"repeat_durations_s", r.repeat_durations_s},
          {"prompt_tokens", r.prompt_tokens},
          {"output_tokens", r.output_tokens},
          {"requests_per_s", r.requests_per_s},
          {"output_tokens_per_s", r.output_tokens_per_s},
          {"total_tokens_per_s", r.total_tokens_per_s},
          {"output_tps_vs_first_mode", vs_first < 0 ? nlohmann::json() : nlohmann::json(vs_first)},
          {"output_tps_vs_fast", vs_fast < 0 ? nlohmann::json() : nlohmann::json(vs_fast)},
          {"n_steps", r.n_steps},
          {"n_deterministic_steps", r.n_deterministic_steps},
          {"n_computed_tokens", r.n_computed_tokens},
          {"n_cached_tokens", r.n_cached_tokens},
          {"n_preemptions", r.n_preemptions},
          {"verified",
           {{"windows", r.n_verify_windows},
            {"verify_tokens", r.n_verify_tokens},
            {"rollbacks", r.n_rollbacks},
            {"rolled_back_tokens", r.n_rolled_back_tokens},
            {"verify_share", r.verify_share()}}},
          {"speculative",
           {{"num_drafts", r.n_drafts},
            {"num_draft_tokens", r.n_draft_tokens},
            {"num_accepted_tokens", r.n_accepted_draft_tokens},
            {"acceptance_rate", r.acceptance_rate()},
            {"mean_accepted_length", r.mean_accepted_length()}}},
          {"prefix_cache",
           {{"hit_tokens", r.prefix_hit_tokens},
            {"query_tokens", r.prefix_query_tokens},
            {"hit_rate", r.prefix_hit_rate()}}},
          {"step_ms", latency_json(r.step_ms)},
          {"steps_by_kind",
           {{"padded", {{"n", r.n_padded_steps},
                        {"graph_replays", r.n_graph_replays},
                        {"graph_captures", r.n_graph_captures},
                        {"graph_captures_before_timing", r.n_warmup_graph_captures},
                        {"step_ms", latency_json(r.padded_step_ms)}}},
            {"unpadded", {{"n", static_cast<int64_t>(r.unpadded_step_ms.n)},
                       {"step_ms", latency_json(r.unpadded_step_ms)}}}}},
          {"latency_ms",
           {{"deterministic", class_json(r.det)},
            {"other", class_json(r.other)},
            {"all", class_json(r.all)}}},
          {"conditions", cond}};
      results.push_back(std::move(j));
    }
  }
  return {{"tool", "detllm bench"},
          {"conditions", shared},
          {"caveat", rep.caveat},
          {"modes", modes},
          {"results", results}};
}

std::string report_markdown(const BenchReport& rep) {
  std::string s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, "# detllm bench: {} on {}, workload {}\n\n", rep.model, rep.backend,
                 rep.workload);
  fmt::format_to(out, "- version {}, commit {}, {}; host: {}\n", rep.version, rep.git_commit,
                 rep.started_at, rep.host);
  fmt::format_to(out, "- model: {}\n", rep.model_description);
  fmt::format_to(out, "- workload: {}\n", rep.workload_description);
  fmt::format_to(out,
                 "- {} requests, {} prompt tokens, {} output tokens; sampling: {}; seed {}; {}\n",
                 rep.n_requests, rep.prompt_tokens, rep.output_tokens, rep.sampling, rep.seed,
                 rep.warmup ? (rep.warmup_description.empty() ? std::string("untimed warm-up")
                                                              : rep.warmup_description)
                            : std::string("no warm-up"));
  if (rep.repeat > 1) {
    fmt::format_to(out,
                   "- --repeat {}: each offline run made {} times in a row; the table shows the "
                   "run of median duration, and the spread of all\n",
                   rep.repeat, rep.repeat);
  }
  for (const ModeReport& m : rep.modes) {
    fmt::format_to(out, "- mode {}: policy {}; backend {}; self-check {}; engine {}\n", m.mode,
                   m.policy, m.backend, m.self_check, m.engine.dump());
  }
  fmt::format_to(out, "- note: {}\n", rep.caveat);

  const ModeReport* first = rep.modes.empty() ? nullptr : &rep.modes.front();
  const ModeReport* fast = find_mode(rep, "fast");
  const std::string first_name = first ? first->mode : "-";
  bool any_offline = false, any_online = false, any_repeat = false;
  for (const ModeReport& m : rep.modes) {
    for (const RunResult& r : m.runs) {
      (r.online() ? any_online : any_offline) = true;
      any_repeat = any_repeat || !r.repeat_durations_s.empty();
    }
  }
  if (any_offline) {
    fmt::format_to(out, "\n## Offline throughput (all requests queued at t = 0)\n\n");
    // "out vs <first mode>" only when the first mode is not fast (else it repeats vs fast).
    const bool vs_first_column = first != nullptr && first != fast;
    fmt::format_to(out,
                   "| mode | det % | requests | duration s | {}out tok/s | total tok/s | {}out vs "
                   "fast | steps | det steps | preemptions | prefix-cache hits |\n",
                   any_repeat ? "runs: duration s min–max | " : "",
                   vs_first_column ? fmt::format("out vs {} | ", first_name) : std::string());
    fmt::format_to(out, "|---|---|---|---|{}---|---|{}---|---|---|---|---|\n",
                   any_repeat ? "---|" : "", vs_first_column ? "---|" : "");
    for (const ModeReport& m : rep.modes) {
      for (const RunResult& r : m.runs) {
        if (r.online()) continue;
        const std::string vs_first =
            vs_first_column ? ratio_cell(ratio_vs(first, r)) + " | " : std::string();
        fmt::format_to(out,
                       "| {} | {} | {} | {:.3f} | {}{:.1f} | {:.1f} | {}{} | {} | {} | {} | "
                       "{:.1f}% ({}/{}) |\n",
                       m.mode, share_cell(r.det_share), r.n_requests, r.duration_s,
                       any_repeat ? repeat_cell(r) + " | " : std::string(), r.output_tokens_per_s,
                       r.total_tokens_per_s, vs_first, ratio_cell(ratio_vs(fast, r)), r.n_steps,
                       r.n_deterministic_steps, r.n_preemptions, 100.0 * r.prefix_hit_rate(),
                       r.prefix_hit_tokens, r.prefix_query_tokens);
      }
    }
  }
  if (any_run(rep, [](const RunResult& r) { return r.n_verify_windows > 0; })) {
    fmt::format_to(out,
                   "\n## Verified mode: verification and rollback (LLM-42's table 2)\n\n"
                   "| mode | window | group tokens | group requests | run | det % | windows | "
                   "rollbacks | rolled-back tokens | verification tokens | share of computed "
                   "tokens |\n"
                   "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const ModeReport& m : rep.modes) {
      const std::string window = m.verify ? std::to_string(m.verify->window) : "–";
      const std::string group = m.verify ? std::to_string(m.verify->group_tokens) : "–";
      const std::string group_requests =
          m.verify
              ? fmt::format("{}…{}", m.verify->group_min_requests, m.verify->group_max_requests)
              : std::string("–");
      for (const RunResult& r : m.runs) {
        if (r.n_verify_windows == 0) continue;
        fmt::format_to(out, "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1f}% |\n",
                       m.mode, window, group, group_requests,
                       arrival_cell(r),
                       share_cell(r.det_share), r.n_verify_windows, r.n_rollbacks,
                       r.n_rolled_back_tokens, r.n_verify_tokens, 100.0 * r.verify_share());
      }
    }
  }
  if (any_run(rep, [](const RunResult& r) { return r.n_draft_tokens > 0; })) {
    fmt::format_to(out,
                   "\n## Speculative decoding (vLLM's spec_decode counters)\n\n"
                   "| mode | run | det % | drafts | draft tokens | accepted tokens | acceptance "
                   "rate | mean accepted length |\n"
                   "|---|---|---|---|---|---|---|---|\n");
    for (const ModeReport& m : rep.modes) {
      for (const RunResult& r : m.runs) {
        if (r.n_draft_tokens == 0) continue;
        fmt::format_to(out, "| {} | {} | {} | {} | {} | {} | {:.1f}% | {:.2f} |\n", m.mode,
                       arrival_cell(r),
                       share_cell(r.det_share), r.n_drafts, r.n_draft_tokens,
                       r.n_accepted_draft_tokens, 100.0 * r.acceptance_rate(),
                       r.mean_accepted_length());
      }
    }
  }
  if (any_online) {
    fmt::format_to(out, "\n## Online latency (Poisson arrivals), ms\n\n");
    fmt::format_to(
        out,
        "| mode | rate req/s | det % | class | n | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | "
        "E2E p50 | E2E p99 | out tok/s |\n");
    fmt::format_to(out, "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const ModeReport& m : rep.modes) {
      for (const RunResult& r : m.runs) {
        if (!r.online()) continue;
        const std::pair<const char*, const ClassLatency*> classes[] = {{"det", &r.det},
                                                                       {"other", &r.other}};
        for (const auto& [name, c] : classes) {
          if (c->e2e_ms.n == 0) continue;
          fmt::format_to(
              out,
              "| {} | {:g} | {} | {} | {} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} "
              "| {:.1f} |\n",
              m.mode, r.rate, share_cell(r.det_share), name, c->e2e_ms.n, c->ttft_ms.p50,
              c->ttft_ms.p99, c->tpot_ms.p50, c->tpot_ms.p99, c->e2e_ms.p50, c->e2e_ms.p99,
              r.output_tokens_per_s);
        }
      }
    }
  }
  return s;
}

}  // namespace detllm::bench
