// The nccl backend of vLLM's weight-transfer protocol (server/weight_sync.h) with the NCCL
// group replaced by a host queue of broadcasts (FakeLink), which a transcription of vLLM's
// trainer loop fills (packed_nccl_broadcast_producer: append raw bytes, break once the total
// exceeds the buffer). What this checks without GPUs: TRL's exact init_info joins as rank
// rank_offset; packed and unpacked updates are unpacked into the right tensors and applied
// atomically at finish (a seeded replay equals a server built on the new weights, bit for
// bit); a refused update still takes every broadcast (the group stays in step) and stages
// nothing; a receiver that cut the stream differently fails loudly (negative control); the
// NCCL-only refusals name their field. The NCCL data path itself: tests/cuda (two GPUs).
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <future>
#include <thread>

#include "core/dtype.h"
#include "core/error.h"
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

// The broadcasts a trainer issued, in order; receive() takes the next one, which must have the
// receiver's size (a real NCCL group would hang or mix tensors otherwise).
struct Wire {
  std::deque<std::vector<uint8_t>> broadcasts;
  std::vector<NcclJoinInfo> joins;
};

class FakeLink : public NcclLink {
 public:
  explicit FakeLink(Wire& w) : w_(w) {}
  void receive(void* dst, size_t bytes) override {
    check(!w_.broadcasts.empty(), "FakeLink: no broadcast pending (the receiver expects one of "
          "{} bytes the trainer never sent)", bytes);
    std::vector<uint8_t> b = std::move(w_.broadcasts.front());
    w_.broadcasts.pop_front();
    check(b.size() == bytes, "FakeLink: the trainer broadcast {} bytes, the receiver expected {}",
          b.size(), bytes);
    if (bytes > 0) std::memcpy(dst, b.data(), bytes);
  }
  std::string describe() const override { return "fake NCCL"; }

 private:
  Wire& w_;
};

NcclLinkFactory fake_factory(Wire& w) {
  return [&w](const NcclJoinInfo& info) -> std::unique_ptr<NcclLink> {
    w.joins.push_back(info);
    return std::make_unique<FakeLink>(w);
  };
}

struct Sent {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// vLLM's packed_nccl_broadcast_producer (packed) or one broadcast per tensor.
void trainer_broadcast(Wire& w, const std::vector<Sent>& tensors, bool packed, uint64_t buffer) {
  if (!packed) {
    for (const Sent& t : tensors) w.broadcasts.push_back(t.bytes);
    return;
  }
  size_t next = 0;
  while (next < tensors.size()) {
    std::vector<uint8_t> chunk;
    while (next < tensors.size()) {
      const auto& b = tensors[next++].bytes;
      chunk.insert(chunk.end(), b.begin(), b.end());
      if (chunk.size() > buffer) break;
    }
    w.broadcasts.push_back(std::move(chunk));
  }
}

json update_info(const std::vector<Sent>& tensors) {
  json names = json::array(), dtypes = json::array(), shapes = json::array();
  for (const Sent& t : tensors) {
    names.push_back(t.name);
    dtypes.push_back(t.dtype);
    shapes.push_back(t.shape);
  }
  return {{"names", names}, {"dtype_names", dtypes}, {"shapes", shapes}};
}

Sent f32_tensor(const std::string& name, const std::vector<float>& v) {
  Sent s{name, "float32", {static_cast<int64_t>(v.size())}, {}};
  s.bytes.resize(v.size() * 4);
  std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  return s;
}

Sent bf16_tensor(const std::string& name, const std::vector<int64_t>& shape,
                 const std::vector<float>& v, std::vector<float>* widened) {
  Sent s{name, "bfloat16", shape, {}};
  s.bytes.resize(v.size() * 2);
  widened->resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(s.bytes.data() + 2 * i, &h, 2);
    (*widened)[i] = bf16_to_f32(h);
  }
  return s;
}

