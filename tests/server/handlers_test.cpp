// The endpoint handlers end to end without sockets: a synthetic tiny model behind a real
// EngineLoop, bodies in, JSON / SSE out. Checks response shapes, reproducibility fields,
// streaming framing, errors, client cancellation freeing KV, and that concurrent requests
// through the loop get exactly the tokens and logprobs they get alone.
#include <gtest/gtest.h>

#include <thread>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/handlers.h"
#include "server_test_util.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using testing::TinyServer;

using testing::body_of;

json call(ServerContext& ctx, HttpReply (*h)(ServerContext&, std::string_view), const json& body) {
  HttpReply r = h(ctx, body.dump());
  EXPECT_EQ(r.status, 200);
  return json::parse(body_of(r));
}

// The SSE events of a streamed body; checks the framing and the final [DONE].
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  bool done = false;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    const std::string ev = body.substr(pos, end - pos);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    const std::string payload = ev.substr(6);
    EXPECT_FALSE(done) << "event after [DONE]";
    if (payload == "[DONE]") {
      done = true;
    } else {
      out.push_back(json::parse(payload));
    }
    pos = end + 2;
  }
  EXPECT_TRUE(done);
  return out;
}

int status_of(ServerContext& ctx, HttpReply (*h)(ServerContext&, std::string_view),
              const std::string& body, std::string* code = nullptr) {
  try {
    HttpReply r = h(ctx, body);
    return r.status;
  } catch (const ApiError& e) {
    if (code) *code = e.code();
    return e.status();
  }
}

// Tokens and logprobs of one sample, run alone in a fresh engine.
struct Sample {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};
std::vector<Sample> run_alone(TinyServer& s, engine::Request req) {
  engine::Engine eng(*s.model, TinyServer::default_engine(), s.tokenizer.get());
  std::vector<Sample> out(static_cast<size_t>(req.n));
  engine::RequestCallbacks cb;
  cb.on_token = [&](const engine::TokenEvent& e) {
    out[static_cast<size_t>(e.sample_index)].ids.push_back(e.token);
    out[static_cast<size_t>(e.sample_index)].logprobs.push_back(e.logprob);
  };
  eng.add_request(std::move(req), cb);
  eng.run_until_idle();
  return out;
}

Sample sample_of_completion_choice(const json& choice) {
  Sample s;
  for (const auto& id : choice["logprobs"]["token_ids"]) s.ids.push_back(id.get<int32_t>());
  for (const auto& lp : choice["logprobs"]["token_logprobs"]) s.logprobs.push_back(lp.get<float>());
  return s;
}

