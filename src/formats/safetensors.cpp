// safetensors parsing and validation (format: huggingface/safetensors README), and the
// directory/shard resolution of Hugging Face checkpoints. Validation follows the reference
// implementation: tensors sorted by offset must tile the byte buffer exactly, and each one's
// byte size must equal product(shape) * dtype size.
#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/fp8.h"
#include "core/mmap_file.h"
#include "formats/dequant.h"

namespace detllm {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr int kMaxJsonDepth = 16;                  // real headers nest 3 deep
constexpr size_t kMaxRank = 8;

// Element size of every byte-sized safetensors dtype; 0 for unknown or sub-byte ones.
uint64_t dtype_size_bytes(const std::string& dtype) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},     {"I32", 4},
      {"F32", 4},  {"U64", 8}, {"I64", 8}, {"F64", 8},     {"C64", 8},
  };
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

// The dtypes detllm loads; false for the others.
bool loadable_dtype(const std::string& dtype, DType* out) {
  if (dtype == "F32")
    *out = DType::kF32;
  else if (dtype == "F16")
    *out = DType::kF16;
  else if (dtype == "BF16")
    *out = DType::kBF16;
  else
    return false;
  return true;
}

// Parses JSON text, refusing nesting deeper than kMaxJsonDepth (a corrupt header must not
// exhaust the stack). `what` names the file in errors.
json parse_json(const uint8_t* text, size_t n, const std::string& what) {
  const json::parser_callback_t limit_depth = [&what](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) throw_error("{}: JSON nests deeper than {}", what, kMaxJsonDepth);
    return true;
  };
  try {
    return json::parse(text, text + n, limit_depth);
  } catch (const json::exception& e) {
    throw_error("{}: invalid JSON: {}", what, e.what());
  }
}

uint64_t json_u64(const json& j, const std::string& what) {
  if (!j.is_number_unsigned()) throw_error("{} must be a non-negative integer", what);
  return j.get<uint64_t>();
}

}  // namespace

// tensors: sorted by offset.
struct SafetensorsFile::Impl : TensorTable<SafetensorsTensorInfo> {
  MappedFile map;  // empty when parsed from memory
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::map<std::string, std::string> metadata;

  void parse();
};