// TRL's init_info (VLLMClient.init_communicator with vLLM >= 0.28), plus the buffer size.
json trl_init(uint64_t buffer) {
  return {{"init_info", {{"master_address", "10.1.2.3"}, {"master_port", 51216},
                         {"rank_offset", 1}, {"world_size", 2}, {"packed", true},
                         {"packed_buffer_size_bytes", buffer}}}};
}

// The new values of a test update, in the order they are sent: the final norm x 1.5 and
// layer 0's norms x 1.1 (fp32), layer 0's up_proj x 0.5 (as bf16), layer 1's norms x 0.9. With
// a buffer of three norm vectors the packed cut is [3 norms + up_proj], [2 norms]: two
// broadcasts for six tensors, where the unpacked cut has six.
struct Update {
  std::vector<Sent> sent;
  std::vector<std::pair<std::vector<float>* (*)(TinyServer&), std::vector<float>>> vectors;
  std::vector<float> up;  // layer 0's up_proj as the engine must then hold it
  uint64_t buffer = 0;
};

Update make_update(TinyServer& s) {
  Update u;
  using Get = std::vector<float>* (*)(TinyServer&);
  auto vec = [&](const std::string& name, Get get, float scale) {
    std::vector<float> v = *get(s);
    for (float& x : v) x *= scale;
    u.sent.push_back(f32_tensor(name, v));
    u.vectors.emplace_back(get, v);
  };
  vec("model.norm.weight", [](TinyServer& t) { return &t.weights.out_norm; }, 1.5f);
  vec("model.layers.0.input_layernorm.weight",
      [](TinyServer& t) { return &t.weights.layers.at(0).attn_norm; }, 1.1f);
  vec("model.layers.0.post_attention_layernorm.weight",
      [](TinyServer& t) { return &t.weights.layers.at(0).ffn_norm; }, 1.1f);
  const HostTensor& w = s.weights.layers.at(0).w_up.w;
  std::vector<float> half(w.data);
  for (float& x : half) x *= 0.5f;
  u.sent.push_back(bf16_tensor("model.layers.0.mlp.up_proj.weight", w.shape, half, &u.up));
  vec("model.layers.1.input_layernorm.weight",
      [](TinyServer& t) { return &t.weights.layers.at(1).attn_norm; }, 0.9f);
  vec("model.layers.1.post_attention_layernorm.weight",
      [](TinyServer& t) { return &t.weights.layers.at(1).ffn_norm; }, 0.9f);
  u.buffer = 3 * s.weights.out_norm.size() * sizeof(float);
  return u;
}

// A server whose weights hold the update's values before any engine runs.
void apply(const Update& u, TinyServer& t) {
  for (const auto& [get, values] : u.vectors) std::copy(values.begin(), values.end(), get(t)->begin());
  std::copy(u.up.begin(), u.up.end(), t.weights.layers.at(0).w_up.w.data.begin());
}