TEST(Handlers, CompletionMatchesTheEngineAlone) {
  TinyServer s;
  const json resp = call(*s.ctx, handle_completions,
                         {{"model", "tiny"},
                          {"prompt", {5, 6, 7, 8}},
                          {"max_tokens", 6},
                          {"temperature", 0.8},
                          {"seed", 1234},
                          {"logprobs", 2},
                          {"ignore_eos", true}});
  EXPECT_EQ(resp["object"], "text_completion");
  EXPECT_EQ(resp["model"], "tiny");
  EXPECT_EQ(resp["system_fingerprint"], "fp_det");
  EXPECT_EQ(resp["seed"], 1234);
  EXPECT_EQ(resp["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(resp["usage"]["completion_tokens"], 6);
  EXPECT_EQ(resp["usage"]["total_tokens"], 10);
  ASSERT_EQ(resp["choices"].size(), 1u);
  const json& c = resp["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["logprobs"]["top_logprobs"][0].size(), 2u);

  engine::Request req;
  req.prompt = {5, 6, 7, 8};
  req.max_tokens = 6;
  req.ignore_eos = true;
  req.sampling.temperature = 0.8f;
  req.sampling.seed = 1234;
  const Sample alone = run_alone(s, req)[0];
  const Sample got = sample_of_completion_choice(c);
  EXPECT_EQ(got.ids, alone.ids);
  EXPECT_EQ(got.logprobs, alone.logprobs);
}

TEST(Handlers, DrawnSeedIsReturnedAndReplays) {
  TinyServer s;
  const json body = {{"prompt", {1, 2, 3}},
                     {"max_tokens", 5},
                     {"logprobs", 0},
                     {"ignore_eos", true},
                     {"model", "default"}};
  const json a = call(*s.ctx, handle_completions, body);
  const uint64_t seed = a["seed"].get<uint64_t>();
  EXPECT_LT(seed, uint64_t{1} << 53);
  json replay = body;
  replay["seed"] = seed;
  const json b = call(*s.ctx, handle_completions, replay);
  EXPECT_EQ(a["choices"][0]["logprobs"], b["choices"][0]["logprobs"]);
  EXPECT_EQ(b["seed"], seed);
}

TEST(Handlers, ManyPromptsAndSamples) {
  TinyServer s;
  const json resp = call(*s.ctx, handle_completions,
                         {{"prompt", {{1, 2}, {3, 4, 5}}},
                          {"n", 3},
                          {"max_tokens", 3},
                          {"seed", 9},
                          {"ignore_eos", true},
                          {"logprobs", 0}});
  ASSERT_EQ(resp["choices"].size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(resp["choices"][i]["index"], i);
  EXPECT_EQ(resp["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(resp["usage"]["completion_tokens"], 18);
  // Choice 4 is prompt 1, sample 1: the same as that prompt alone with n = 3.
  engine::Request req;
  req.prompt = {3, 4, 5};
  req.max_tokens = 3;
  req.n = 3;
  req.ignore_eos = true;
  req.sampling.seed = 9;
  const auto alone = run_alone(s, req);
  EXPECT_EQ(sample_of_completion_choice(resp["choices"][4]).ids, alone[1].ids);
}

TEST(Handlers, EchoScoresThePrompt) {
  TinyServer s;
  const json resp = call(*s.ctx, handle_completions,
                         {{"prompt", "hello"}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}});
  const json& lp = resp["choices"][0]["logprobs"];
  EXPECT_EQ(resp["choices"][0]["text"], "hello");
  ASSERT_EQ(lp["tokens"].size(), 5u);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_TRUE(lp["token_logprobs"][4].is_number());
  EXPECT_EQ(lp["token_ids"][0], static_cast<int>('h'));
  EXPECT_EQ(lp["text_offset"][1], 1);
  EXPECT_EQ(resp["usage"]["completion_tokens"], 0);
}

TEST(Handlers, StreamingMatchesWhole) {
  TinyServer s;
  json body = {{"prompt", "abc"},    {"max_tokens", 8}, {"seed", 5},
               {"ignore_eos", true}, {"logprobs", 0},   {"n", 2}};
  const json whole = call(*s.ctx, handle_completions, body);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  HttpReply r = handle_completions(*s.ctx, body.dump());
  EXPECT_EQ(r.content_type, "text/event-stream");
  const std::vector<json> events = sse_events(body_of(r));
  ASSERT_GE(events.size(), 2u);
  std::vector<std::string> text(2);
  std::vector<std::vector<int>> ids(2);
  std::vector<std::string> finish(2);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_TRUE(e["usage"].is_null());
    ASSERT_EQ(e["choices"].size(), 1u);
    const json& c = e["choices"][0];
    const int k = c["index"];
    text[k] += c["text"].get<std::string>();
    for (const auto& id : c["logprobs"]["token_ids"]) ids[k].push_back(id);
    if (!c["finish_reason"].is_null()) finish[k] = c["finish_reason"];
  }
  const json& last = events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"], whole["usage"]);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(text[k], whole["choices"][k]["text"]);
    EXPECT_EQ(json(ids[k]), whole["choices"][k]["logprobs"]["token_ids"]);
    EXPECT_EQ(finish[k], "length");
  }
}

TEST(Handlers, Errors) {
  TinyServer s;
  std::string code;
  EXPECT_EQ(status_of(*s.ctx, handle_completions, R"({"model": "gpt-4", "prompt": "x"})", &code),
            404);
  EXPECT_EQ(code, "model_not_found");
  EXPECT_EQ(status_of(*s.ctx, handle_completions, R"({"prompt": [1, 600]})"), 400);
  EXPECT_EQ(status_of(*s.ctx, handle_completions, R"({"prompt": ""})"), 400);
  EXPECT_EQ(status_of(*s.ctx, handle_completions, R"({"prompt": [1], "max_tokens": 4000})", &code),
            400);
  EXPECT_EQ(code, "context_length_exceeded");
  const std::string long_prompt = json{{"prompt", std::vector<int>(2100, 1)}}.dump();
  EXPECT_EQ(status_of(*s.ctx, handle_completions, long_prompt, &code), 400);
  EXPECT_EQ(code, "context_length_exceeded");
  // No chat template on this tokenizer.
  EXPECT_EQ(status_of(*s.ctx, handle_chat_completions,
                      R"({"messages": [{"role": "user", "content": "x"}]})"),
            400);
  // The engine refuses what can never fit in its KV pool: a clean 400, nothing left running.
  engine::EngineConfig small = TinyServer::default_engine();
  small.kv_cache_tokens = 16;
  TinyServer tiny(small);
  EXPECT_EQ(status_of(*tiny.ctx, handle_completions,
                      R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "max_tokens": 10})"),
            400);
  EXPECT_EQ(tiny.loop->n_tickets(), 0);
}

// The determinism_mode extension: a request may require the server's mode (and is then
// deterministic), and is refused, saying which mode this server runs, when it asks for another.
TEST(Handlers, DeterminismModeMustBeTheServers) {
  TinyServer s;
  ASSERT_EQ(s.ctx->mode, DeterminismMode::kInvariant);
  std::string code;
  EXPECT_EQ(status_of(*s.ctx, handle_completions,
                      R"({"prompt": [1, 2], "max_tokens": 2, "determinism_mode": "invariant"})"),
            200);
  try {
    (void)handle_completions(
        *s.ctx, R"({"prompt": [1, 2], "max_tokens": 2, "determinism_mode": "verified"})");
    ADD_FAILURE() << "a request for another mode was served";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "determinism_mode");
    EXPECT_NE(std::string(e.what()).find("runs determinism mode 'invariant'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--mode verified"), std::string::npos) << e.what();
  }
  // It makes the request deterministic under --deterministic-default false.
  s.ctx->deterministic_by_default = false;
  HttpReply r = handle_completions(
      *s.ctx, R"({"prompt": [1, 2], "max_tokens": 2, "determinism_mode": "invariant"})");
  EXPECT_EQ(json::parse(body_of(r))["system_fingerprint"], s.ctx->fingerprint_deterministic);
}

// return_routed_experts: per choice, one entry per generated token of per-layer lists of k ids;
// with echo + logprobs the prompt's too (null first, as prompt logprobs); streamed chunks carry
// the same entries; a dense model answers 400 naming the field.
TEST(Handlers, RoutedExpertsOnMoeAndRefusedOnDense) {
  TinyServer dense;
  try {
    (void)handle_completions(
        *dense.ctx, R"({"prompt": [1, 2], "max_tokens": 2, "return_routed_experts": true})");
    ADD_FAILURE() << "a dense model returned routed experts";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "return_routed_experts");
  }
  TinyServer moe(TinyServer::default_engine(), "tiny-qwen3-moe");
  const json req = {{"prompt", {5, 6, 7, 8, 9}},
                    {"max_tokens", 4},
                    {"ignore_eos", true},
                    {"echo", true},
                    {"logprobs", 0},
                    {"temperature", 0},
                    {"return_routed_experts", true}};
  HttpReply whole = handle_completions(*moe.ctx, req.dump());
  const json c = json::parse(body_of(whole))["choices"][0];
  ASSERT_EQ(c["routed_experts"].size(), 4u);
  for (const json& token : c["routed_experts"]) {
    ASSERT_EQ(token.size(), static_cast<size_t>(moe.config.n_layers));
    for (const json& layer : token) {
      ASSERT_EQ(layer.size(), static_cast<size_t>(moe.config.moe.n_experts_used));
      for (const json& e : layer) {
        EXPECT_TRUE(e.get<int>() >= 0 && e.get<int>() < moe.config.moe.n_experts);
      }
    }
  }
  ASSERT_EQ(c["prompt_routed_experts"].size(), 5u);
  EXPECT_TRUE(c["prompt_routed_experts"][0].is_null());
  json streamed_req = req;
  streamed_req["stream"] = true;
  HttpReply stream = handle_completions(*moe.ctx, streamed_req.dump());
  const std::string sse = body_of(stream);
  json streamed = json::array();
  for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
    const json chunk = json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
    for (const json& ch : chunk["choices"]) {
      if (ch.contains("routed_experts")) {
        for (const json& t : ch["routed_experts"]) streamed.push_back(t);
      }
    }
  }
  EXPECT_EQ(streamed, c["routed_experts"]);
}

