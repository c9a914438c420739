// The NCCL unique id as a trainer publishes it (server/nccl_unique_id.h): vLLM's pickled
// ctypes ncclUniqueId at pickle protocols 3, 4 and 5 (the blobs are Python's own output for
// the bytes (i * 37 + 5) mod 256, made by pickle.dumps of a ctypes structure registered under
// vLLM's module name), and nccl_unique_id_b64; malformed values are refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "server/nccl_unique_id.h"

namespace detllm::server {
namespace {

std::vector<uint8_t> hex(const std::string& h) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

NcclUniqueId expected() {
  NcclUniqueId id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>((i * 37 + 5) % 256);
  return id;
}

const std::string kRaw =
    "80052a4f7499bee3082d52779cc1e60b30557a9fc4e90e33587da2c7ec11365b80a5caef14395e83a8cdf2173c6186"
    "abd0f51a3f6489aed3f81d42678cb1d6fb20456a8fb4d9fe23486d92b7dc01264b7095badf04294e7398bde2072c51"
    "769bc0e50a2f54799ec3e80d32577ca1c6eb10355a7fa4c9ee13385d82a7ccf1163b60";
const std::string kModule =
    "766c6c6d2e64697374726962757465642e6465766963655f636f6d6d756e696361746f72732e70796e63636c5f7772"
    "6170706572";  // vllm.distributed.device_communicators.pynccl_wrapper
// pickle.dumps(u, protocol=4) (Python 3.11's default); protocol 5 differs in its first bytes.
const std::string kProto4 = "800495ec000000000000008c075f637479706573948c095f756e7069636b6c659493948c34" +
                            kModule + "948c0c6e63636c556e6971756549649493947d9443" + kRaw +
                            "948694869452942e";
const std::string kProto3 = "8003635f6374797065730a5f756e7069636b6c650a710063" + kModule +
                            "0a6e63636c556e6971756549640a71017d710243" + kRaw +
                            "71038671048671055271062e";

TEST(NcclUniqueId, DecodesVllmsPickledStructAtProtocols3To5) {
  EXPECT_EQ(unique_id_from_pickle(hex(kProto4)), expected());
  std::string p5 = kProto4;
  p5[3] = '5';
  EXPECT_EQ(unique_id_from_pickle(hex(p5)), expected());
  EXPECT_EQ(unique_id_from_pickle(hex(kProto3)), expected());
}

TEST(NcclUniqueId, DecodesStandardBase64) {
  const std::string b64 =
      "BSpPdJm+4wgtUnecweYLMFV6n8TpDjNYfaLH7BE2W4Clyu8UOV6DqM3yFzxhhqvQ9Ro/ZImu0/gdQmeMsdb7IEVqj7TZ/"
      "iNIbZK33AEmS3CVut8EKU5zmL3iByxRdpvA5QovVHmew+gNMld8ocbrEDVaf6TJ7hM4XYKnzPEWO2A=";
  EXPECT_EQ(unique_id_from_base64(b64), expected());
  std::string url_safe = b64;
  for (char& c : url_safe) c = c == '+' ? '-' : c == '/' ? '_' : c;
  EXPECT_THROW(unique_id_from_base64(url_safe), Error);       // vLLM refuses URL-safe too
  EXPECT_THROW(unique_id_from_base64(b64.substr(0, 168)), Error);  // 126 bytes
  EXPECT_THROW(unique_id_from_base64(b64.substr(1)), Error);  // not a multiple of 4
}

TEST(NcclUniqueId, RefusesOtherPickles) {
  auto message = [](const std::vector<uint8_t>& p) {
    try {
      unique_id_from_pickle(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(decoded)");
  };
  // pickle.dumps(<the 128 bytes>): bytes, not the ctypes structure.
  const std::string bare = "800495840000000000000043" + kRaw + "942e";
  EXPECT_NE(message(hex(bare)).find("not vLLM's ncclUniqueId"), std::string::npos)
      << message(hex(bare));
  std::vector<uint8_t> truncated = hex(kProto4);
  truncated.resize(truncated.size() - 30);
  EXPECT_NE(message(truncated).find("truncated"), std::string::npos) << message(truncated);
  std::string other_class = kProto4;
  other_class.replace(other_class.find("6e63636c556e697175654964"), 24, "6e63636c556e697175654965");  // ncclUniqueIe
  EXPECT_NE(message(hex(other_class)).find("its class is"), std::string::npos) << message(hex(other_class));
  std::vector<uint8_t> short_id = hex(kProto4);
  const size_t at = short_id.size() - 8 - 128 - 1;  // SHORT_BINBYTES' length byte
  ASSERT_EQ(short_id[at], 0x80);
  short_id[at] = 0x7f;  // 127 bytes: the stream then misparses or the length check fires
  EXPECT_THROW(unique_id_from_pickle(short_id), Error);
  EXPECT_NE(message(hex("80047d942e")).find("it is a dict"), std::string::npos);  // {}
  EXPECT_NE(message(hex("8004642e")).find("opcode 0x64"), std::string::npos);  // DICT
  EXPECT_NE(message(hex("80044e2e")).find("opcode 0x4e"), std::string::npos);  // None
}

}  // namespace
}  // namespace detllm::server
