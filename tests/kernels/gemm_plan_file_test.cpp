// The GEMM plan file (kernels/gemm_plan_file.h), CPU only: round trip, the default location,
// atomic write, and malformed input — truncation at every byte, every single-bit flip, wrong
// magic/version, absurd counts and fields (with a valid checksum, so the field checks
// themselves are what refuse them), a foreign key. Each must be refused with detllm::Error
// (parse) or a warning and no entries (load), never a crash: run under ASan too.
// Run: build/tests/test_kernels --gtest_filter='GemmPlanFile*'
#include "kernels/gemm_plan_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/hash.h"

namespace detllm::kernels {
namespace {

namespace fs = std::filesystem;

const char* const kKey = "gpu=NVIDIA H200;uuid=0123;driver=13000;runtime=13000;cublaslt=130000";

GemmPlanFile sample_file() {
  GemmPlanFile f;
  f.key = kKey;
  GemmPlanEntry kernel;  // the invariant kernel chosen: no algorithm
  kernel.n = 4096;
  kernel.k = 4096;
  kernel.bucket = 1;
  f.entries.push_back(kernel);
  GemmPlanEntry lt;
  lt.n = 128256;
  lt.k = 4096;
  lt.bucket = 2048;
  lt.use_lt = true;
  for (size_t i = 0; i < lt.algo.size(); ++i) lt.algo[i] = 0x0123456789abcdefull * (i + 1);
  f.entries.push_back(lt);
  GemmPlanEntry chain = lt;
  chain.n = 4096;
  chain.k = 14336;
  chain.bucket = 64;
  chain.splits = 4;
  chain.chain = true;
  f.entries.push_back(chain);
  GemmPlanEntry runs = chain;  // an FP8 plan: 3 runs of 128-column tiles, not dividing k
  runs.n = 6144;
  runs.k = 4096;
  runs.splits = 3;
  runs.tile_runs = true;
  f.entries.push_back(runs);
  return f;
}

// Parses a copy in its own allocation (ASan sees a read past the end); "" when accepted.
std::string parse_error(const std::vector<std::byte>& bytes) {
  const std::vector<std::byte> copy(bytes);
  try {
    parse_gemm_plan_file(copy);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// Rewrites the trailing checksum so that a corrupted field reaches the field checks.
void reseal(std::vector<std::byte>& bytes) {
  ASSERT_GE(bytes.size(), 16u);
  const Hash128 h = hash_bytes(std::span(bytes).first(bytes.size() - 16));
  for (int i = 0; i < 8; ++i) {
    bytes[bytes.size() - 16 + i] = static_cast<std::byte>(h.lo >> (8 * i));
    bytes[bytes.size() - 8 + i] = static_cast<std::byte>(h.hi >> (8 * i));
  }
}

void put_u32(std::vector<std::byte>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(std::vector<std::byte>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}

size_t entry_offset(size_t i) {
  return 20 + std::strlen(kKey) + i * kGemmPlanEntryBytes;
}

TEST(GemmPlanFile, RoundTrip) {
  const GemmPlanFile f = sample_file();
  const std::vector<std::byte> bytes = format_gemm_plan_file(f);
  EXPECT_EQ(bytes.size(), 20 + f.key.size() + 4 * kGemmPlanEntryBytes + 16);
  const GemmPlanFile g = parse_gemm_plan_file(bytes);
  EXPECT_EQ(g.key, f.key);
  ASSERT_EQ(g.entries.size(), 4u);
  // Sorted by (n, k, bucket).
  EXPECT_EQ(g.entries[0], f.entries[0]);
  EXPECT_EQ(g.entries[1], f.entries[2]);
  EXPECT_EQ(g.entries[2], f.entries[3]);
  EXPECT_EQ(g.entries[3], f.entries[1]);
  EXPECT_TRUE(g.entries[2].tile_runs);
  // Deterministic bytes: formatting the parsed file gives the same file.
  EXPECT_EQ(format_gemm_plan_file(g), bytes);
  // An empty plan list is a valid file.
  GemmPlanFile empty;
  empty.key = kKey;
  EXPECT_TRUE(parse_gemm_plan_file(format_gemm_plan_file(empty)).entries.empty());
}

TEST(GemmPlanFile, FormatRefusesWhatParseWouldRefuse) {
  GemmPlanFile f = sample_file();
  f.entries.push_back(f.entries[1]);  // duplicate (n, k, bucket)
  EXPECT_THROW(format_gemm_plan_file(f), Error);
  f = sample_file();
  f.entries[0].algo[3] = 1;  // an algorithm on a kernel plan
  EXPECT_THROW(format_gemm_plan_file(f), Error);
  f = sample_file();
  f.key = "";
  EXPECT_THROW(format_gemm_plan_file(f), Error);
  f.key = "tab\there";
  EXPECT_THROW(format_gemm_plan_file(f), Error);
}

TEST(GemmPlanFile, EveryTruncationIsRefused) {
  const std::vector<std::byte> bytes = format_gemm_plan_file(sample_file());
  for (size_t len = 0; len < bytes.size(); ++len) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(len));
    EXPECT_NE(parse_error(cut), "") << "accepted a file cut to " << len << " bytes";
  }
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_NE(parse_error(longer), "");
}

TEST(GemmPlanFile, EveryBitFlipIsRefused) {
  const std::vector<std::byte> bytes = format_gemm_plan_file(sample_file());
  for (size_t i = 0; i < bytes.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::byte> b = bytes;
      b[i] ^= static_cast<std::byte>(1u << bit);
      EXPECT_NE(parse_error(b), "") << "accepted a flip of bit " << bit << " of byte " << i;
    }
}

TEST(GemmPlanFile, HeaderFieldsAreChecked) {
  const std::vector<std::byte> good = format_gemm_plan_file(sample_file());
  std::vector<std::byte> b = good;
  b[0] = std::byte{'X'};
  EXPECT_NE(parse_error(b).find("magic"), std::string::npos);
  b = good;
  put_u32(b, 8, kGemmPlanFileVersion + 1);
  reseal(b);
  EXPECT_NE(parse_error(b).find("version"), std::string::npos);
  for (uint32_t key_len : {0u, 0xffffffffu, uint32_t{kGemmPlanMaxKeyBytes} + 1}) {
    b = good;
    put_u32(b, 12, key_len);
    EXPECT_NE(parse_error(b).find("key length"), std::string::npos) << key_len;
  }
  // Absurd entry counts: over the limit, and one that the bytes cannot hold.
  for (uint32_t count : {0xffffffffu, uint32_t{kGemmPlanMaxEntries} + 1, 5u, 3u}) {
    b = good;
    put_u32(b, 16 + std::strlen(kKey), count);
    reseal(b);
    EXPECT_NE(parse_error(b), "") << count;
  }
  // A non-printable key byte.
  b = good;
  b[16] = std::byte{0};
  reseal(b);
  EXPECT_NE(parse_error(b).find("ASCII"), std::string::npos);
}

TEST(GemmPlanFile, EntryFieldsAreChecked) {
  const std::vector<std::byte> good = format_gemm_plan_file(sample_file());
  // Entry 1 (sorted) is the chained 4096 x 14336 one, entry 2 the FP8 6144 x 4096 one (3 tile
  // runs), entry 3 the lm_head one.
  struct Case {
    const char* what;
    size_t entry, field;
    uint64_t value;
    int width;
  };
  const Case cases[] = {
      {"n = 0", 0, 0, 0, 8},
      {"n negative", 0, 0, ~uint64_t{0}, 8},
      {"n huge", 0, 0, uint64_t{1} << 40, 8},
      {"k = 0", 0, 8, 0, 8},
      {"bucket 0", 0, 16, 0, 4},
      {"bucket not a bucket", 0, 16, 3, 4},
      {"bucket between the fine buckets", 0, 16, 200, 4},
      {"bucket too large", 0, 16, 16384, 4},
      {"bucket negative", 0, 16, 0x80000000u, 4},
      {"splits 0", 0, 20, 0, 4},
      {"splits not dividing k", 1, 20, 3, 4},
      {"splits absurd", 1, 20, 0x7fffffff, 4},
      {"unknown flag", 0, 24, 8, 4},
      {"chain without cuBLASLt", 1, 24, 2, 4},
      {"chain with one split", 3, 24, 3, 4},
      {"tile runs dropped: 3 splits do not divide k", 2, 24, 3, 4},
      {"more tile runs than k's 128-column tiles", 2, 20, 33, 4},
      {"reserved set", 0, 28, 1, 4},
      {"algorithm on a kernel plan", 0, 40, 7, 8},
  };
  for (const Case& c : cases) {
    std::vector<std::byte> b = good;
    const size_t at = entry_offset(c.entry) + c.field;
    if (c.width == 8)
      put_u64(b, at, c.value);
    else
      put_u32(b, at, static_cast<uint32_t>(c.value));
    reseal(b);
    EXPECT_NE(parse_error(b), "") << c.what;
  }
  // A duplicate entry: entry 0's bytes copied over entry 1.
  std::vector<std::byte> b = good;
  std::memcpy(&b[entry_offset(1)], &b[entry_offset(0)], kGemmPlanEntryBytes);
  reseal(b);
  EXPECT_NE(parse_error(b).find("two entries"), std::string::npos);
}

TEST(GemmPlanFile, RandomBytesNeverCrash) {
  // Fuzz-style: random lengths and contents, with and without a valid header and checksum.
  uint64_t s = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  const std::vector<std::byte> good = format_gemm_plan_file(sample_file());
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<std::byte> b;
    if (round % 2 == 0) {
      b.resize(next() % 512);
      for (auto& x : b) x = static_cast<std::byte>(next());
    } else {
      b = good;
      for (int j = 0, n = 1 + static_cast<int>(next() % 8); j < n; ++j)
        b[next() % b.size()] = static_cast<std::byte>(next());
      if (round % 4 == 1) reseal(b);  // reach the field checks
    }
    accepted += parse_error(b).empty();
  }
  // Only resealed files whose changes happened to stay valid can pass; random ones never.
  EXPECT_LT(accepted, 3000 / 4);
}

class GemmPlanFileOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("detllm_gemm_plan_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(GemmPlanFileOnDisk, WriteThenLoad) {
  const std::string path = (dir_ / "sub" / "plans.bin").string();  // folders are created
  const GemmPlanLoad none = load_gemm_plan_file(path, kKey);
  EXPECT_FALSE(none.found);
  EXPECT_TRUE(none.warning.empty());
  write_gemm_plan_file(path, sample_file());
  const GemmPlanLoad got = load_gemm_plan_file(path, kKey);
  EXPECT_TRUE(got.found);
  EXPECT_TRUE(got.warning.empty()) << got.warning;
  EXPECT_EQ(got.entries.size(), 4u);
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "sub")) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  // Rewriting replaces the file.
  GemmPlanFile smaller = sample_file();
  smaller.entries.resize(1);
  write_gemm_plan_file(path, smaller);
  EXPECT_EQ(load_gemm_plan_file(path, kKey).entries.size(), 1u);
}

