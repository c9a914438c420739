// safetensors reader: files written by the safetensors package (single, sharded, bf16), model
// directory resolution, headers corrupted one field at a time, truncation at every byte and
// byte flips (each must throw detllm::Error, never crash: run under ASan too).
// Run: build/tests/test_formats --gtest_filter='Safetensors*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/loader_test_util.h"
#include "formats/safetensors.h"

namespace detllm {
namespace {

namespace fs = std::filesystem;
const std::string& kDataDir = testing::kLoaderDataDir;
using testing::read_bytes;

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Parses a copy of `bytes` (its own allocation, so ASan sees any read past the end) and loads
// every tensor. Returns the error message, or "" when the file was accepted.
std::string parse_and_load(const std::vector<uint8_t>& bytes) {
  const std::vector<uint8_t> copy(bytes);
  try {
    const auto f = SafetensorsFile::parse(copy.data(), copy.size(), "test.safetensors");
    for (const auto& t : f->tensor_infos()) {
      try {
        (void)f->load_f32(t.name);
      } catch (const Error&) {  // a dtype detllm does not load: the file itself is fine
      }
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// [u64 header length | header | data]
std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i)));
  for (char c : header) out.push_back(static_cast<uint8_t>(c));
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i * 13 + 1));
  return out;
}

void expect_error(const std::string& header, size_t data_bytes, const std::string& fragment) {
  const std::string msg = parse_and_load(make_file(header, data_bytes));
  EXPECT_FALSE(msg.empty()) << "accepted: " << header;
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  EXPECT_NE(msg.find("test.safetensors"), std::string::npos) << "must name the file: " << msg;
}

