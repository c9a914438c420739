// The GEMM plan file: format, parse, validate, load and atomic write (see gemm_plan_file.h).
#include "kernels/gemm_plan_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/hash.h"
#include "kernels/gemm_buckets.h"

namespace detllm::kernels {
namespace {

namespace fs = std::filesystem;

constexpr std::array<char, 8> kMagic = {'D', 'L', 'G', 'E', 'M', 'M', 'P', 'L'};
constexpr uint32_t kFlagUseLt = 1u << 0;
constexpr uint32_t kFlagChain = 1u << 1;
constexpr uint32_t kFlagTileRuns = 1u << 2;
constexpr size_t kChecksumBytes = 16;

class Writer {
 public:
  template <typename T>
  void le(T value) {
    auto v = static_cast<std::make_unsigned_t<T>>(value);
    for (size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<std::byte>& bytes() { return out_; }

 private:
  std::vector<std::byte> out_;
};

// Bounds-checked little-endian reads; every failure names what was being read.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  template <typename T>
  T le(const char* what) {
    need(sizeof(T), what);
    std::make_unsigned_t<T> v = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      v |= static_cast<std::make_unsigned_t<T>>(std::to_integer<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    return static_cast<T>(v);
  }
  std::span<const std::byte> take(size_t n, const char* what) {
    need(n, what);
    const auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }

 private:
  void need(size_t n, const char* what) const {
    if (b_.size() - pos_ < n)
      throw_error("GEMM plan file truncated: {} bytes, {} needs {} more at offset {}", b_.size(),
                  what, n, pos_);
  }
  std::span<const std::byte> b_;
  size_t pos_ = 0;
};

bool printable_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

void check_key(std::string_view key) {
  check(!key.empty() && key.size() <= kGemmPlanMaxKeyBytes,
        "GEMM plan file: key of {} bytes (must be 1 … {})", key.size(), kGemmPlanMaxKeyBytes);
  check(printable_ascii(key), "GEMM plan file: the key is not printable ASCII");
}

}  // namespace

void validate_gemm_plan_entry(const GemmPlanEntry& e) {
  const auto where = [&] { return fmt::format("entry n={} k={} bucket={}", e.n, e.k, e.bucket); };
  check(e.n >= 1 && e.n <= kGemmPlanMaxDim && e.k >= 1 && e.k <= kGemmPlanMaxDim,
        "GEMM plan file: {}: shape outside 1 … {}", where(), kGemmPlanMaxDim);
  check(is_gemm_bucket(e.bucket),
        "GEMM plan file: {}: not an M bucket (kernels/gemm_buckets.h: 1, 2, 4, …, 128, 160, "
        "192, …, {})",
        where(), kGemmMaxBucket);
  if (e.tile_runs)
    check(e.splits >= 1 && e.splits <= kGemmPlanMaxSplits && e.splits <= (e.k + 127) / 128,
          "GEMM plan file: {}: {} runs of 128-column tiles (1 … min({}, ⌈k / 128⌉))", where(),
          e.splits, kGemmPlanMaxSplits);
  else
    check(e.splits >= 1 && e.splits <= kGemmPlanMaxSplits && e.k % e.splits == 0,
          "GEMM plan file: {}: split count {} (must divide k, 1 … {})", where(), e.splits,
          kGemmPlanMaxSplits);
  check(!e.chain || (e.use_lt && e.splits > 1),
        "GEMM plan file: {}: a chained execution needs cuBLASLt and more than one split", where());
  check(e.use_lt || std::all_of(e.algo.begin(), e.algo.end(), [](uint64_t w) { return w == 0; }),
        "GEMM plan file: {}: an algorithm saved for the invariant kernel", where());
}

std::vector<std::byte> format_gemm_plan_file(const GemmPlanFile& file) {
  check_key(file.key);
  check(file.entries.size() <= kGemmPlanMaxEntries, "GEMM plan file: {} entries (at most {})",
        file.entries.size(), kGemmPlanMaxEntries);
  std::vector<GemmPlanEntry> entries = file.entries;
  std::sort(entries.begin(), entries.end(), [](const GemmPlanEntry& a, const GemmPlanEntry& b) {
    return std::tie(a.n, a.k, a.bucket) < std::tie(b.n, b.k, b.bucket);
  });
  for (size_t i = 0; i < entries.size(); ++i) {
    validate_gemm_plan_entry(entries[i]);
    check(i == 0 || std::tie(entries[i].n, entries[i].k, entries[i].bucket) !=
                        std::tie(entries[i - 1].n, entries[i - 1].k, entries[i - 1].bucket),
          "GEMM plan file: two entries for n={} k={} bucket={}", entries[i].n, entries[i].k,
          entries[i].bucket);
  }
  Writer w;
  w.raw(kMagic.data(), kMagic.size());
  w.le(kGemmPlanFileVersion);
  w.le(static_cast<uint32_t>(file.key.size()));
  w.raw(file.key.data(), file.key.size());
  w.le(static_cast<uint32_t>(entries.size()));
  for (const GemmPlanEntry& e : entries) {
    w.le(e.n);
    w.le(e.k);
    w.le(e.bucket);
    w.le(e.splits);
    w.le((e.use_lt ? kFlagUseLt : 0u) | (e.chain ? kFlagChain : 0u) |
         (e.tile_runs ? kFlagTileRuns : 0u));
    w.le(uint32_t{0});
    for (uint64_t word : e.algo) w.le(word);
  }
  const Hash128 h = hash_bytes(w.bytes());
  w.le(h.lo);
  w.le(h.hi);
  return std::move(w.bytes());
}

GemmPlanFile parse_gemm_plan_file(std::span<const std::byte> bytes) {
  Reader r(bytes);
  const auto magic = r.take(kMagic.size(), "the magic");
  check(std::memcmp(magic.data(), kMagic.data(), kMagic.size()) == 0,
        "not a detllm GEMM plan file (bad magic)");
  const uint32_t version = r.le<uint32_t>("the version");
  check(version == kGemmPlanFileVersion,
        "GEMM plan file version {} (this build reads version {})", version, kGemmPlanFileVersion);
  const uint32_t key_len = r.le<uint32_t>("the key length");
  check(key_len >= 1 && key_len <= kGemmPlanMaxKeyBytes,
        "GEMM plan file: key length {} (must be 1 … {})", key_len, kGemmPlanMaxKeyBytes);
  const auto key = r.take(key_len, "the key");
  GemmPlanFile f;
  f.key.assign(reinterpret_cast<const char*>(key.data()), key.size());
  check(printable_ascii(f.key), "GEMM plan file: the key is not printable ASCII");
  const uint32_t n_entries = r.le<uint32_t>("the entry count");
  check(n_entries <= kGemmPlanMaxEntries, "GEMM plan file: {} entries (at most {})", n_entries,
        kGemmPlanMaxEntries);
  // The whole size is known now: refuse a short or long file before reading the entries.
  const size_t want = r.pos() + size_t{n_entries} * kGemmPlanEntryBytes + kChecksumBytes;
  check(bytes.size() >= want, "GEMM plan file truncated: {} bytes; {} entries need {}",
        bytes.size(), n_entries, want);
  check(bytes.size() == want, "GEMM plan file of {} bytes has {} bytes after its {} entries",
        bytes.size(), bytes.size() - want, n_entries);
  const Hash128 h = hash_bytes(bytes.first(want - kChecksumBytes));
  f.entries.reserve(n_entries);
  std::set<std::tuple<int64_t, int64_t, int32_t>> seen;
  for (uint32_t i = 0; i < n_entries; ++i) {
    GemmPlanEntry e;
    e.n = r.le<int64_t>("an entry");
    e.k = r.le<int64_t>("an entry");
    e.bucket = r.le<int32_t>("an entry");
    e.splits = r.le<int32_t>("an entry");
    const uint32_t flags = r.le<uint32_t>("an entry");
    const uint32_t reserved = r.le<uint32_t>("an entry");
    check((flags & ~(kFlagUseLt | kFlagChain | kFlagTileRuns)) == 0 && reserved == 0,
          "GEMM plan file: entry {}: unknown flags {:#x} or reserved {:#x}", i, flags, reserved);
    e.use_lt = (flags & kFlagUseLt) != 0;
    e.chain = (flags & kFlagChain) != 0;
    e.tile_runs = (flags & kFlagTileRuns) != 0;
    for (uint64_t& word : e.algo) word = r.le<uint64_t>("an entry");
    validate_gemm_plan_entry(e);
    check(seen.insert({e.n, e.k, e.bucket}).second,
          "GEMM plan file: two entries for n={} k={} bucket={}", e.n, e.k, e.bucket);
    f.entries.push_back(e);
  }
  const uint64_t lo = r.le<uint64_t>("the checksum");
  const uint64_t hi = r.le<uint64_t>("the checksum");
  check(lo == h.lo && hi == h.hi, "GEMM plan file: checksum mismatch (the file is corrupt)");
  return f;
}

GemmPlanLoad load_gemm_plan_file(const std::string& path, std::string_view key) {
  GemmPlanLoad out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  out.found = true;
  try {
    check(fs::is_regular_file(path, ec), "not a regular file");
    std::ifstream in(path, std::ios::binary);
    check(in.good(), "cannot open it");
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    check(size >= 0, "cannot read its size");
    // Far above any real file (65536 entries ≈ 6 MB): refuse before allocating.
    check(size <= std::streamoff{64} << 20, "{} bytes is not a plan file", size);
    std::vector<std::byte> bytes(static_cast<size_t>(size));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(bytes.data()), size);
    check(in.gcount() == size, "short read");
    GemmPlanFile f = parse_gemm_plan_file(bytes);
    if (f.key != key) {
      out.warning = fmt::format(
          "GEMM plan file {} was written for another GPU, driver or library ({}); "
          "tuning again and rewriting it for this one ({})",
          path, f.key, key);
      return out;
    }
    out.entries = std::move(f.entries);
  } catch (const std::exception& e) {
    out.entries.clear();
    out.warning = fmt::format("GEMM plan file {} not used: {}; tuning again and rewriting it",
                              path, e.what());
  }
  return out;
}

void write_gemm_plan_file(const std::string& path, const GemmPlanFile& file) {
  const std::vector<std::byte> bytes = format_gemm_plan_file(file);
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  check(!ec, "cannot create the folder of the GEMM plan file {}: {}", path, ec.message());
  // A name of this writer's own — the process and a count within it (tensor-parallel ranks are
  // threads of one process, each with its plans) — so concurrent writers never share a
  // temporary file; the rename replaces the file in one step (a reader sees the old file or
  // the new one).
  static std::atomic<uint64_t> writes{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, static_cast<long>(::getpid()),
                                      writes.fetch_add(1, std::memory_order_relaxed));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    check(out.good(), "cannot write the GEMM plan file {} (temporary {})", path, tmp);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out.good()) {
      out.close();
      fs::remove(tmp, ec);
      throw_error("cannot write the GEMM plan file {} (temporary {})", path, tmp);
    }
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    throw_error("cannot replace the GEMM plan file {}: {}", path, ec.message());
  }
}

std::optional<std::string> default_gemm_plan_cache_path(std::string_view key,
                                                        const char* xdg_cache_home,
                                                        const char* home) {
  std::string dir;
  if (xdg_cache_home != nullptr && *xdg_cache_home != '\0')
    dir = xdg_cache_home;
  else if (home != nullptr && *home != '\0')
    dir = std::string(home) + "/.cache";
  else
    return std::nullopt;
  const Hash128 h = hash_bytes(std::as_bytes(std::span(key.data(), key.size())));
  return fmt::format("{}/detllm/gemm-plans-{:016x}.bin", dir, h.lo);
}

std::optional<std::string> default_gemm_plan_cache_path(std::string_view key) {
  return default_gemm_plan_cache_path(key, std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
}

}  // namespace detllm::kernels