TEST(WeightSyncNccl, TrlsInitJoinsAndAPackedUpdateReplaysAsTheNewWeights) {
  TinyServer s;
  Wire wire;
  WeightSync ws(*s.loop, s.config, s.weights, identity_fn(), fake_factory(wire), 3);
  s.ctx->weight_sync = &ws;
  const Out before = complete(*s.ctx);
  const Update u = make_update(s);
  HttpReply init = post(*s.ctx, "/init_weight_transfer_engine", trl_init(u.buffer));
  ASSERT_EQ(init.status, 200) << init.body;
  EXPECT_EQ(json::parse(init.body)["backend"], "nccl");
  ASSERT_EQ(wire.joins.size(), 1u);
  EXPECT_EQ(wire.joins[0].master_address, "10.1.2.3");
  EXPECT_EQ(wire.joins[0].master_port, 51216);
  EXPECT_EQ(wire.joins[0].rank, 1);
  EXPECT_EQ(wire.joins[0].world_size, 2);
  EXPECT_EQ(wire.joins[0].device, 3);
  EXPECT_FALSE(wire.joins[0].unique_id.has_value());

  trainer_broadcast(wire, u.sent, true, u.buffer);
  EXPECT_EQ(wire.broadcasts.size(), 2u);  // six tensors packed into two chunks
  ASSERT_EQ(post(*s.ctx, "/start_weight_update", json::object()).status, 200);
  HttpReply up = post(*s.ctx, "/update_weights", {{"update_info", update_info(u.sent)}});
  ASSERT_EQ(up.status, 200) << up.body;
  EXPECT_TRUE(wire.broadcasts.empty());
  EXPECT_TRUE(complete(*s.ctx) == before);  // staged only
  ASSERT_EQ(post(*s.ctx, "/finish_weight_update", json::object()).status, 200);
  const Out after = complete(*s.ctx);
  EXPECT_EQ(after.version, "update-1");
  EXPECT_FALSE(after == before);
  TinyServer fresh;
  apply(u, fresh);
  EXPECT_TRUE(complete(*fresh.ctx) == after);

  // Empty lists: vLLM reuses the previous update's names, dtypes and shapes; here unpacked (as
  // vLLM < 0.28 said per update). The same values again give the same outputs.
  trainer_broadcast(wire, u.sent, false, u.buffer);
  EXPECT_EQ(wire.broadcasts.size(), u.sent.size());
  ASSERT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  HttpReply again = post(*s.ctx, "/update_weights", {{"update_info", {{"names", json::array()},
      {"dtype_names", json::array()}, {"shapes", json::array()}, {"packed", false}}}});
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_TRUE(wire.broadcasts.empty());
  ASSERT_EQ(post(*s.ctx, "/finish_weight_update", {{"weight_version", "v2"}}).status, 200);
  const Out replay = complete(*s.ctx);
  EXPECT_EQ(replay.version, "v2");
  EXPECT_TRUE(replay == after);
}

