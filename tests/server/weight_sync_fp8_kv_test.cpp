// detllm serve's weight sync with an FP8 KV cache (server/weight_place.h): after
// /finish_weight_update the KV scales are bounded again from the updated weights, so the server
// answers, bit for bit, as a server built on the new weights; without that refresh (a
// WeightSync with no place hook, the scales as loaded) it does not — the negative control.
// CPU backend; the GPU's placement is tests/cuda/cuda_weight_sync_test.cpp.
// Run: build/tests/test_server --gtest_filter='WeightSyncFp8Kv*'.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <deque>
#include <vector>

#include "server/server_test_util.h"
#include "server/weight_place.h"
#include "server/weight_sync.h"
#include "server/weight_sync_test_util.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using testing::complete;
using testing::Completion;
using testing::post;
using testing::Shm;
using testing::TinyServer;

std::unique_ptr<kernels::Ops> cpu_fp8_kv() {
  return kernels::make_cpu_ops(2, CpuActivations::kF32, /*kv_fp8=*/true);
}

// k_proj of every layer × 5 through shm, then finished; the completion after it.
Completion update_k(TinyServer& s, WeightSync& ws, std::vector<std::vector<float>>& k_new) {
  s.ctx->weight_sync = &ws;
  std::deque<Shm> shms;  // never moved: each unlinks its name when destroyed
  json names = json::array(), dtypes = json::array(), shapes = json::array(), shm = json::array();
  k_new.clear();
  for (size_t li = 0; li < s.weights.layers.size(); ++li) {
    const HostTensor& k = s.weights.layers[li].wk.w;
    std::vector<float> v = k.data;
    for (float& x : v) x *= 5.0f;
    k_new.push_back(v);
    shms.emplace_back(v);
    names.push_back("model.layers." + std::to_string(li) + ".self_attn.k_proj.weight");
    dtypes.push_back("float32");
    shapes.push_back(k.shape);
    shm.push_back(shms.back().name);
  }
  EXPECT_EQ(post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", {{"backend", "shm"}}}}).status, 200);
  EXPECT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  const json info = {{"names", names}, {"dtype_names", dtypes}, {"shapes", shapes},
                     {"shm_names", shm}};
  HttpReply upd = post(*s.ctx, "/update_weights", {{"update_info", info}});
  EXPECT_EQ(upd.status, 200) << upd.body;
  HttpReply fin = post(*s.ctx, "/finish_weight_update", {{"weight_version", "k5"}});
  EXPECT_EQ(fin.status, 200) << fin.body;
  return complete(*s.ctx);
}

TEST(WeightSyncFp8Kv, ScalesFollowTheUpdateAndReplayAsAFreshServer) {
  TinyServer s(TinyServer::default_engine(), "tiny-llama", cpu_fp8_kv);
  ASSERT_TRUE(s.model->kv_fp8_scales());
  WeightSync ws(*s.loop, s.config, s.weights, testing::identity_fn(), {}, 0,
                place_on_device(*s.model, *s.ops, s.weights));
  std::vector<std::vector<float>> k_new;
  const Completion after = update_k(s, ws, k_new);
  EXPECT_EQ(after.version, "k5");

  TinyServer fresh(TinyServer::default_engine(), "tiny-llama", cpu_fp8_kv, [&](ModelWeights& w) {
    for (size_t li = 0; li < w.layers.size(); ++li) w.layers[li].wk.w.data = k_new[li];
  });
  const Completion want = complete(*fresh.ctx);
  EXPECT_TRUE(after == want) << "the synced server differs from one built on the new weights";

  // The control: the same update with the scales left as loaded answers otherwise.
  TinyServer stale(TinyServer::default_engine(), "tiny-llama", cpu_fp8_kv);
  WeightSync ws_stale(*stale.loop, stale.config, stale.weights, testing::identity_fn(), {}, 0,
                      WeightSync::PlaceFn{});
  std::vector<std::vector<float>> unused;
  const Completion stale_after = update_k(stale, ws_stale, unused);
  EXPECT_FALSE(stale_after == want) << "stale FP8 KV scales gave the fresh bits: the control "
                                       "cannot fail";
}

}  // namespace
}  // namespace detllm::server