// Writers that are threads of one process (tensor-parallel ranks, each with its plans) write
// the same file at once: each through a temporary of its own, so the file is always one
// writer's whole file — never a mix — and no temporary is left behind.
TEST_F(GemmPlanFileOnDisk, ConcurrentWritersOfOneProcessNeverMixTheirFiles) {
  const std::string path = (dir_ / "plans.bin").string();
  for (int round = 0; round < 20; ++round) {
    std::vector<std::thread> writers;
    for (size_t n = 1; n <= 3; ++n)
      writers.emplace_back([&, n] {
        GemmPlanFile f = sample_file();
        f.entries.resize(n);
        write_gemm_plan_file(path, f);
      });
    for (std::thread& t : writers) t.join();
    const GemmPlanLoad got = load_gemm_plan_file(path, kKey);
    EXPECT_TRUE(got.warning.empty()) << got.warning;
    EXPECT_GE(got.entries.size(), 1u);
    EXPECT_LE(got.entries.size(), 3u);
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(GemmPlanFileOnDisk, ForeignCorruptAndUnreadableFilesWarn) {
  const std::string path = (dir_ / "plans.bin").string();
  write_gemm_plan_file(path, sample_file());
  const GemmPlanLoad foreign = load_gemm_plan_file(path, "gpu=another");
  EXPECT_TRUE(foreign.found);
  EXPECT_TRUE(foreign.entries.empty());
  EXPECT_NE(foreign.warning.find("another GPU"), std::string::npos) << foreign.warning;

  // Truncated on disk.
  fs::resize_file(path, fs::file_size(path) - 5);
  const GemmPlanLoad cut = load_gemm_plan_file(path, kKey);
  EXPECT_TRUE(cut.entries.empty());
  EXPECT_NE(cut.warning.find("truncated"), std::string::npos) << cut.warning;
  EXPECT_NE(cut.warning.find(path), std::string::npos);

  // Not a plan file at all, and a folder where the file should be.
  {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << "hello";
  }
  EXPECT_NE(load_gemm_plan_file(path, kKey).warning, "");
  fs::remove(path);
  fs::create_directories(path);
  const GemmPlanLoad folder = load_gemm_plan_file(path, kKey);
  EXPECT_TRUE(folder.entries.empty());
  EXPECT_NE(folder.warning, "");
  // And writing there fails with a message naming the path, not a crash.
  try {
    write_gemm_plan_file(path, sample_file());
    ADD_FAILURE() << "wrote over a folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(GemmPlanFile, DefaultLocation) {
  const auto xdg = default_gemm_plan_cache_path(kKey, "/x/cache", "/home/u");
  ASSERT_TRUE(xdg.has_value());
  EXPECT_EQ(xdg->rfind("/x/cache/detllm/gemm-plans-", 0), 0u) << *xdg;
  EXPECT_EQ(xdg->size(), std::string("/x/cache/detllm/gemm-plans-").size() + 16 + 4);
  EXPECT_EQ(xdg->substr(xdg->size() - 4), ".bin");
  const auto home = default_gemm_plan_cache_path(kKey, "", "/home/u");
  ASSERT_TRUE(home.has_value());
  EXPECT_EQ(home->rfind("/home/u/.cache/detllm/gemm-plans-", 0), 0u) << *home;
  // The name follows the key: another GPU or library gets a file of its own.
  EXPECT_NE(*default_gemm_plan_cache_path("gpu=other", "/x/cache", nullptr), *xdg);
  EXPECT_EQ(*default_gemm_plan_cache_path(kKey, "/x/cache", nullptr), *xdg);
  EXPECT_FALSE(default_gemm_plan_cache_path(kKey, nullptr, nullptr).has_value());
}

}  // namespace
}  // namespace detllm::kernels
