// TcpStoreClient: a client of torch.distributed's TCPStore, the key-value store a trainer's
// Python opens to rendezvous with the processes that join its NCCL group (vLLM's
// StatelessProcessGroup, over which TRL's and vLLM's weight transfer publish the NCCL unique id).
//
// The wire protocol is c10d's (torch/csrc/distributed/c10d/TCPStore.cpp): each query is one
// byte (VALIDATE 0, SET 1, GET 3, ADD 4, WAIT 6, CANCEL_WAIT 12, PING 13), then its fields:
// strings and byte strings as a uint64 length and the bytes, integers in the host's
// (little-endian) layout. On connecting a client sends VALIDATE with the magic 0x3C85F7CE and
// PINGs its pid back, as torch's client does. Torch's public get/set/add prefix keys with "/";
// these methods take the key as Python passes it and add the prefix the same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace detllm::server {

class TcpStoreClient {
 public:
  // Connects to host:port (retrying until `timeout`: the trainer may not listen yet), then
  // validates and pings. Throws detllm::Error naming the address when it cannot.
  TcpStoreClient(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
  ~TcpStoreClient();
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  // What TCPStore(is_master=False, world_size=N) does after connecting (wait_for_workers): adds
  // 1 to the unprefixed counter "init/", which the master's constructor waits to reach N.
  // Returns the counter after the add.
  int64_t join_workers();

  // store.add(key, delta): the value after the add.
  int64_t add(const std::string& key, int64_t delta);
  // store.set(key, value).
  void set(const std::string& key, std::span<const uint8_t> value);
  // store.get(key): waits (up to the timeout) until the key exists, then reads it.
  std::vector<uint8_t> get(const std::string& key);

 private:
  void send_all(const std::string& bytes);
  void recv_all(void* dst, size_t n);
  // Waits for `key` (already prefixed) as torch's doWait: WAIT, then STOP_WAITING, or after the
  // timeout CANCEL_WAIT and an error naming the key.
  void wait_key(const std::string& key);

  int fd_ = -1;
  std::string where_;  // "host:port", for messages
  std::chrono::milliseconds timeout_;
};

}  // namespace detllm::server
