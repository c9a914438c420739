// detllm bench reports (src/bench/report.h): every JSON result carries its conditions, ratios
// against the first mode and vs fast, the mixed-traffic note, the markdown tables.
#include <gtest/gtest.h>

#include <cstdlib>

#include "bench/report.h"

namespace detllm::bench {
namespace {

RunResult run(double rate, double share, double out_tps) {
  RunResult r;
  r.rate = rate;
  r.det_share = share;
  r.n_requests = 4;
  r.n_deterministic = static_cast<int64_t>(share / 25);
  r.duration_s = 2.0;
  r.prompt_tokens = 100;
  r.output_tokens = 40;
  r.output_tokens_per_s = out_tps;
  r.total_tokens_per_s = out_tps * 3.5;
  r.n_steps = 12;
  r.prefix_hit_tokens = 16;
  r.prefix_query_tokens = 100;
  r.det.ttft_ms = {r.n_deterministic, 5, 4, 9};
  r.det.e2e_ms = {r.n_deterministic, 50, 40, 90};
  r.other.ttft_ms = {4 - r.n_deterministic, 3, 2, 7};
  r.other.e2e_ms = {4 - r.n_deterministic, 30, 20, 70};
  return r;
}

BenchReport sample_report() {
  BenchReport rep;
  rep.version = "0.1.0";
  rep.git_commit = "abc123";
  rep.backend = "cpu";
  rep.model = "synthetic:tiny-llama";
  rep.model_description = "synthetic tiny-llama";
  rep.workload = "fixed";
  rep.workload_description = "fixed: 4 requests";
  rep.n_requests = 4;
  ModeReport inv;
  inv.mode = "invariant";
  inv.policy = "det=invariant;mode=invariant";
  inv.backend = "cpu; build=x86-64-v3";
  inv.self_check = "passed";
  inv.engine = engine_config_json(engine::EngineConfig{});
  inv.runs = {run(0, 0, 100), run(0, 100, 90), run(8, 50, 20)};
  ModeReport fast = inv;
  fast.mode = "fast";
  fast.policy = "det=fast;mode=fast";
  fast.runs = {run(0, 0, 200), run(0, 100, 180), run(8, 50, 20)};
  rep.modes = {inv, fast};
  return rep;
}

TEST(BenchReport, JsonResultsCarryConditionsAndRatios) {
  const nlohmann::json j = report_json(sample_report());
  EXPECT_EQ(j["tool"], "detllm bench");
  EXPECT_NE(j["caveat"].get<std::string>().find("no deterministic row"), std::string::npos);
  EXPECT_EQ(j["conditions"]["git_commit"], "abc123");
  ASSERT_EQ(j["results"].size(), 6u);
  ASSERT_EQ(j["modes"].size(), 2u);
  for (const nlohmann::json& r : j["results"]) {
    const nlohmann::json& c = r["conditions"];
    EXPECT_EQ(c["mode"], r["mode"]);
    EXPECT_EQ(c["model"], "synthetic:tiny-llama");
    EXPECT_EQ(c["backend"], "cpu");
    EXPECT_EQ(c["workload"], "fixed");
    EXPECT_EQ(c["git_commit"], "abc123");
    EXPECT_TRUE(c["policy"].is_string());
    EXPECT_TRUE(c["engine"].contains("max_seqs"));
    EXPECT_TRUE(r["latency_ms"]["deterministic"]["ttft"].contains("p99"));
  }
  const nlohmann::json& fast_offline_0 = j["results"][3];
  EXPECT_EQ(fast_offline_0["mode"], "fast");
  EXPECT_EQ(fast_offline_0["kind"], "offline");
  EXPECT_DOUBLE_EQ(fast_offline_0["output_tps_vs_first_mode"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(fast_offline_0["output_tps_vs_fast"].get<double>(), 1.0);
  const nlohmann::json& inv_offline_100 = j["results"][1];
  EXPECT_DOUBLE_EQ(inv_offline_100["output_tps_vs_fast"].get<double>(), 0.5);
  EXPECT_EQ(j["results"][2]["kind"], "online");
  EXPECT_DOUBLE_EQ(j["results"][2]["rate"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(j["results"][0]["prefix_cache"]["hit_rate"].get<double>(), 0.16);
}

TEST(BenchReport, WithoutFastTheRatioIsNull) {
  BenchReport rep = sample_report();
  rep.modes.pop_back();
  const nlohmann::json j = report_json(rep);
  EXPECT_TRUE(j["results"][0]["output_tps_vs_fast"].is_null());
  EXPECT_DOUBLE_EQ(j["results"][0]["output_tps_vs_first_mode"].get<double>(), 1.0);
}

TEST(BenchReport, MarkdownHasBothTablesAndTheCaveat) {
  const std::string md = report_markdown(sample_report());
  EXPECT_NE(md.find("## Offline throughput"), std::string::npos) << md;
  EXPECT_NE(md.find("| mode | det % | requests |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fast | 0 | 4 | 2.000 | 200.0 | 700.0 | 2.000 | 1.000 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("## Online latency"), std::string::npos) << md;
  EXPECT_NE(md.find("| invariant | 8 | 50 | det | 2 | 4.0 | 9.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| invariant | 8 | 50 | other | 2 | 2.0 | 7.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("mixed traffic"), std::string::npos) << md;
  EXPECT_NE(md.find("commit abc123"), std::string::npos) << md;
  EXPECT_NE(md.find("| out vs invariant | out vs fast | steps | det steps |"), std::string::npos)
      << md;
  // fast first: no "out vs fast" twice.
  BenchReport rep = sample_report();
  std::swap(rep.modes[0], rep.modes[1]);
  rep.modes[1].runs[0].n_deterministic_steps = 3;
  const std::string md2 = report_markdown(rep);
  EXPECT_NE(md2.find("| total tok/s | out vs fast | steps | det steps |"), std::string::npos)
      << md2;
  EXPECT_EQ(md2.find("out vs fast | out vs fast"), std::string::npos) << md2;
  EXPECT_NE(md2.find("| invariant | 0 | 4 | 2.000 | 100.0 | 350.0 | 0.500 | 12 | 3 |"),
            std::string::npos)
      << md2;
}

// --repeat: the spread of every repetition beside the median run, in the table and the JSON.
TEST(BenchReport, RepeatedRunsShowTheirSpread) {
  BenchReport rep = sample_report();
  rep.repeat = 3;
  rep.warmup = true;
  rep.warmup_description = "untimed warm-up per mode: the first 4 requests";
  rep.modes[0].runs[0].repeat_durations_s = {2.1, 2.0, 2.4};
  const std::string md = report_markdown(rep);
  EXPECT_NE(md.find("--repeat 3"), std::string::npos) << md;
  EXPECT_NE(md.find("the first 4 requests"), std::string::npos) << md;
  EXPECT_NE(md.find("| duration s | runs: duration s min–max | out tok/s |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| invariant | 0 | 4 | 2.000 | 3: 2.000–2.400 | 100.0 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| fast | 0 | 4 | 2.000 | 1 | 200.0 |"), std::string::npos) << md;
  const nlohmann::json j = report_json(rep);
  EXPECT_EQ(j["conditions"]["repeat"], 3);
  EXPECT_EQ(j["results"][0]["repeat_durations_s"].size(), 3u);
  EXPECT_TRUE(j["results"][3]["repeat_durations_s"].empty());
  // Without repeats the table has no such column.
  EXPECT_EQ(report_markdown(sample_report()).find("runs: duration"), std::string::npos);
}

// --verify-group-tokens: one labelled verified report per group size, one row each in the
// verification table, its settings in the JSON conditions.
TEST(BenchReport, VerifiedRunsPerGroupSize) {
  BenchReport rep = sample_report();
  for (int32_t g : {64, 128}) {
    ModeReport m = rep.modes.front();
    m.mode = "verified(g=" + std::to_string(g) + ")";
    m.determinism_mode = "verified";
    engine::VerifyConfig v;
    v.group_tokens = g;
    v.window = 8;
    m.verify = v;
    m.runs = {run(0, 100, 50)};
    m.runs[0].n_verify_windows = g / 8;
    m.runs[0].n_verify_tokens = g;
    m.runs[0].n_computed_tokens = 1000;
    m.runs[0].n_rollbacks = 1;
    m.runs[0].n_rolled_back_tokens = 3;
    rep.modes.push_back(m);
  }
  const std::string md = report_markdown(rep);
  EXPECT_NE(md.find("## Verified mode"), std::string::npos) << md;
  EXPECT_NE(md.find("| verified(g=64) | 8 | 64 | 4…16 | offline | 100 | 8 | 1 | 3 | 64 | 6.4% |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| verified(g=128) | 8 | 128 | 4…16 | offline | 100 | 16 | 1 | 3 | 128 | "
                    "12.8% |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| verified(g=128) | 100 | 4 |"), std::string::npos) << md;  // offline row
  const nlohmann::json j = report_json(rep);
  ASSERT_EQ(j["results"].size(), 8u);
  const nlohmann::json& r = j["results"][7];
  EXPECT_EQ(r["mode"], "verified(g=128)");
  EXPECT_EQ(r["determinism_mode"], "verified");
  EXPECT_EQ(r["conditions"]["verify"]["group_tokens"], 128);
  EXPECT_EQ(r["conditions"]["verify"]["window"], 8);
  EXPECT_EQ(r["conditions"]["determinism_mode"], "verified");
  EXPECT_TRUE(j["results"][0]["conditions"]["verify"].is_null());
  EXPECT_EQ(j["results"][0]["determinism_mode"], "invariant");
}

TEST(BenchReport, EngineJsonHasVerifyOnlyUnderVerified) {
  engine::EngineConfig c;
  EXPECT_FALSE(engine_config_json(c).contains("verify"));
  c.policy.mode = DeterminismMode::kVerified;
  c.verify.group_tokens = 96;
  EXPECT_EQ(engine_config_json(c)["verify"]["group_tokens"], 96);
}

TEST(BenchReport, GitCommitNeverThrows) {
  const std::string c = current_git_commit();
  EXPECT_FALSE(c.empty());
  EXPECT_EQ(utc_now_iso8601().size(), 20u);  // 2026-01-02T03:04:05Z
  setenv("DETLLM_GIT_COMMIT", "0123456789ab", 1);
  EXPECT_EQ(current_git_commit(), "0123456789ab");
  unsetenv("DETLLM_GIT_COMMIT");
  EXPECT_NE(current_git_commit(), "0123456789ab");
}

}  // namespace
}  // namespace detllm::bench