void expect_values(const TensorSource& src, const nlohmann::json& expected,
                   const std::string& name) {
  SCOPED_TRACE(name);
  const HostTensor t = src.load_f32(name);
  EXPECT_EQ(t.shape, expected[name]["shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(src.tensor_shape(name), t.shape);
  const auto bits = expected[name]["bits"].get<std::vector<uint32_t>>();  // fp32 bit patterns
  ASSERT_EQ(t.data.size(), bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    uint32_t got;
    std::memcpy(&got, &t.data[i], 4);
    EXPECT_EQ(got, bits[i]) << "element " << i << " = " << t.data[i];
  }
}

nlohmann::json expected_values() {
  std::ifstream f(kDataDir + "safetensors_expected.json");
  return nlohmann::json::parse(f);
}

// ---- Files written by the safetensors package ------------------------------------------------

TEST(Safetensors, SingleFileDirectory) {
  const auto dir = SafetensorsDir::open(kDataDir + "st_single");
  const auto expected = expected_values();
  EXPECT_EQ(dir->shards().size(), 1u);
  EXPECT_EQ(dir->tensor_names().size(), 5u);
  for (const char* name : {"a.f32", "b.f16", "scalar", "empty"})
    expect_values(*dir, expected, name);
  EXPECT_EQ(dir->tensor_shape("scalar"), std::vector<int64_t>{});
  EXPECT_EQ(dir->tensor_shape("empty"), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(dir->shards()[0]->metadata().at("format"), "pt");
  EXPECT_EQ(dir->dtype("c.i64"), "I64");
  EXPECT_TRUE(dir->has_tensor("c.i64"));
  EXPECT_FALSE(dir->has_tensor("nope"));
  try {
    dir->load_f32("c.i64");
    FAIL() << "I64 loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("I64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("c.i64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  }
  EXPECT_THROW(dir->load_f32("nope"), Error);
  EXPECT_THROW(dir->tensor_shape("nope"), Error);

  const RawTensorView raw = dir->raw_view("b.f16");
  EXPECT_EQ(raw.dtype, DType::kF16);
  EXPECT_EQ(raw.n_bytes, 10u);
  EXPECT_EQ(raw.shape, std::vector<int64_t>{5});
}

TEST(Safetensors, SingleFilePathAndBf16) {
  const auto expected = expected_values();
  const auto file = SafetensorsDir::open(kDataDir + "st_single/model.safetensors");
  expect_values(*file, expected, "a.f32");
  const auto bf16 = SafetensorsDir::open(kDataDir + "bf16.safetensors");
  expect_values(*bf16, expected, "w");
  const RawTensorView raw = bf16->raw_view("w");
  EXPECT_EQ(raw.dtype, DType::kBF16);
  EXPECT_EQ(raw.n_bytes, 12u);
  uint16_t first;
  std::memcpy(&first, raw.data, 2);
  EXPECT_EQ(first, 0x3f80);
}

TEST(Safetensors, ShardedDirectoryAndIndexPath) {
  const auto expected = expected_values();
  for (const std::string& path :
       {kDataDir + "st_sharded", kDataDir + "st_sharded/model.safetensors.index.json"}) {
    SCOPED_TRACE(path);
    const auto dir = SafetensorsDir::open(path);
    EXPECT_EQ(dir->shards().size(), 2u);
    EXPECT_EQ(dir->tensor_names().size(), 3u);
    for (const char* name : {"model.embed.weight", "model.norm.weight", "lm_head.weight"}) {
      expect_values(*dir, expected, name);
    }
  }
}

// ---- Directory resolution errors --------------------------------------------------------------

class SafetensorsDirErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("detllm_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void copy_shards() {
    for (const char* s : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
      fs::copy_file(kDataDir + "st_sharded/" + s, dir_ / s);
    }
  }
  void write_index(const std::string& text) {
    std::ofstream(dir_ / "model.safetensors.index.json") << text;
  }
  std::string open_error() {
    try {
      SafetensorsDir::open(dir_.string());
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  }

  fs::path dir_;
};

TEST_F(SafetensorsDirErrors, EmptyDirectory) {
  EXPECT_NE(open_error().find("neither"), std::string::npos);
  EXPECT_THROW(SafetensorsDir::open((dir_ / "missing.safetensors").string()), Error);
}

TEST_F(SafetensorsDirErrors, IndexProblems) {
  copy_shards();
  write_index("not json");
  EXPECT_NE(open_error().find("invalid JSON"), std::string::npos);
  write_index(R"({"metadata": {}})");
  EXPECT_NE(open_error().find("weight_map"), std::string::npos);
  write_index(R"({"weight_map": {}})");
  EXPECT_NE(open_error().find("empty"), std::string::npos);
  write_index(R"({"weight_map": {"x": 5}})");
  EXPECT_NE(open_error().find("not a string"), std::string::npos);
  write_index(R"({"weight_map": {"x": "../model-00001-of-00002.safetensors"}})");
  EXPECT_NE(open_error().find("not a file name"), std::string::npos);
  write_index(R"({"weight_map": {"lm_head.weight": "model-00003-of-00003.safetensors"}})");
  EXPECT_NE(open_error().find("model-00003-of-00003.safetensors"), std::string::npos);
  write_index(R"({"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}})");
  EXPECT_NE(open_error().find("does not contain"), std::string::npos);
}

TEST_F(SafetensorsDirErrors, TensorInTwoShards) {
  copy_shards();
  fs::copy_file(dir_ / "model-00002-of-00002.safetensors", dir_ / "dup.safetensors");
  write_index(R"({"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
                                 "model.norm.weight": "model-00001-of-00002.safetensors",
                                 "x": "dup.safetensors"}})");
  const std::string msg = open_error();
  EXPECT_TRUE(msg.find("appears in both") != std::string::npos ||
              msg.find("does not contain") != std::string::npos)
      << msg;
  write_index(R"({"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
                                 "model.norm.weight": "dup.safetensors"}})");
  EXPECT_NE(open_error(), "");
}

TEST_F(SafetensorsDirErrors, CorruptShardNamesTheShard) {
  copy_shards();
  write_index(R"({"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}})");
  auto bytes = read_bytes((dir_ / "model-00002-of-00002.safetensors").string());
  ASSERT_FALSE(bytes.empty());
  bytes.pop_back();
  write_bytes(dir_ / "model-00002-of-00002.safetensors", bytes);
  EXPECT_NE(open_error().find("model-00002-of-00002.safetensors"), std::string::npos);
}