void SafetensorsFile::Impl::parse() {
  const std::string& name = path;
  check(size >= 8, "{}: not a safetensors file: {} bytes, shorter than the 8-byte header length",
        name, size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  check(header_len <= kMaxHeaderBytes,
        "{}: corrupt safetensors file: header length {} exceeds the limit {}", name, header_len,
        kMaxHeaderBytes);
  check(header_len <= size - 8,
        "{}: truncated safetensors file: header length {} but only {} bytes follow", name,
        header_len, size - 8);
  check(header_len >= 2 && data[8] == '{',
        "{}: not a safetensors file: the header does not start with a JSON object", name);
  const json header =
      parse_json(data + 8, static_cast<size_t>(header_len), name + " (safetensors header)");
  check(header.is_object(), "{}: corrupt safetensors file: the header is not a JSON object", name);

  const uint64_t buffer_start = 8 + header_len;
  const uint64_t buffer_size = size - buffer_start;
  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__") {
      check(entry.is_object(), "{}: corrupt safetensors file: __metadata__ is not an object", name);
      for (const auto& [mk, mv] : entry.items()) {
        check(mv.is_string(),
              "{}: corrupt safetensors file: __metadata__ value '{}' is not a "
              "string",
              name, mk);
        metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    const std::string where = fmt::format("{}: corrupt safetensors file: tensor '{}'", name, key);
    check(entry.is_object(), "{} is not a JSON object", where);
    SafetensorsTensorInfo t;
    t.name = key;

    auto dtype_it = entry.find("dtype");
    check(dtype_it != entry.end() && dtype_it->is_string(), "{} lacks a string 'dtype'", where);
    t.dtype = dtype_it->get<std::string>();
    const uint64_t elem_size = dtype_size_bytes(t.dtype);
    check(elem_size != 0,
          "{}: tensor '{}' has dtype '{}', which detllm does not know (it loads "
          "F32, F16 and BF16)",
          name, key, t.dtype);

    auto shape_it = entry.find("shape");
    check(shape_it != entry.end() && shape_it->is_array(), "{} lacks a 'shape' array", where);
    check(shape_it->size() <= kMaxRank, "{} has {} dimensions (at most {})", where,
          shape_it->size(), kMaxRank);
    uint64_t numel = 1;
    for (const json& d : *shape_it) {
      const uint64_t dim = json_u64(d, where + " shape entry");
      check(dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                !__builtin_mul_overflow(numel, dim, &numel) &&
                numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
            "{} element count overflows", where);
      t.shape.push_back(static_cast<int64_t>(dim));
    }

    auto off_it = entry.find("data_offsets");
    check(off_it != entry.end() && off_it->is_array() && off_it->size() == 2,
          "{} lacks 'data_offsets' [begin, end]", where);
    const uint64_t begin = json_u64((*off_it)[0], where + " data_offsets");
    const uint64_t end = json_u64((*off_it)[1], where + " data_offsets");
    check(begin <= end && end <= buffer_size,
          "{} has data_offsets [{}, {}] outside the {}-byte data buffer", where, begin, end,
          buffer_size);
    check(!__builtin_mul_overflow(numel, elem_size, &t.n_bytes) && t.n_bytes == end - begin,
          "{} has {} bytes of data, but its shape and dtype {} need {} elements", where,
          end - begin, t.dtype, numel);
    t.offset = buffer_start + begin;
    tensors.push_back(std::move(t));
  }

  // The tensors, sorted by offset, must tile the buffer: no gap, no overlap, nothing after.
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.n_bytes < b.n_bytes;
  });
  uint64_t expected = buffer_start;
  for (const SafetensorsTensorInfo& t : tensors) {
    check(t.offset == expected,
          "{}: corrupt safetensors file: tensor '{}' starts at data offset {}, expected {} (data "
          "offsets overlap or leave a gap)",
          name, t.name, t.offset - buffer_start, expected - buffer_start);
    expected = t.offset + t.n_bytes;
  }
  check(expected == size,
        "{}: corrupt safetensors file: {} bytes after the last tensor are not covered by any "
        "tensor",
        name, size - expected);
  for (size_t i = 0; i < tensors.size(); ++i) index.emplace(tensors[i].name, i);
}

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  return std::unique_ptr<SafetensorsFile>(new SafetensorsFile(from_file<Impl>(path)));
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, size_t size,
                                                        std::string name) {
  return std::unique_ptr<SafetensorsFile>(
      new SafetensorsFile(from_bytes<Impl>(data, size, std::move(name))));
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}
const std::vector<SafetensorsTensorInfo>& SafetensorsFile::tensor_infos() const {
  return impl_->tensors;
}

const TensorTable<SafetensorsTensorInfo>& SafetensorsFile::table() const {
  return *impl_;
}

RawTensorView SafetensorsFile::raw_view(const std::string& name) const {
  const SafetensorsTensorInfo& t = tensor_info(name);
  DType dtype;
  if (!loadable_dtype(t.dtype, &dtype)) {
    throw_error("{}: tensor '{}' has dtype {}; detllm loads only F32, F16 and BF16 weights",
                impl_->path, name, t.dtype);
  }
  return RawTensorView{dtype, t.shape, impl_->data + t.offset, t.n_bytes};
}

HostTensor SafetensorsFile::load_f32(const std::string& name) const {
  const SafetensorsTensorInfo& t = tensor_info(name);
  if (t.dtype == "F8_E4M3") {
    // FP8 checkpoint weights: each code's exact value (their scales are separate tensors;
    // model/llama_weights.cpp re-encodes these values, which round-trip, with the scales).
    HostTensor out;
    out.shape = t.shape;
    out.data.resize(static_cast<size_t>(out.numel()));
    const uint8_t* p = impl_->data + t.offset;
    for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = fp8_e4m3_to_float(p[i]);
    return out;
  }
  const RawTensorView v = raw_view(name);
  HostTensor out;
  out.shape = v.shape;
  out.data.resize(static_cast<size_t>(out.numel()));
  widen_to_f32(v.dtype, v.data, out.data.data(), out.numel());
  return out;
}

