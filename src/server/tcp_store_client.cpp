// torch.distributed's TCPStore wire protocol, client side (see tcp_store_client.h).
#include "server/tcp_store_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace detllm::server {

namespace {

// c10d::detail::QueryType and its answers (TCPStoreBackend.hpp).
enum Query : uint8_t {
  kValidate = 0,
  kSet = 1,
  kGet = 3,
  kAdd = 4,
  kWait = 6,
  kCancelWait = 12,
  kPing = 13,
};
constexpr uint8_t kStopWaiting = 0;
constexpr uint8_t kWaitCanceled = 1;
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
// TCPStore's keyPrefix_ (every public get/set/add) and initKey_ (waitForWorkers, unprefixed).
constexpr const char* kKeyPrefix = "/";
constexpr const char* kInitKey = "init/";

// One query: its byte, then fields appended as c10d's SendBuffer appends them.
class Packet {
 public:
  explicit Packet(Query q) { bytes_.push_back(static_cast<char>(q)); }
  template <typename T>
  Packet& value(T v) {
    append(&v, sizeof(T));
    return *this;
  }
  Packet& string(std::span<const uint8_t> s) {
    value<uint64_t>(s.size());
    append(s.data(), s.size());
    return *this;
  }
  Packet& string(const std::string& s) {
    return string(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void append(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

int connect_once(const std::string& host, uint16_t port, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    *why = gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    *why = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

}  // namespace

TcpStoreClient::TcpStoreClient(const std::string& host, uint16_t port,
                               std::chrono::milliseconds timeout)
    : where_(host + ":" + std::to_string(port)), timeout_(timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string why;
  while (true) {
    fd_ = connect_once(host, port, &why);
    if (fd_ >= 0) break;
    check(std::chrono::steady_clock::now() < deadline,
          "TCPStore at {}: could not connect within {} ms ({}); is the trainer's store "
          "listening there?", where_, timeout.count(), why);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  send_all(Packet(kValidate).value<uint32_t>(kValidationMagic).bytes());
  const auto nonce = static_cast<uint32_t>(::getpid());
  send_all(Packet(kPing).value<uint32_t>(nonce).bytes());
  uint32_t echoed = 0;
  recv_all(&echoed, sizeof(echoed));
  check(echoed == nonce, "TCPStore at {}: ping answered {} instead of {} (not a TCPStore?)",
        where_, echoed, nonce);
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStoreClient::send_all(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    check(n > 0, "TCPStore at {}: send failed: {}", where_, std::strerror(errno));
    off += static_cast<size_t>(n);
  }
}

void TcpStoreClient::recv_all(void* dst, size_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  size_t off = 0;
  while (off < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    check(left.count() > 0, "TCPStore at {}: no answer within {} ms", where_, timeout_.count());
    pollfd pfd{fd_, POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno == EINTR) continue;
    check(pr >= 0, "TCPStore at {}: poll failed: {}", where_, std::strerror(errno));
    if (pr == 0) continue;
    const ssize_t r = ::recv(fd_, p + off, n - off, 0);
    if (r < 0 && errno == EINTR) continue;
    check(r > 0, "TCPStore at {}: {}", where_,
          r == 0 ? "the store closed the connection" : std::strerror(errno));
    off += static_cast<size_t>(r);
  }
}

int64_t TcpStoreClient::join_workers() {
  send_all(Packet(kAdd).string(std::string(kInitKey)).value<int64_t>(1).bytes());
  int64_t v = 0;
  recv_all(&v, sizeof(v));
  return v;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  send_all(Packet(kAdd).string(kKeyPrefix + key).value<int64_t>(delta).bytes());
  int64_t v = 0;
  recv_all(&v, sizeof(v));
  return v;
}

void TcpStoreClient::set(const std::string& key, std::span<const uint8_t> value) {
  send_all(Packet(kSet).string(kKeyPrefix + key).string(value).bytes());
}

void TcpStoreClient::wait_key(const std::string& key) {
  send_all(Packet(kWait).value<uint64_t>(1).string(key).bytes());
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{fd_, POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno == EINTR) continue;
    check(pr >= 0, "TCPStore at {}: poll failed: {}", where_, std::strerror(errno));
    if (pr == 0) continue;
    uint8_t r = 0;
    recv_all(&r, 1);
    check(r == kStopWaiting, "TCPStore at {}: unexpected answer {} to WAIT", where_, r);
    return;
  }
  // As torch's client: cancel, then read the answer(s) so the connection stays in step.
  send_all(Packet(kCancelWait).bytes());
  uint8_t r = 0;
  recv_all(&r, 1);
  if (r == kStopWaiting) {
    recv_all(&r, 1);  // the key came just before the cancel; the cancel is still answered
    return;
  }
  check(r == kWaitCanceled, "TCPStore at {}: unexpected answer {} to CANCEL_WAIT", where_, r);
  throw_error("TCPStore at {}: key '{}' did not appear within {} ms (the trainer did not "
              "publish it)", where_, key, timeout_.count());
}

std::vector<uint8_t> TcpStoreClient::get(const std::string& key) {
  const std::string k = kKeyPrefix + key;
  wait_key(k);
  send_all(Packet(kGet).string(k).bytes());
  uint64_t n = 0;
  recv_all(&n, sizeof(n));
  check(n <= (uint64_t{1} << 30), "TCPStore at {}: value of '{}' is {} bytes (too large)", where_,
        key, n);
  std::vector<uint8_t> out(n);
  if (n > 0) recv_all(out.data(), n);
  return out;
}

}  // namespace detllm::server