TEST(WeightSyncNccl, RefusedUpdatesTakeEveryBroadcastAndStageNothing) {
  TinyServer s;
  Wire wire;
  WeightSync ws(*s.loop, s.config, s.weights, identity_fn(), fake_factory(wire));
  s.ctx->weight_sync = &ws;
  const Out before = complete(*s.ctx);
  Update u = make_update(s);
  ASSERT_EQ(post(*s.ctx, "/init_weight_transfer_engine", trl_init(u.buffer)).status, 200);
  ASSERT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  std::vector<Sent> bad = u.sent;
  bad.push_back(f32_tensor("model.layers.0.bogus.weight", {1, 2, 3}));
  Sent f64{"model.layers.0.input_layernorm.weight", "float64",
           {static_cast<int64_t>(s.weights.layers.at(0).attn_norm.size())}, {}};
  f64.bytes.resize(s.weights.layers.at(0).attn_norm.size() * 8);
  bad.push_back(f64);
  trainer_broadcast(wire, bad, true, u.buffer);
  HttpReply r = post(*s.ctx, "/update_weights", {{"update_info", update_info(bad)}});
  EXPECT_EQ(r.status, 400);
  const std::string msg = json::parse(r.body)["error"]["message"];
  EXPECT_NE(msg.find("model.layers.0.bogus.weight: not a parameter"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("received and dropped"), std::string::npos) << msg;
  EXPECT_TRUE(wire.broadcasts.empty()) << "the refused update left broadcasts unreceived";
  // The group is still in step: the good update goes through after the refused one.
  trainer_broadcast(wire, u.sent, true, u.buffer);
  ASSERT_EQ(post(*s.ctx, "/update_weights", {{"update_info", update_info(u.sent)}}).status, 200);
  // Twice the same tensor in one update: refused, drained.
  trainer_broadcast(wire, u.sent, true, u.buffer);
  EXPECT_EQ(post(*s.ctx, "/update_weights", {{"update_info", update_info(u.sent)}}).status, 400);
  EXPECT_TRUE(wire.broadcasts.empty());
  ASSERT_EQ(post(*s.ctx, "/finish_weight_update", nullptr).status, 200);
  EXPECT_FALSE(complete(*s.ctx) == before);
}

TEST(WeightSyncNccl, AReceiverThatCutsOtherwiseFailsLoudly) {
  // Negative control of the cut: the trainer packs, the receiver was told "unpacked".
  TinyServer s;
  Wire wire;
  WeightSync ws(*s.loop, s.config, s.weights, identity_fn(), fake_factory(wire));
  s.ctx->weight_sync = &ws;
  const Update u = make_update(s);
  json init = trl_init(u.buffer);
  init["init_info"]["packed"] = false;
  ASSERT_EQ(post(*s.ctx, "/init_weight_transfer_engine", init).status, 200);
  ASSERT_EQ(post(*s.ctx, "/start_weight_update", nullptr).status, 200);
  trainer_broadcast(wire, u.sent, true, u.buffer);
  HttpReply r = post(*s.ctx, "/update_weights", {{"update_info", update_info(u.sent)}});
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(r.body.find("the group was left"), std::string::npos) << r.body;
  // No group any more: the next update says to init again; nothing was staged.
  EXPECT_EQ(post(*s.ctx, "/update_weights", {{"update_info", update_info(u.sent)}}).status, 409);
  const Out before = complete(*s.ctx);
  ASSERT_EQ(post(*s.ctx, "/finish_weight_update", nullptr).status, 200);
  EXPECT_TRUE(complete(*s.ctx) == before);
}

TEST(WeightSyncNccl, RefusalsNameTheField) {
  TinyServer s;
  Wire wire;
  WeightSync ws(*s.loop, s.config, s.weights, identity_fn(), fake_factory(wire));
  s.ctx->weight_sync = &ws;
  auto init_param = [&](json info) {
    HttpReply r = post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", info}});
    EXPECT_EQ(r.status, 400) << info.dump();
    return json::parse(r.body)["error"].value("param", std::string());
  };
  const json trl = trl_init(1000)["init_info"];
  json x = trl;
  x["world_size"] = 3;
  EXPECT_EQ(init_param(x), "init_info.world_size");
  x = trl;
  x["tensor_parallel"] = 2;
  EXPECT_EQ(init_param(x), "init_info.tensor_parallel");
  x = trl;
  x["nccl_unique_id_b64"] = "AAAA";
  EXPECT_EQ(init_param(x), "init_info.nccl_unique_id_b64");  // both modes
  x = trl;
  x.erase("master_address");
  x.erase("master_port");
  x["nccl_unique_id_b64"] = "not base64!";
  EXPECT_EQ(init_param(x), "init_info.nccl_unique_id_b64");
  x = trl;
  x.erase("master_port");
  EXPECT_EQ(init_param(x), "init_info.master_address");
  EXPECT_EQ(init_param({{"backend", "ipc"}}), "init_info.backend");
  EXPECT_TRUE(wire.joins.empty()) << "a refused init joined the group";
  // A unique id instead of a TCPStore: no address needed.
  x = {{"rank_offset", 1}, {"world_size", 2},
       {"nccl_unique_id_b64", std::string(168, 'A') + "AAA="}};
  ASSERT_EQ(post(*s.ctx, "/init_weight_transfer_engine", {{"init_info", x}}).status, 200);
  ASSERT_EQ(wire.joins.size(), 1u);
  EXPECT_TRUE(wire.joins[0].unique_id.has_value());
  // A build without NCCL (no factory) refuses the backend by name.
  TinyServer t;
  WeightSync plain(*t.loop, t.config, t.weights, identity_fn());
  t.ctx->weight_sync = &plain;
  HttpReply r = post(*t.ctx, "/init_weight_transfer_engine", trl_init(1000));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("built with NCCL"), std::string::npos) << r.body;
  EXPECT_EQ(plain.backends(), (std::vector<std::string>{"path", "shm"}));
  EXPECT_EQ(ws.backends(), (std::vector<std::string>{"path", "shm", "nccl"}));
}

}  // namespace
}  // namespace detllm::server
