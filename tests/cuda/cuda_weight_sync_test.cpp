// `detllm serve --weight-transfer` on the GPU (server/weight_place.h): an update through the shm
// backend — the final norm in fp32, layer 0's up_proj in bf16 — is uploaded into the CUDA
// model's placed weights in place, and a seeded request afterwards equals, bit for bit, a
// server whose CUDA model was built on the new weights from the start; before the finish the
// old weights still answer. Run: test_cuda --gtest_filter='CudaWeightSync*' (skips without a
// GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "cuda/cuda_test_util.h"
#include "server/weight_place.h"
#include "server/weight_sync_test_util.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using testing::complete;
using testing::Completion;
using testing::post;
using testing::Shm;
using testing::TinyServer;

std::unique_ptr<kernels::Ops> gpu() { return kernels::cuda_testing::invariant_ops(); }

TEST(CudaWeightSync, ShmUpdateIsPlacedAndReplaysAsAServerBuiltOnTheNewWeights) {
  DETLLM_SKIP_WITHOUT_GPU();
  TinyServer s(TinyServer::default_engine(), "tiny-llama", gpu);
  WeightSync ws(*s.loop, s.config, s.weights, testing::identity_fn(), {}, 0,
                place_on_device(*s.model, *s.ops, s.weights));
  s.ctx->weight_sync = &ws;
  const Completion before = complete(*s.ctx);

  // New values: the final norm x 1.5 (fp32) and layer 0's up_proj x 0.5 sent as bf16.
  std::vector<float> norm = s.weights.out_norm;
  for (float& x : norm) x *= 1.5f;
  const HostTensor& up = s.weights.layers.at(0).w_up.w;
  std::vector<uint16_t> up_bf16(up.data.size());
  std::vector<float> up_new(up.data.size());
  for (size_t i = 0; i < up.data.size(); ++i) {
    up_bf16[i] = f32_to_bf16(up.data[i] * 0.5f);
    up_new[i] = bf16_to_f32(up_bf16[i]);  // what the server widens them to
  }
  const Shm shm_norm(norm);
  const Shm shm_up(reinterpret_cast<const uint8_t*>(up_bf16.data()), up_bf16.size() * 2);
  ASSERT_EQ(post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", {{"backend", "shm"}}}}).status, 200);
  ASSERT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  const json info = {{"names", {"model.norm.weight", "model.layers.0.mlp.up_proj.weight"}},
                     {"dtype_names", {"float32", "bfloat16"}},
                     {"shapes", {{static_cast<int64_t>(norm.size())}, up.shape}},
                     {"shm_names", {shm_norm.name, shm_up.name}}};
  HttpReply upd = post(*s.ctx, "/update_weights", {{"update_info", info}});
  ASSERT_EQ(upd.status, 200) << upd.body;
  EXPECT_TRUE(complete(*s.ctx) == before) << "staged values answered before the finish";
  HttpReply fin = post(*s.ctx, "/finish_weight_update", {{"weight_version", "v1"}});
  ASSERT_EQ(fin.status, 200) << fin.body;
  const Completion after = complete(*s.ctx);
  EXPECT_EQ(after.version, "v1");
  EXPECT_FALSE(after == before) << "the update did not reach the GPU's weights";

  TinyServer fresh(TinyServer::default_engine(), "tiny-llama", gpu, [&](ModelWeights& w) {
    w.out_norm = norm;
    w.layers.at(0).w_up.w.data = up_new;
  });
  EXPECT_TRUE(complete(*fresh.ctx) == after)
      << "the placed update differs from a model built on the new weights";
}

}  // namespace
}  // namespace detllm::server
