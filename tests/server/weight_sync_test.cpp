// vLLM's RL control plane without sockets (server/weight_sync.h, engine_loop.h): pause modes,
// the exclusive weight write, and the weight-transfer protocol over a synthetic tiny model.
// The decisive checks: after an update a seeded request equals, bit for bit, a server built on
// the new weights from the start; a keep-mode pause that holds a request refuses the update;
// bad bodies are 4xx naming the tensors, and nothing is written.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "server/api_error.h"
#include "server/handlers.h"
#include "server/http_router.h"
#include "server/weight_sync.h"
#include "server_test_util.h"
#include "weight_sync_test_util.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using testing::body_of;
using testing::TinyServer;

using testing::complete;
using testing::identity_fn;
using testing::post;
using Out = testing::Completion;
const json& kRequest = testing::seeded_request();

// Starts `body` on `t`, which fills `out`, and returns once the engine runs it. On a busy machine
// a tiny model can finish a request before this thread looks, so a request that ended unseen is
// sent again (the same request gives the same `out`); never looking in 50 tries is a failure.
void start_in_flight(TinyServer& s, const json& body, std::thread& t, Out& out) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    t = std::thread([&s, &out, body, done] {
      out = complete(*s.ctx, body);
      *done = true;
    });
    while (!*done && s.loop->snapshot().n_running == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!*done) return;
    t.join();
  }
  FAIL() << "the request always finished before it was seen running";
}

using testing::Shm;

