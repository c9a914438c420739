// The NCCL rendezvous against torch's real TCPStore (server/tcp_store_client.h,
// nccl_link.h join_stateless_group): a Python process plays the trainer exactly as vLLM's
// StatelessProcessGroup.create(rank=0) and PyNcclCommunicator do — a listening socket handed to
// TCPStore(is_master=True, world_size=2, use_libuv=False) as master_listen_fd, whose
// constructor returns only once this rank has joined, then store.set("broadcast_from/0/0",
// pickle.dumps(ncclUniqueId)) with random bytes — and the C++ side must read back those bytes.
// Needs a Python with torch: DETLLM_TORCH_PYTHON (CMake sets it from the cache variable of the
// same name); skipped without it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "server/nccl_link.h"
#include "server/tcp_store_client.h"

namespace detllm::server {
namespace {

const char* kTrainer = R"PY(
import ctypes, os, pickle, socket, sys, types
from datetime import timedelta
import torch.distributed as dist

# vLLM's structure, under vLLM's module name, so the pickle is byte for byte vLLM's (the
# package chain is registered so that pickle can import the name back).
name = "vllm.distributed.device_communicators.pynccl_wrapper"
parts = name.split(".")
for i in range(1, len(parts) + 1):
    sys.modules[".".join(parts[:i])] = types.ModuleType(".".join(parts[:i]))
for i in range(1, len(parts)):
    setattr(sys.modules[".".join(parts[:i])], parts[i], sys.modules[".".join(parts[:i + 1])])
m = sys.modules[name]
class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]
ncclUniqueId.__module__ = name
m.ncclUniqueId = ncclUniqueId

# StatelessProcessGroup.create(host, port, rank=0, world_size=2)
listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listen.bind(("127.0.0.1", 0))
listen.listen()
print(listen.getsockname()[1], flush=True)
store = dist.TCPStore("127.0.0.1", listen.getsockname()[1], world_size=2, is_master=True,
                      timeout=timedelta(seconds=60), use_libuv=False,
                      master_listen_fd=listen.detach())
# PyNcclCommunicator: rank 0's unique id, broadcast_obj(src=0) -> "broadcast_from/0/0"
raw = os.urandom(128)
uid = ncclUniqueId()
ctypes.memmove(ctypes.addressof(uid), raw, 128)
store.set("broadcast_from/0/0", pickle.dumps(uid))
print(raw.hex(), flush=True)
store.wait(["detllm_done"], timedelta(seconds=60))
print("counter", store.get("detllm_counter").decode(), flush=True)
)PY";

std::string read_line(FILE* f) {
  char buf[1024];
  if (fgets(buf, sizeof(buf), f) == nullptr) return "";
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

TEST(TcpStoreTorch, JoinsVllmsRendezvousAndReadsThePickledUniqueId) {
  const char* py = std::getenv("DETLLM_TORCH_PYTHON");
  if (py == nullptr || *py == '\0') {
    GTEST_SKIP() << "DETLLM_TORCH_PYTHON is not set (a Python with torch: cmake "
                    "-DDETLLM_TORCH_PYTHON=/path/to/python)";
  }
  const std::string script = ::testing::TempDir() + "detllm_tcpstore_trainer.py";
  std::ofstream(script) << kTrainer;
  FILE* f = popen((std::string(py) + " " + script + " 2>&1").c_str(), "r");
  ASSERT_NE(f, nullptr);
  const std::string port_line = read_line(f);
  ASSERT_FALSE(port_line.empty());
  const int port = std::atoi(port_line.c_str());
  ASSERT_GT(port, 0) << "the trainer said: " << port_line;

  NcclJoinInfo info;
  info.master_address = "127.0.0.1";
  info.master_port = static_cast<uint16_t>(port);
  info.rank = 1;
  info.world_size = 2;
  info.timeout = std::chrono::milliseconds(60000);
  const NcclUniqueId id = join_stateless_group(info);  // returns once the key is there
  const std::string want = read_line(f);
  std::string got;
  for (uint8_t b : id) got += fmt::format("{:02x}", b);
  EXPECT_EQ(got, want);

  // add/set as torch's client does them (key prefix "/"): the trainer reads them back.
  TcpStoreClient store("127.0.0.1", static_cast<uint16_t>(port), std::chrono::milliseconds(60000));
  EXPECT_EQ(store.add("detllm_counter", 5), 5);
  EXPECT_EQ(store.add("detllm_counter", 2), 7);
  const uint8_t one = '1';
  store.set("detllm_done", std::span(&one, 1));
  EXPECT_EQ(read_line(f), "counter 7");
  EXPECT_EQ(pclose(f), 0);
  std::remove(script.c_str());
}

TEST(TcpStoreTorch, NoStoreIsAnErrorNamingTheAddress) {
  NcclJoinInfo info;
  info.master_address = "127.0.0.1";
  info.master_port = 1;  // nothing listens there
  info.timeout = std::chrono::milliseconds(300);
  try {
    join_stateless_group(info);
    FAIL() << "joined nothing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace detllm::server
