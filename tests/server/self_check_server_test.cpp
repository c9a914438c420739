// The startup self-check through the server's handlers (no sockets): a passing check shows in
// /metrics and /health; with a failed check injected into the engine (EngineConfig::self_check,
// exactly where detllm serve puts the verdict) /metrics says failed, a deterministic request
// gets HTTP 503 with code "self_check_failed" and a message saying what failed and what to do,
// and non-deterministic requests are still served.
// Run: build/tests/test_server --gtest_filter='SelfCheckServer*'
#include <gtest/gtest.h>

#include <chrono>

#include "server/api_error.h"
#include "server/handlers.h"
#include "server_test_util.h"
#include "verify/self_check.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using testing::TinyServer;

using testing::body_of;

bool has_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

engine::EngineConfig with_verdict(SelfCheckVerdict v) {
  engine::EngineConfig e = TinyServer::default_engine();
  e.self_check = std::move(v);
  return e;
}

// The verdict of a report whose o_proj GEMM check failed (as the fast cuBLAS path does).
SelfCheckVerdict failed_verdict() {
  SelfCheckReport r;
  r.backend = "cuda";
  r.checks.push_back({"gemm o_proj 4096->4096", false, 1,
                      SelfCheckMismatch{"m=1 vs m=256", 0, 0, -0.892690241f, -0.892693102f}, "",
                      1.0});
  return SelfCheckVerdict::of(r);
}

TEST(SelfCheckServer, PassedShowsInMetricsAndHealth) {
  // The real check on the server's own ops and model shapes, as detllm serve runs it.
  TinyServer probe;
  const SelfCheckReport report = run_self_check(
      *probe.ops,
      self_check_options_for(probe.config, TinyServer::default_engine().scheduler.kv.block_size));
  ASSERT_TRUE(report.passed()) << report.describe();
  TinyServer s(with_verdict(SelfCheckVerdict::of(report)));
  EXPECT_EQ(s.ctx->self_check_status, "passed");
  const std::string metrics = handle_metrics(*s.ctx).body;
  EXPECT_TRUE(has_line(metrics, "detllm_self_check_status{state=\"passed\"} 1")) << metrics;
  EXPECT_EQ(json::parse(handle_health(*s.ctx).body)["self_check"], "passed");
  HttpReply r = handle_completions(*s.ctx, R"({"prompt": [1, 2, 3], "max_tokens": 2})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(body_of(r))["object"], "text_completion");
}

TEST(SelfCheckServer, FailedRefusesDeterministicWith503) {
  TinyServer s(with_verdict(failed_verdict()));
  EXPECT_EQ(s.ctx->self_check_status, "failed");
  const std::string metrics = handle_metrics(*s.ctx).body;
  EXPECT_TRUE(has_line(metrics, "detllm_self_check_status{state=\"failed\"} -1")) << metrics;
  // Still healthy: non-deterministic requests are served.
  const HttpReply health = handle_health(*s.ctx);
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(json::parse(health.body)["self_check"], "failed");

  // Deterministic by default, explicitly, streamed, and on the chat-free completions path with
  // several prompts: all refused, nothing left in the engine.
  for (const char* body : {R"({"prompt": [1, 2, 3], "max_tokens": 2})",
                           R"({"prompt": [1, 2, 3], "max_tokens": 2, "deterministic": true})",
                           R"({"prompt": [1, 2, 3], "max_tokens": 2, "stream": true})",
                           R"({"prompt": [[1, 2], [3, 4]], "max_tokens": 2, "seed": 5})"}) {
    try {
      handle_completions(*s.ctx, body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 503) << body;
      EXPECT_EQ(e.type(), "service_unavailable");
      EXPECT_EQ(e.code(), "self_check_failed");
      EXPECT_EQ(e.param(), "deterministic");
      const std::string msg = e.what();
      EXPECT_NE(msg.find("gemm o_proj 4096->4096: m=1 vs m=256"), std::string::npos) << msg;
      EXPECT_NE(msg.find("detllm check"), std::string::npos) << msg;
      EXPECT_NE(msg.find("\"deterministic\": false"), std::string::npos) << msg;
      const json err = json::parse(error_body(e))["error"];
      EXPECT_EQ(err["code"], "self_check_failed");
      EXPECT_EQ(err["type"], "service_unavailable");
    }
  }
  EXPECT_EQ(s.loop->n_tickets(), 0);

  // Non-deterministic requests are served.
  HttpReply r =
      handle_completions(*s.ctx, R"({"prompt": [1, 2, 3], "max_tokens": 3, "deterministic": false,
                  "ignore_eos": true})");
  ASSERT_EQ(r.status, 200);
  const json j = json::parse(body_of(r));
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
}

TEST(SelfCheckServer, DisabledAndNotRunServeEverything) {
  engine::EngineConfig off = with_verdict(failed_verdict());
  off.policy.self_check = false;  // --no-self-check
  TinyServer s(off);
  EXPECT_EQ(s.ctx->self_check_status, "disabled");
  EXPECT_TRUE(
      has_line(handle_metrics(*s.ctx).body, "detllm_self_check_status{state=\"disabled\"} 0"));
  HttpReply r = handle_completions(*s.ctx, R"({"prompt": [1, 2], "max_tokens": 1})");
  EXPECT_EQ(r.status, 200);
  body_of(r);
  TinyServer plain;
  EXPECT_EQ(plain.ctx->self_check_status, "not_run");
}

}  // namespace
}  // namespace detllm::server