TEST(Handlers, ClientGoneAbortsAndFreesKv) {
  TinyServer s;
  HttpReply r = handle_completions(*s.ctx, json{{"prompt", {1, 2, 3, 4, 5, 6, 7, 8, 9}},
                                                {"max_tokens", 1500},
                                                {"ignore_eos", true},
                                                {"stream", true}}
                                               .dump());
  int writes = 0;
  PumpResult p = PumpResult::kMore;
  for (int i = 0; i < 1000 && p == PumpResult::kMore; ++i) {
    p = r.stream->pump([&](std::string_view) { return ++writes < 3; },
                       std::chrono::milliseconds(20));
  }
  EXPECT_EQ(p, PumpResult::kFailed);
  for (int i = 0; i < 200 && (s.loop->n_tickets() != 0 || s.loop->snapshot().kv_blocks_used != 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.loop->n_tickets(), 0);
  const EngineSnapshot snap = s.loop->snapshot();
  EXPECT_EQ(snap.kv_blocks_used, 0);
  EXPECT_EQ(snap.n_running, 0);
  EXPECT_EQ(snap.n_aborted, 1);
}

TEST(Handlers, MetricsCountAResponseFinishedOnceItEnds) {
  // The snapshot /metrics reads is published before a step's events reach the client, so
  // a client that has read its whole response never sees its sequences still running.
  TinyServer s;
  for (int i = 0; i < 40; ++i) {
    HttpReply r = handle_completions(*s.ctx, json{{"prompt", {1, 2, 3, i % 7}},
                                                  {"max_tokens", 1 + i % 4},
                                                  {"n", 1 + i % 2},
                                                  {"ignore_eos", true},
                                                  {"stream", i % 3 == 0}}
                                                 .dump());
    ASSERT_FALSE(body_of(r).empty());
    const EngineSnapshot snap = s.loop->snapshot();
    EXPECT_EQ(snap.n_running, 0) << "request " << i;
    EXPECT_EQ(snap.n_tickets, 0) << "request " << i;
    EXPECT_EQ(snap.kv_blocks_used, 0) << "request " << i;
  }
}

TEST(Handlers, ConcurrentRequestsEqualAlone) {
  TinyServer s;
  constexpr int kClients = 12;
  std::vector<json> bodies;
  for (int i = 0; i < kClients; ++i) {
    std::vector<int> prompt;
    for (int j = 0; j <= i % 5 + 2; ++j) prompt.push_back((i * 37 + j * 11) % 500);
    bodies.push_back({{"prompt", prompt},
                      {"max_tokens", 4 + i % 4},
                      {"seed", 100 + i},
                      {"temperature", i % 3 == 0 ? 0.0 : 0.9},
                      {"top_k", i % 2 ? 20 : 0},
                      {"logprobs", 1},
                      {"ignore_eos", true},
                      {"stream", i % 2 == 0},
                      {"deterministic", i % 4 != 3}});
  }
  std::vector<std::vector<int>> got(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      HttpReply r = handle_completions(*s.ctx, bodies[i].dump());
      const std::string b = body_of(r);
      if (bodies[i]["stream"]) {
        for (const json& e : sse_events(b)) {
          for (const json& c : e["choices"]) {
            for (const auto& id : c["logprobs"]["token_ids"]) got[i].push_back(id);
          }
        }
      } else {
        const json j = json::parse(b);
        for (const auto& id : j["choices"][0]["logprobs"]["token_ids"]) {
          got[i].push_back(id);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    if (!bodies[i]["deterministic"]) continue;
    engine::Request req;
    for (const auto& t : bodies[i]["prompt"]) req.prompt.push_back(t);
    req.max_tokens = bodies[i]["max_tokens"];
    req.ignore_eos = true;
    req.sampling.seed = bodies[i]["seed"];
    req.sampling.temperature = bodies[i]["temperature"];
    req.sampling.top_k = bodies[i]["top_k"];
    const auto alone = run_alone(s, req)[0];
    EXPECT_EQ(std::vector<int>(alone.ids.begin(), alone.ids.end()), got[i]) << "client " << i;
  }
}

TEST(Handlers, InfoEndpoints) {
  TinyServer s;
  HttpReply m = handle_models(*s.ctx);
  const json models = json::parse(m.body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][1]["id"], "default");
  EXPECT_EQ(json::parse(handle_health(*s.ctx).body)["status"], "ok");
  s.ctx->draining = true;
  EXPECT_EQ(handle_health(*s.ctx).status, 503);
  s.ctx->draining = false;
  const json tok = call(*s.ctx, handle_tokenize, {{"prompt", "hi!"}});
  EXPECT_EQ(tok["tokens"], json(std::vector<int>{'h', 'i', '!'}));
  EXPECT_EQ(tok["count"], 3);
  const json detok = call(*s.ctx, handle_detokenize, {{"tokens", tok["tokens"]}});
  EXPECT_EQ(detok["prompt"], "hi!");
  EXPECT_EQ(status_of(*s.ctx, handle_detokenize, R"({"tokens": [100000]})"), 400);
  const std::string metrics = handle_metrics(*s.ctx).body;
  EXPECT_NE(metrics.find("detllm_kv_blocks_total 512"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace detllm::server