// ---- SafetensorsDir ----------------------------------------------------------------------

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// weight_map of an index file: tensor -> shard file name (validated: a plain file name).
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  const MappedFile file = MappedFile::open(index_path);
  check(file.size() <= kMaxHeaderBytes, "{}: index file is larger than {} bytes", index_path,
        kMaxHeaderBytes);
  const json j = parse_json(file.data(), file.size(), index_path);
  check(j.is_object(), "{}: the index is not a JSON object", index_path);
  auto wm = j.find("weight_map");
  check(wm != j.end() && wm->is_object(), "{}: the index lacks a 'weight_map' object", index_path);
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : wm->items()) {
    check(shard.is_string(), "{}: weight_map entry '{}' is not a string", index_path, tensor);
    const std::string s = shard.get<std::string>();
    check(!s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
              s.find('\\') == std::string::npos,
          "{}: weight_map entry '{}' names shard '{}', which is not a file name in the same "
          "directory",
          index_path, tensor, s);
    out.emplace(tensor, s);
  }
  return out;
}

}  // namespace

SafetensorsDir::~SafetensorsDir() = default;

std::unique_ptr<SafetensorsDir> SafetensorsDir::open(const std::string& path) {
  namespace fs = std::filesystem;
  std::unique_ptr<SafetensorsDir> dir(new SafetensorsDir());
  dir->path_ = path;
  std::error_code ec;
  fs::path index_path;
  fs::path single_path;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / kIndexName, ec)) {
      index_path = fs::path(path) / kIndexName;
    } else if (fs::exists(fs::path(path) / kSingleName, ec)) {
      single_path = fs::path(path) / kSingleName;
    } else {
      throw_error("{}: directory holds neither {} nor {}", path, kSingleName, kIndexName);
    }
  } else if (fs::path(path).extension() == ".json") {
    index_path = path;
  } else {
    single_path = path;  // MappedFile::open reports a missing file
  }

  if (!single_path.empty()) {
    dir->shards_.push_back(SafetensorsFile::open(single_path.string()));
  } else {
    const std::map<std::string, std::string> weight_map = read_weight_map(index_path.string());
    check(!weight_map.empty(), "{}: weight_map is empty", index_path.string());
    std::set<std::string> shard_names;
    for (const auto& [tensor, shard] : weight_map) shard_names.insert(shard);
    std::map<std::string, size_t> shard_pos;
    for (const std::string& s : shard_names) {
      shard_pos.emplace(s, dir->shards_.size());
      dir->shards_.push_back(SafetensorsFile::open((index_path.parent_path() / s).string()));
    }
    for (const auto& [tensor, shard] : weight_map) {
      check(dir->shards_[shard_pos.at(shard)]->has_tensor(tensor),
            "{}: weight_map places tensor '{}' in {}, which does not contain it",
            index_path.string(), tensor, shard);
    }
  }

  for (size_t i = 0; i < dir->shards_.size(); ++i) {
    for (const SafetensorsTensorInfo& t : dir->shards_[i]->tensor_infos()) {
      auto [it, inserted] = dir->shard_index_.emplace(t.name, i);
      check(inserted, "{}: tensor '{}' appears in both {} and {}", path, t.name,
            dir->shards_[it->second]->path(), dir->shards_[i]->path());
      dir->names_.push_back(t.name);
    }
  }
  return dir;
}

const SafetensorsFile& SafetensorsDir::shard_of(const std::string& name) const {
  auto it = shard_index_.find(name);
  if (it == shard_index_.end()) throw_error("{}: no tensor named '{}'", path_, name);
  return *shards_[it->second];
}

RawTensorView SafetensorsDir::raw_view(const std::string& name) const {
  return shard_of(name).raw_view(name);
}

std::string SafetensorsDir::dtype(const std::string& name) const {
  return shard_of(name).tensor_info(name).dtype;
}

std::vector<std::string> SafetensorsDir::tensor_names() const {
  return names_;
}

bool SafetensorsDir::has_tensor(const std::string& name) const {
  return shard_index_.contains(name);
}

std::vector<int64_t> SafetensorsDir::tensor_shape(const std::string& name) const {
  return shard_of(name).tensor_shape(name);
}

HostTensor SafetensorsDir::load_f32(const std::string& name) const {
  return shard_of(name).load_f32(name);
}

}  // namespace detllm