// ---- Headers corrupted one field at a time ------------------------------------------------------

TEST(Safetensors, BuiltFileIsValid) {
  const auto bytes = make_file(
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},)"
      R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
      20);
  const auto f = SafetensorsFile::parse(bytes.data(), bytes.size(), "test.safetensors");
  EXPECT_EQ(f->tensor_names(), (std::vector<std::string>{"a", "b"}));  // offset order
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_EQ(f->load_f32("b").data.size(), 2u);
  EXPECT_EQ(parse_and_load(make_file("{}", 0)), "");
  EXPECT_EQ(parse_and_load(make_file("{}      ", 0)), "");  // space padding is allowed
}

TEST(Safetensors, RejectsCorruptHeaders) {
  EXPECT_NE(parse_and_load({}), "");
  EXPECT_NE(parse_and_load({1, 0, 0}), "");
  auto huge = make_file("{}", 0);
  huge[7] = 0x10;  // header length ~2^60
  EXPECT_NE(parse_and_load(huge).find("exceeds the limit"), std::string::npos);
  auto over = make_file("{}", 0);
  over[0] = 3;  // one byte more than the file holds
  EXPECT_NE(parse_and_load(over).find("truncated"), std::string::npos);
  expect_error("[]", 0, "JSON object");
  expect_error(" {}", 0, "JSON object");
  expect_error("{", 0, "JSON object");
  expect_error("{ ", 0, "invalid JSON");
  expect_error("{\"a\": tru}", 0, "invalid JSON");
  expect_error(R"({"a":"\xff"})", 0, "invalid JSON");  // not UTF-8
  expect_error("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", 0, "deeper");
  expect_error(R"({"__metadata__":[]})", 0, "__metadata__");
  expect_error(R"({"__metadata__":{"k":1}})", 0, "__metadata__");
  expect_error(R"({"a":5})", 0, "not a JSON object");
  expect_error(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, "dtype");
  expect_error(R"({"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}})", 4, "'Q9'");
  expect_error(R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1, "'F4'");
  expect_error(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4, "shape");
  expect_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative");
  expect_error(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4, "non-negative");
  expect_error(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4,
               "dimensions");
  expect_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
               "overflows");
  expect_error(R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", 4,
               "overflows");
  expect_error(R"({"a":{"dtype":"F32","shape":[1]}})", 4, "data_offsets");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, "data_offsets");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4, "outside");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 4, "outside");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4,
               "outside");
  expect_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "need 2 elements");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "not covered");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "gap");
  expect_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
               8, "overlap");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
               4, "overlap");
}

// ---- Truncation and byte flips of real files ----------------------------------------------------

TEST(Safetensors, TruncatedAtEveryByteThrows) {
  for (const char* name : {"st_single/model.safetensors", "bf16.safetensors",
                           "st_sharded/model-00001-of-00002.safetensors"}) {
    const std::vector<uint8_t> full = read_bytes(kDataDir + name);
    EXPECT_EQ(parse_and_load(full), "") << name;
    for (size_t n = 0; n < full.size(); ++n) {
      const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
      EXPECT_NE(parse_and_load(cut), "") << name << " truncated to " << n << " bytes";
    }
  }
}

TEST(Safetensors, ByteFlipsNeverCrash) {
  const std::vector<uint8_t> full = read_bytes(kDataDir + "st_single/model.safetensors");
  int n_rejected = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, static_cast<uint8_t>(full[i] ^ 0x80),
                      static_cast<uint8_t>(full[i] + 1), uint8_t{'9'}, uint8_t{'"'}}) {
      std::vector<uint8_t> bad = full;
      bad[i] = v;
      n_rejected += parse_and_load(bad).empty() ? 0 : 1;
    }
  }
  EXPECT_GT(n_rejected, 0);
}

}  // namespace
}  // namespace detllm
