// What the weight-sync tests share (weight_sync_test.cpp, weight_sync_nccl_test.cpp,
// tests/cuda/cuda_nccl_weight_transfer_test.cpp): a seeded completion read back as token ids
// and logprob bits with its weight version, a POST through the router, and a weight identity
// that names each version.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "server/handlers.h"
#include "server/http_router.h"
#include "server/weight_sync.h"
#include "server_test_util.h"

namespace detllm::server::testing {

inline const nlohmann::json& seeded_request() {
  static const nlohmann::json r = {{"prompt", "abc"}, {"max_tokens", 6}, {"temperature", 0.9},
                                   {"seed", 5}, {"logprobs", 0}};
  return r;
}

// A completion's token ids and logprob bits (compared), and the weight version it carried.
struct Completion {
  std::vector<int32_t> ids;
  std::vector<uint32_t> logprob_bits;
  std::string version;
  bool operator==(const Completion& o) const {
    return ids == o.ids && logprob_bits == o.logprob_bits;
  }
};

inline Completion complete(ServerContext& ctx, const nlohmann::json& body = seeded_request()) {
  HttpReply r = handle_completions(ctx, body.dump());
  EXPECT_EQ(r.status, 200);
  Completion o;
  for (const auto& [k, v] : r.headers) {
    if (k == "X-Detllm-Weight-Version") o.version = v;
  }
  const nlohmann::json j = nlohmann::json::parse(body_of(r));
  const nlohmann::json& lp = j["choices"][0]["logprobs"];
  for (const nlohmann::json& t : lp["token_ids"]) o.ids.push_back(t.get<int32_t>());
  for (const nlohmann::json& l : lp["token_logprobs"]) {
    const float f = l.get<float>();
    uint32_t b;
    std::memcpy(&b, &f, 4);
    o.logprob_bits.push_back(b);
  }
  return o;
}

inline HttpReply post(ServerContext& ctx, const std::string& target, const nlohmann::json& body) {
  HttpRequestIn r;
  r.method = "POST";
  r.target = target;
  r.body = body.is_null() ? "" : body.dump();
  return route_request(ctx, r);
}

// Version v is identified as fingerprints "fp-v" / "fpo-v".
inline WeightSync::IdentityFn identity_fn() {
  return [](const std::string& v) {
    WeightIdentity id;
    id.version = v;
    id.fingerprint_deterministic = "fp-" + v;
    id.fingerprint_other = "fpo-" + v;
    return id;
  };
}

// A POSIX shared-memory object holding `bytes` (or fp32 `values`), unlinked at the end: what
// the shm backend of /update_weights reads. Each gets a name of its own in the process.
struct Shm {
  std::string name;
  explicit Shm(const std::vector<float>& values)
      : Shm(reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)) {}
  Shm(const uint8_t* bytes, size_t n) {
    static std::atomic<int> counter{0};
    name = "/detllm-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(n)), 0);
    EXPECT_EQ(write(fd, bytes, n), static_cast<ssize_t>(n));
    close(fd);
  }
  Shm(const Shm&) = delete;
  Shm& operator=(const Shm&) = delete;
  ~Shm() { shm_unlink(name.c_str()); }
};

}  // namespace detllm::server::testing
