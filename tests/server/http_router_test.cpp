// The HTTP router without sockets (server/http_router.h): 404 for an unknown path and 405
// with Allow for a known path and another method, Bearer auth (a NUL-suffixed key refused),
// GET /v1/models/{id}, opt-in CORS, the drain gate; and the request-log escaping
// (server/request_log.h) that keeps a client from forging log lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "server/http_router.h"
#include "server/request_log.h"
#include "server_test_util.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using testing::TinyServer;

HttpRequestIn get(std::string target) {
  HttpRequestIn r;
  r.method = "GET";
  r.target = std::move(target);
  return r;
}

std::string header(const HttpReply& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "<absent>";
}

TEST(HttpRouter, UnknownPathIs404KnownPathOtherMethodIs405) {
  TinyServer s;
  EXPECT_EQ(route_request(*s.ctx, get("/nope")).status, 404);
  const HttpReply r = route_request(*s.ctx, get("/v1/completions"));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(header(r, "Allow"), "POST");
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "method_not_allowed");
  HttpRequestIn post = get("/health");
  post.method = "POST";
  EXPECT_EQ(route_request(*s.ctx, post).status, 405);
  EXPECT_EQ(header(route_request(*s.ctx, post), "Allow"), "GET");
  EXPECT_EQ(route_request(*s.ctx, get("/health?x=1")).status, 200);  // the query is not the path
}

TEST(HttpRouter, ModelById) {
  TinyServer s;
  const HttpReply r = route_request(*s.ctx, get("/v1/models/tiny"));
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["id"], "tiny");
  EXPECT_EQ(j["object"], "model");
  EXPECT_EQ(route_request(*s.ctx, get("/v1/models/default")).status, 200);
  EXPECT_EQ(route_request(*s.ctx, get("/v1/models/ti%6ey")).status, 200);  // percent-decoded
  const HttpReply missing = route_request(*s.ctx, get("/v1/models/gpt-4"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(json::parse(missing.body)["error"]["code"], "model_not_found");
  EXPECT_EQ(route_request(*s.ctx, get("/v1/models/a%0d%0ab")).status, 404);  // control bytes
  EXPECT_EQ(route_request(*s.ctx, get("/v1/models/bad%zz")).status, 404);
  EXPECT_EQ(endpoint_label("/v1/models/anything"), "/v1/models/{id}");
  EXPECT_EQ(endpoint_label("/v1/completions"), "/v1/completions");
  EXPECT_EQ(endpoint_label("/x\r\ny"), "other");
}

TEST(HttpRouter, BearerAuth) {
  TinyServer s;
  s.ctx->options.api_key = "KEY";
  EXPECT_EQ(route_request(*s.ctx, get("/health")).status, 200);  // no auth on /health
  HttpRequestIn r = get("/v1/models");
  const HttpReply missing = route_request(*s.ctx, r);
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(header(missing, "WWW-Authenticate"), "Bearer");
  EXPECT_NE(json::parse(missing.body)["error"]["message"].get<std::string>().find("missing"),
            std::string::npos);
  r.has_authorization = true;
  r.authorization = "Bearer KEY";
  EXPECT_EQ(route_request(*s.ctx, r).status, 200);
  const std::string bads[] = {"Bearer KEX", "Bearer KEY ", "bearer KEY", "KEY",
                              std::string("Bearer KEY\0anything", 19), "Bearer "};
  for (const std::string& bad : bads) {
    r.authorization = bad;
    EXPECT_EQ(route_request(*s.ctx, r).status, 401) << bad;
  }
  // A wrong key on a POST route is a 401 too, not a parse of the body.
  HttpRequestIn post = r;
  post.method = "POST";
  post.target = "/v1/completions";
  post.body = "GET /health HTTP/1.1\r\n\r\n";
  EXPECT_EQ(route_request(*s.ctx, post).status, 401);
}

TEST(HttpRouter, RefusedBeforeTheBodyWithoutTheKey) {
  TinyServer s;
  HttpRequestIn post;
  post.method = "POST";
  post.target = "/v1/completions";
  EXPECT_FALSE(refuse_before_body(*s.ctx, post).has_value());  // no key set: read the body
  s.ctx->options.api_key = "KEY";
  const auto refused = refuse_before_body(*s.ctx, post);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 401);
  post.target = "/nope";  // the 404 that comes first, still without reading the body
  EXPECT_EQ(refuse_before_body(*s.ctx, post)->status, 404);
  post.target = "/v1/completions";
  post.has_authorization = true;
  post.authorization = "Bearer KEY";
  EXPECT_FALSE(refuse_before_body(*s.ctx, post).has_value());
  EXPECT_FALSE(refuse_before_body(*s.ctx, get("/health")).has_value());
}

TEST(HttpRouter, AbsoluteFormTargets) {
  EXPECT_EQ(target_path("/v1/models?x=1"), "/v1/models");
  EXPECT_EQ(target_path("http://127.0.0.1:8000/v1/models?x=1"), "/v1/models");
  EXPECT_EQ(target_path("HTTPS://host/health#f"), "/health");
  EXPECT_EQ(target_path("http://host"), "/");
  EXPECT_EQ(target_path("http://host?x=/v1/models"), "/");
  TinyServer s;
  EXPECT_EQ(route_request(*s.ctx, get("http://localhost/health")).status, 200);
}