TEST(WeightSync, UpdateReplaysAsAServerBuiltOnTheNewWeights) {
  TinyServer s;
  WeightSync ws(*s.loop, s.config, s.weights, identity_fn());
  s.ctx->weight_sync = &ws;
  const Out before = complete(*s.ctx);
  EXPECT_EQ(before.version, "initial");

  std::vector<float> norm = s.weights.out_norm;
  for (float& x : norm) x *= 1.5f;
  Shm shm(norm);
  EXPECT_EQ(post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", {{"backend", "shm"}}}}).status, 200);
  EXPECT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  const json info = {{"names", {"model.norm.weight"}},
                     {"dtype_names", {"float32"}},
                     {"shapes", {{static_cast<int64_t>(norm.size())}}},
                     {"shm_names", {shm.name}}};
  EXPECT_EQ(post(*s.ctx, "/update_weights", {{"update_info", info}}).status, 200);
  // Staged only: the engine still computes on the old weights.
  EXPECT_TRUE(complete(*s.ctx) == before);
  HttpReply fin = post(*s.ctx, "/finish_weight_update", {{"weight_version", "v1"}});
  ASSERT_EQ(fin.status, 200) << fin.body;
  EXPECT_EQ(json::parse(fin.body)["system_fingerprint"], "fp-v1");
  const Out after = complete(*s.ctx);
  EXPECT_EQ(after.version, "v1");
  EXPECT_FALSE(after == before);

  TinyServer fresh;  // the same synthetic weights, then the new norm before any engine runs
  std::copy(norm.begin(), norm.end(), fresh.weights.out_norm.begin());
  EXPECT_TRUE(complete(*fresh.ctx) == after);
}

TEST(WeightSync, BadUpdatesAreRefusedAndNothingIsWritten) {
  TinyServer s;
  WeightSync ws(*s.loop, s.config, s.weights, identity_fn());
  s.ctx->weight_sync = &ws;
  const Out before = complete(*s.ctx);
  EXPECT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 409);  // before init
  EXPECT_EQ(post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", {{"backend", "nccl"}}}}).status, 400);
  EXPECT_EQ(post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", {{"backend", "shm"}}}}).status, 200);
  EXPECT_EQ(post(*s.ctx, "/update_weights", {{"update_info", json::object()}}).status, 409);
  EXPECT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  const json info = {{"names", {"model.norm.weight", "model.layers.0.bogus.weight"}},
                     {"dtype_names", {"float64", "float32"}},
                     {"shapes", {{3}, {4}}},
                     {"shm_names", {"/x", "/y"}}};
  HttpReply r = post(*s.ctx, "/update_weights", {{"update_info", info}});
  EXPECT_EQ(r.status, 400);
  const std::string msg = json::parse(r.body)["error"]["message"];
  EXPECT_NE(msg.find("model.layers.0.bogus.weight: not a parameter"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.norm.weight: shape [3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
  EXPECT_EQ(post(*s.ctx, "/update_weights", {{"update_info", {{"names", {"model.norm.weight"}}}}}).status, 400);
  HttpRequestIn bad;
  bad.method = "POST";
  bad.target = "/update_weights";
  bad.body = "{\"update_info\": ";
  EXPECT_EQ(route_request(*s.ctx, bad).status, 400);
  EXPECT_EQ(post(*s.ctx, "/finish_weight_update", {{"weight_version", "noop"}}).status, 200);
  const Out after = complete(*s.ctx);
  EXPECT_EQ(after.version, "noop");
  EXPECT_TRUE(after == before);
}

TEST(WeightSync, KeepPauseHoldsRequestsAndRefusesAnUpdateUnderThem) {
  TinyServer s;
  WeightSync ws(*s.loop, s.config, s.weights, identity_fn());
  s.ctx->weight_sync = &ws;
  const json long_req = {{"prompt", "abc"}, {"max_tokens", 200}, {"temperature", 0.9},
                         {"seed", 9}, {"logprobs", 0}, {"ignore_eos", true}};
  const Out alone = complete(*s.ctx, long_req);
  Out kept;
  std::thread t;
  start_in_flight(s, long_req, t, kept);
  ASSERT_TRUE(t.joinable());
  EXPECT_EQ(post(*s.ctx, "/pause?mode=keep", nullptr).status, 200);
  EXPECT_TRUE(s.loop->paused());
  const int64_t steps = s.loop->snapshot().n_steps;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(s.loop->snapshot().n_steps, steps) << "a step ran during a keep-mode pause";
  EXPECT_EQ(post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", {{"backend", "shm"}}}}).status, 200);
  EXPECT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  HttpReply fin = post(*s.ctx, "/finish_weight_update", nullptr);
  EXPECT_EQ(fin.status, 409) << fin.body;
  EXPECT_EQ(post(*s.ctx, "/resume", nullptr).status, 200);
  t.join();
  EXPECT_TRUE(kept == alone);
  EXPECT_EQ(kept.version, "initial");
  // With nothing in flight the same finish goes through.
  EXPECT_EQ(post(*s.ctx, "/finish_weight_update", nullptr).status, 200);
  EXPECT_EQ(complete(*s.ctx).version, "update-1");
}

TEST(WeightSync, WaitPauseFinishesInFlightAndHoldsNewRequests) {
  TinyServer s;
  const json long_req = {{"prompt", "abc"}, {"max_tokens", 100}, {"temperature", 0.9},
                         {"seed", 9}, {"logprobs", 0}, {"ignore_eos", true}};
  Out first, held;
  std::thread t;
  start_in_flight(s, long_req, t, first);
  ASSERT_TRUE(t.joinable());
  EXPECT_EQ(post(*s.ctx, "/pause?mode=wait", nullptr).status, 200);
  t.join();  // /pause answered after the request in flight finished
  EXPECT_EQ(first.ids.size(), 100u);
  std::atomic<bool> done{false};
  std::thread h([&] {
    held = complete(*s.ctx);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE(done.load()) << "a request ran while paused";
  EXPECT_EQ(post(*s.ctx, "/resume", nullptr).status, 200);
  h.join();
  EXPECT_TRUE(held == complete(*s.ctx));
  // Without --weight-transfer the weight endpoints say how to get them.
  HttpReply r = post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", {{"backend", "shm"}}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(post(*s.ctx, "/pause?mode=often", nullptr).status, 400);
}

}  // namespace
}  // namespace detllm::server
