// The NCCL data path of the weight transfer (server/nccl/nccl_link.h, weight_sync.h's nccl
// backend) on two GPUs: this process plays both ends — a trainer rank 0 on device 0 that
// broadcasts as vLLM's packed_nccl_broadcast_producer does (append raw bytes, break once the
// total exceeds the buffer), and the server's WeightSync joining as rank 1 on device 1 through
// /init_weight_transfer_engine with nccl_unique_id_b64 — each end on its own thread, as the two
// processes run concurrently. After /finish_weight_update a seeded request must equal, bit for
// bit, a server built on the new weights; a refused update must still take every broadcast so
// that the next one goes through. Skips with fewer than two GPUs; needs a build with NCCL.
#include <gtest/gtest.h>

#if DETLLM_HAVE_NCCL

#include <cuda_runtime.h>

#include <cstring>
#include <future>

#include "core/dtype.h"
#include "require_gpu.h"
#include "server/handlers.h"
#include "server/http_router.h"
#include "server/nccl/nccl_link.h"
#include "server/server_test_util.h"
#include "server/weight_sync_test_util.h"
#include "server/weight_sync.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using testing::body_of;
using testing::TinyServer;

std::string base64(const NcclUniqueId& id) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < id.size(); i += 3) {
    const uint32_t b0 = id[i], b1 = i + 1 < id.size() ? id[i + 1] : 0,
                   b2 = i + 2 < id.size() ? id[i + 2] : 0;
    const uint32_t w = (b0 << 16) | (b1 << 8) | b2;
    out += k[(w >> 18) & 63];
    out += k[(w >> 12) & 63];
    out += i + 1 < id.size() ? k[(w >> 6) & 63] : '=';
    out += i + 2 < id.size() ? k[w & 63] : '=';
  }
  return out;
}

using testing::complete;
using testing::post;

struct Sent {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void trainer_send(NcclComm& trainer, const std::vector<Sent>& tensors, uint64_t buffer) {
  size_t next = 0;
  while (next < tensors.size()) {
    std::vector<uint8_t> chunk;
    while (next < tensors.size()) {
      const auto& b = tensors[next++].bytes;
      chunk.insert(chunk.end(), b.begin(), b.end());
      if (chunk.size() > buffer) break;
    }
    trainer.send(chunk.data(), chunk.size());
  }
}

json update_info(const std::vector<Sent>& tensors) {
  json names = json::array(), dtypes = json::array(), shapes = json::array();
  for (const Sent& t : tensors) {
    names.push_back(t.name);
    dtypes.push_back(t.dtype);
    shapes.push_back(t.shape);
  }
  return {{"update_info", {{"names", names}, {"dtype_names", dtypes}, {"shapes", shapes}}}};
}

TEST(NcclWeightTransfer, TwoGpusPackedUpdateReplaysAsTheNewWeights) {
  DETLLM_SKIP_WITHOUT_GPU();
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  if (n < 2) GTEST_SKIP() << "needs two GPUs (trainer rank 0 on device 0, server on device 1)";

  TinyServer s;
  WeightSync ws(*s.loop, s.config, s.weights,
                [](const std::string& v) {
                  WeightIdentity id;
                  id.version = v;
                  id.fingerprint_deterministic = "fp-" + v;
                  id.fingerprint_other = "fpo-" + v;
                  return id;
                },
                nccl_link_factory(), /*nccl_device=*/1);
  s.ctx->weight_sync = &ws;
  const testing::Completion before = complete(*s.ctx);

  const NcclUniqueId uid = make_nccl_unique_id();
  const uint64_t buffer = 4096;
  const json init = {{"init_info", {{"rank_offset", 1}, {"world_size", 2}, {"packed", true},
                                    {"packed_buffer_size_bytes", buffer},
                                    {"nccl_unique_id_b64", base64(uid)}}}};
  auto joined = std::async(std::launch::async,
                           [&] { return post(*s.ctx, "/init_weight_transfer_engine", init); });
  NcclComm trainer(uid, 0, 2, 0);  // both ranks in ncclCommInitRank and the warm-up together
  HttpReply ji = joined.get();
  ASSERT_EQ(ji.status, 200) << ji.body;

  // New values: the final norm x 1.5 (fp32), layer 0's up_proj x 0.5 (bf16).
  std::vector<float> norm = s.weights.out_norm;
  for (float& x : norm) x *= 1.5f;
  const HostTensor& up = s.weights.layers.at(0).w_up.w;
  std::vector<float> up_new(up.data.size());
  Sent up_t{"model.layers.0.mlp.up_proj.weight", "bfloat16", up.shape, {}};
  up_t.bytes.resize(up.data.size() * 2);
  for (size_t i = 0; i < up.data.size(); ++i) {
    const uint16_t h = f32_to_bf16(up.data[i] * 0.5f);
    std::memcpy(up_t.bytes.data() + 2 * i, &h, 2);
    up_new[i] = bf16_to_f32(h);
  }
  Sent norm_t{"model.norm.weight", "float32", {static_cast<int64_t>(norm.size())}, {}};
  norm_t.bytes.resize(norm.size() * 4);
  std::memcpy(norm_t.bytes.data(), norm.data(), norm_t.bytes.size());
  const std::vector<Sent> good = {up_t, norm_t};

  ASSERT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  // A refused update (an unknown name): received and dropped, then the good one.
  std::vector<Sent> bad = good;
  bad[1].name = "model.layers.0.bogus.weight";
  auto refused = std::async(std::launch::async,
                            [&] { return post(*s.ctx, "/update_weights", update_info(bad)); });
  trainer_send(trainer, bad, buffer);
  EXPECT_EQ(refused.get().status, 400);
  auto staged = std::async(std::launch::async,
                           [&] { return post(*s.ctx, "/update_weights", update_info(good)); });
  trainer_send(trainer, good, buffer);
  HttpReply st = staged.get();
  ASSERT_EQ(st.status, 200) << st.body;
  ASSERT_EQ(post(*s.ctx, "/finish_weight_update", {{"weight_version", "step-1"}}).status, 200);
  const testing::Completion after = complete(*s.ctx);
  EXPECT_FALSE(after == before);

  TinyServer fresh;
  fresh.weights.out_norm = norm;
  std::copy(up_new.begin(), up_new.end(), fresh.weights.layers.at(0).w_up.w.data.begin());
  EXPECT_TRUE(complete(*fresh.ctx) == after);
}

}  // namespace
}  // namespace detllm::server

#endif  // DETLLM_HAVE_NCCL