TEST(HttpRouter, SameSecret) {
  EXPECT_TRUE(same_secret("abc", "abc"));
  EXPECT_FALSE(same_secret("abc", "abd"));
  EXPECT_FALSE(same_secret("abc", "ab"));
  EXPECT_FALSE(same_secret("ab", "abc"));
  EXPECT_FALSE(same_secret(std::string_view("abc\0", 4), "abc"));
}

TEST(HttpRouter, CorsIsOptIn) {
  TinyServer s;
  HttpRequestIn pre = get("/v1/completions");
  pre.method = "OPTIONS";
  pre.origin = "https://app.example";
  const HttpReply off = route_request(*s.ctx, pre);
  EXPECT_EQ(off.status, 405);
  EXPECT_EQ(header(off, "Access-Control-Allow-Origin"), "<absent>");

  s.ctx->options.cors_origins = {"https://app.example"};
  s.ctx->options.api_key = "KEY";  // a preflight carries no credentials
  const HttpReply on = route_request(*s.ctx, pre);
  EXPECT_EQ(on.status, 204);
  EXPECT_EQ(header(on, "Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(header(on, "Access-Control-Allow-Methods"), "POST, OPTIONS");
  EXPECT_NE(header(on, "Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
  HttpRequestIn other = pre;
  other.origin = "https://evil.example";
  EXPECT_EQ(header(route_request(*s.ctx, other), "Access-Control-Allow-Origin"), "<absent>");
  // An actual request from the allowed origin gets the header, even on an error.
  HttpRequestIn models = get("/v1/models");
  models.origin = "https://app.example";
  EXPECT_EQ(header(route_request(*s.ctx, models), "Access-Control-Allow-Origin"),
            "https://app.example");
  s.ctx->options.cors_origins = {"*"};
  models.origin = "https://any.example";
  EXPECT_EQ(header(route_request(*s.ctx, models), "Access-Control-Allow-Origin"), "*");
}

TEST(HttpRouter, DrainingRefusesPosts) {
  TinyServer s;
  s.ctx->draining = true;
  HttpRequestIn post = get("/v1/completions");
  post.method = "POST";
  post.body = R"({"prompt": "x"})";
  EXPECT_EQ(route_request(*s.ctx, post).status, 503);
  EXPECT_EQ(route_request(*s.ctx, get("/health")).status, 503);  // {"status": "draining"}
}

TEST(HttpRouter, QuickRoutesRunNoHandlerThatBlocks) {
  EXPECT_TRUE(route_is_quick(get("/health")));
  HttpRequestIn post = get("/v1/completions");
  post.method = "POST";
  EXPECT_FALSE(route_is_quick(post));
  EXPECT_TRUE(route_is_quick(get("/server_info?config_format=json")));
  // /reset_prefix_cache waits for the engine thread between two steps: the control pool, so a
  // pause holding generation requests in every worker does not hold it.
  HttpRequestIn reset = get("/reset_prefix_cache");
  reset.method = "POST";
  EXPECT_FALSE(route_is_quick(reset));
  EXPECT_TRUE(route_is_control(reset));
  EXPECT_FALSE(route_is_control(post));
}

TEST(RequestLog, ControlBytesAreEscaped) {
  EXPECT_EQ(log_escape("/v1/x\r\nFORGED 200"), "/v1/x\\x0d\\x0aFORGED 200");
  EXPECT_EQ(log_escape(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(log_escape("q\"\\"), "q\\\"\\\\");
  EXPECT_EQ(log_escape("\x1b[31m\x7f\xff"), "\\x1b[31m\\x7f\\xff");
  RequestLogEntry e;
  e.remote = "127.0.0.1:5";
  e.method = "GET";
  e.target = "/h\nx";
  e.status = 404;
  e.latency_s = 0.25;
  const std::string line = format_request_log(e);
  EXPECT_EQ(line, "detllm serve: 127.0.0.1:5 \"GET /h\\x0ax\" 404 0.250000s\n");
  e.prompt_tokens = 3;
  e.completion_tokens = 7;
  EXPECT_NE(format_request_log(e).find(" prompt_tokens=3 completion_tokens=7\n"),
            std::string::npos);
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
}

// The HTTP layer pumps a stream without waiting (wait = 0) when the engine notifies it; the
// notification must come for every event, or a stream would stall.
TEST(HttpRouter, StreamNotifiesWhenOutputIsReady) {
  TinyServer s;
  HttpRequestIn post = get("/v1/completions");
  post.method = "POST";
  post.body = R"({"prompt": [1, 2, 3], "max_tokens": 6, "stream": true})";
  HttpReply r = route_request(*s.ctx, post);
  ASSERT_TRUE(r.stream) << r.body;
  std::mutex mu;
  std::condition_variable cv;
  int notified = 0;
  r.stream->set_notify([&] {
    std::lock_guard lk(mu);
    ++notified;
    cv.notify_all();
  });
  std::string out;
  PumpResult p = PumpResult::kMore;
  int waits = 0;  // pumps that found nothing ready and waited for the notification
  for (int i = 0; i < 1000 && p == PumpResult::kMore; ++i) {
    p = r.stream->pump(
        [&](std::string_view c) {
          out += c;
          return true;
        },
        std::chrono::milliseconds(0));
    if (p != PumpResult::kMore) break;
    std::unique_lock lk(mu);
    const int seen = notified;
    ++waits;
    cv.wait_for(lk, std::chrono::seconds(5), [&] { return notified > seen; });
  }
  EXPECT_EQ(p, PumpResult::kDone);
  // The engine may finish all 6 tokens before set_notify is installed (a fast machine): then
  // the first pump is already kDone and nothing had to be notified. Whenever a pump had to wait,
  // output arrived through a notification.
  if (waits > 0) {
    EXPECT_GT(notified, 0);
  }
  EXPECT_NE(out.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(r.stream->prompt_tokens(), 3);
  EXPECT_EQ(r.stream->completion_tokens(), 6);
  r.stream->set_notify(nullptr);
}

}  // namespace
}  // namespace detllm::server

namespace detllm::server {
namespace {

json whole(TinyServer& s, const std::string& body) {
  HttpRequestIn post;
  post.method = "POST";
  post.target = "/v1/completions";
  post.body = body;
  HttpReply r = route_request(*s.ctx, post);
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(testing::body_of(r));
}

// vLLM's stop_reason: the stop string or stop token id that ended a choice; null for
// `length` (and for the end-of-text token).
TEST(StopReason, StringTokenOrNull) {
  TinyServer s;
  // Greedy continuation of a prompt, then stop on a piece of it.
  const json free = whole(s, R"({"prompt": [65, 66], "max_tokens": 8, "temperature": 0})");
  ASSERT_EQ(free["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(free["choices"][0]["stop_reason"].is_null());
  const std::string text = free["choices"][0]["text"];
  ASSERT_GE(text.size(), 3u);
  const std::string stop = text.substr(1, 2);
  const json by_string = whole(s, json{{"prompt", {65, 66}}, {"max_tokens", 8},
                                       {"temperature", 0}, {"stop", {stop}}}
                                      .dump());
  EXPECT_EQ(by_string["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(by_string["choices"][0]["stop_reason"], stop);
  // The token generated third, as a stop token id.
  HttpRequestIn post;
  post.method = "POST";
  post.target = "/v1/completions";
  post.body = R"({"prompt": [65, 66], "max_tokens": 8, "temperature": 0, "logprobs": 0})";
  HttpReply r = route_request(*s.ctx, post);
  const json lp = json::parse(testing::body_of(r));
  const int third = lp["choices"][0]["logprobs"]["token_ids"][2];
  const json by_token =
      whole(s, json{{"prompt", {65, 66}}, {"max_tokens", 8}, {"temperature", 0},
                    {"stop_token_ids", {third}}}
                   .dump());
  EXPECT_EQ(by_token["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(by_token["choices"][0]["stop_reason"], third);
}

TEST(LatencyMetrics, HistogramsAfterAGeneration) {
  TinyServer s;
  HttpRequestIn post;
  post.method = "POST";
  post.target = "/v1/completions";
  post.body = R"({"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0})";
  HttpReply r = route_request(*s.ctx, post);
  ASSERT_TRUE(r.stream);
  (void)testing::body_of(r);
  const ResponseStream::Latency l = r.stream->latency();
  EXPECT_GE(l.queue_s, 0.0);
  EXPECT_GE(l.ttft_s, l.queue_s);
  EXPECT_GE(l.tpot_s, 0.0);
  EXPECT_GE(l.e2e_s, l.ttft_s);
  Metrics m;
  m.observe_latency(l.queue_s, l.ttft_s, l.tpot_s, l.e2e_s);
  m.observe_latency(-1, 0.003, -1, 7.0);
  const std::string text = m.render(EngineSnapshot{}, MetricsInfo{});
  EXPECT_NE(text.find("# TYPE detllm_time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("detllm_time_to_first_token_seconds_count 2"), std::string::npos);
  EXPECT_NE(text.find("detllm_time_to_first_token_seconds_bucket{le=\"0.005\"}"),
            std::string::npos);
  EXPECT_NE(text.find("detllm_request_queue_time_seconds_count 1"), std::string::npos);
  EXPECT_NE(text.find("detllm_time_per_output_token_seconds_count 1"), std::string::npos);
  EXPECT_NE(text.find("detllm_e2e_request_latency_seconds_count 2"), std::string::npos);
  EXPECT_NE(text.find("detllm_e2e_request_latency_seconds_bucket{le=\"+Inf\"} 2"),
            std::string::npos);
  // 7 s is above the 5 s bound, within 10 s: cumulative counts.
  EXPECT_NE(text.find("detllm_e2e_request_latency_seconds_bucket{le=\"5\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("detllm_e2e_request_latency_seconds_bucket{le=\"10\"} 2"),
            std::string::npos);
}

}  // namespace
}  // namespace detllm::server
