// GGUF parsing and validation. Layout (little-endian, ggml docs/gguf.md):
//   "GGUF" | version:u32 | n_tensors:u64 | n_kv:u64 | kv[n_kv] | tensor_info[n_tensors]
//   | zero padding to general.alignment | tensor data (offsets relative to its start)
// Every read goes through Reader, which checks the bytes are there first; every count is
// checked against the bytes left before anything is allocated for it.
#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "core/mmap_file.h"

namespace detllm {

namespace {

// Sanity limits: far above any real model, low enough that a corrupt count fails fast.
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
constexpr uint64_t kMaxKeys = uint64_t{1} << 20;
constexpr uint64_t kMaxKeyLength = 65535;  // the spec's limit for keys
constexpr uint64_t kMaxTensorNameLength = 65535;
constexpr uint64_t kMaxMetadataElements = uint64_t{1} << 24;  // all array elements together
constexpr int kMaxArrayDepth = 8;                             // arrays of arrays of ...
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

// Metadata value types (GGUF spec, gguf_metadata_value_type).
enum ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// Bytes an element of this type occupies at least (strings: the u64 length; arrays: the
// element type and count). 0 for an unknown type.
uint64_t min_value_size(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    case kString:
      return 8;
    case kArray:
      return 4 + 8;
    default:
      return 0;
  }
}

// Bounds-checked little-endian cursor over the file bytes.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining()) {
      throw_error("{}: truncated GGUF file: {} needs {} bytes at offset {}, only {} remain", name_,
                  what, n, pos_, remaining());
    }
  }

  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what, uint64_t max_length) {
    const uint64_t n = read<uint64_t>(what + " length");
    if (n > max_length) {
      throw_error("{}: corrupt GGUF file: {} has length {} (at most {} allowed) at offset {}",
                  name_, what, n, max_length, pos_ - 8);
    }
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

struct MetadataParser {
  Reader& r;
  const std::string& name;
  uint64_t elements_left = kMaxMetadataElements;

  GgufValue read_value(uint32_t type, const std::string& key, int depth) {
    const std::string what = fmt::format("value of metadata key '{}'", key);
    GgufValue out;
    switch (type) {
      case kU8:
        out.v = uint64_t{r.read<uint8_t>(what)};
        break;
      case kI8:
        out.v = int64_t{r.read<int8_t>(what)};
        break;
      case kU16:
        out.v = uint64_t{r.read<uint16_t>(what)};
        break;
      case kI16:
        out.v = int64_t{r.read<int16_t>(what)};
        break;
      case kU32:
        out.v = uint64_t{r.read<uint32_t>(what)};
        break;
      case kI32:
        out.v = int64_t{r.read<int32_t>(what)};
        break;
      case kU64:
        out.v = r.read<uint64_t>(what);
        break;
      case kI64:
        out.v = r.read<int64_t>(what);
        break;
      case kF32:
        out.v = double{r.read<float>(what)};
        break;
      case kF64:
        out.v = r.read<double>(what);
        break;
      case kBool: {
        const uint8_t b = r.read<uint8_t>(what);
        check(b <= 1,
              "{}: corrupt GGUF file: bool metadata '{}' has byte value {} (must be 0 or 1)", name,
              key, b);
        out.v = b == 1;
        break;
      }
      case kString:
        out.v = r.read_string(what, r.remaining());
        break;
      case kArray:
        out.v = read_array(key, depth);
        break;
      default:
        throw_error("{}: corrupt GGUF file: metadata key '{}' has unknown value type {}", name, key,
                    type);
    }
    return out;
  }

  GgufArray read_array(const std::string& key, int depth) {
    check(depth < kMaxArrayDepth,
          "{}: corrupt GGUF file: metadata '{}' nests arrays deeper than {}", name, key,
          kMaxArrayDepth);
    const std::string what = fmt::format("array of metadata key '{}'", key);
    const uint32_t elem_type = r.read<uint32_t>(what + " element type");
    const uint64_t count = r.read<uint64_t>(what + " count");
    const uint64_t elem_size = min_value_size(elem_type);
    check(elem_size != 0, "{}: corrupt GGUF file: metadata array '{}' has unknown element type {}",
          name, key, elem_type);
    if (count > r.remaining() / elem_size) {
      throw_error(
          "{}: corrupt GGUF file: metadata array '{}' claims {} elements of at least {} "
          "bytes, but only {} bytes remain",
          name, key, count, elem_size, r.remaining());
    }
    if (count > elements_left) {
      throw_error(
          "{}: corrupt GGUF file: metadata arrays hold more than {} elements in total "
          "(at '{}')",
          name, kMaxMetadataElements, key);
    }
    elements_left -= count;
    GgufArray arr;
    arr.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) arr.push_back(read_value(elem_type, key, depth + 1));
    return arr;
  }
};

// x * y into *out; false on uint64 overflow.
bool mul_u64(uint64_t x, uint64_t y, uint64_t* out) {
  return !__builtin_mul_overflow(x, y, out);
}
bool add_u64(uint64_t x, uint64_t y, uint64_t* out) {
  return !__builtin_add_overflow(x, y, out);
}

const char* value_kind(const GgufValue& v) {
  switch (v.v.index()) {
    case 0:
      return "an unsigned integer";
    case 1:
      return "a signed integer";
    case 2:
      return "a float";
    case 3:
      return "a bool";
    case 4:
      return "a string";
    case 5:
      return "an array";
  }
  return "?";
}

}  // namespace

struct GgufFile::Impl : TensorTable<GgufTensorInfo> {
  MappedFile map;  // empty when parsed from memory
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint32_t version = 0;
  std::map<std::string, GgufValue> metadata;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;

  void parse();
  const GgufValue& value(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const GgufValue& v,
                               const char* expected) const;
  int64_t to_int(const std::string& key, const GgufValue& v) const;
};

void GgufFile::Impl::parse() {
  const std::string& name = path;
  Reader r(data, size, name);

  // Header.
  r.need(4, "magic");
  if (std::memcmp(data, "GGUF", 4) != 0) {
    throw_error("{}: not a GGUF file (magic bytes are not 'GGUF')", name);
  }
  r.read<uint32_t>("magic");
  version = r.read<uint32_t>("version");
  if (version != 2 && version != 3) {
    if ((version & 0xffffu) == 0 && version != 0) {
      throw_error(
          "{}: GGUF version field {:#x} looks big-endian; only little-endian GGUF files "
          "are supported",
          name, version);
    }
    throw_error("{}: unsupported GGUF version {} (detllm reads versions 2 and 3)", name, version);
  }
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  check(n_tensors <= kMaxTensors, "{}: corrupt GGUF file: tensor count {} exceeds the limit {}",
        name, n_tensors, kMaxTensors);
  check(n_kv <= kMaxKeys, "{}: corrupt GGUF file: metadata count {} exceeds the limit {}", name,
        n_kv, kMaxKeys);

  // Metadata. Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes.
  check(n_kv <= r.remaining() / 13,
        "{}: corrupt GGUF file: metadata count {} does not fit in the {} bytes left", name, n_kv,
        r.remaining());
  MetadataParser mp{r, name};
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.read_string(fmt::format("metadata key #{}", i), kMaxKeyLength);
    const uint32_t type = r.read<uint32_t>(fmt::format("type of metadata key '{}'", key));
    GgufValue v = mp.read_value(type, key, 0);
    check(!metadata.contains(key), "{}: corrupt GGUF file: duplicate metadata key '{}'", name, key);
    metadata.emplace(std::move(key), std::move(v));
  }

  if (auto it = metadata.find("general.alignment"); it != metadata.end()) {
    const auto* a = std::get_if<uint64_t>(&it->second.v);
    const auto* sa = std::get_if<int64_t>(&it->second.v);
    uint64_t value = 0;
    if (a != nullptr) {
      value = *a;
    } else if (sa != nullptr && *sa > 0) {
      value = static_cast<uint64_t>(*sa);
    } else {
      throw_error("{}: corrupt GGUF file: general.alignment must be a positive integer", name);
    }
    check(value != 0 && (value & (value - 1)) == 0 && value <= kMaxAlignment,
          "{}: corrupt GGUF file: general.alignment {} is not a power of two up to {}", name, value,
          kMaxAlignment);
    alignment = value;
  }

  // Tensor infos. Each takes at least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type)
  // + 8 (offset) bytes.
  check(n_tensors <= r.remaining() / 32,
        "{}: corrupt GGUF file: tensor count {} does not fit in the {} bytes left", name, n_tensors,
        r.remaining());
  std::vector<uint64_t> rel_offsets;
  tensors.reserve(static_cast<size_t>(n_tensors));
  rel_offsets.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = r.read_string(fmt::format("name of tensor #{}", i), kMaxTensorNameLength);
    const std::string what = fmt::format("tensor '{}'", t.name);
    const uint32_t n_dims = r.read<uint32_t>(what + " dimension count");
    check(n_dims >= 1 && n_dims <= kMaxDims,
          "{}: corrupt GGUF file: tensor '{}' has {} dimensions (1 to {} allowed)", name, t.name,
          n_dims, kMaxDims);
    uint64_t ne[kMaxDims] = {1, 1, 1, 1};
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ne[d] = r.read<uint64_t>(what + " dimensions");
      check(ne[d] > 0 && ne[d] <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
            "{}: corrupt GGUF file: tensor '{}' has dimension {} of size {}", name, t.name, d,
            ne[d]);
      check(mul_u64(numel, ne[d], &numel) &&
                numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
            "{}: corrupt GGUF file: tensor '{}' element count overflows", name, t.name);
    }
    t.type = r.read<uint32_t>(what + " type");
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    check(ti != nullptr, "{}: corrupt GGUF file: tensor '{}' has unknown GGML type {}", name,
          t.name, t.type);
    check(ne[0] % static_cast<uint64_t>(ti->block_size) == 0,
          "{}: corrupt GGUF file: tensor '{}' of type {} has row length {}, not a multiple of its "
          "block size {}",
          name, t.name, ti->name, ne[0], ti->block_size);
    check(mul_u64(numel / static_cast<uint64_t>(ti->block_size),
                  static_cast<uint64_t>(ti->type_size), &t.n_bytes),
          "{}: corrupt GGUF file: tensor '{}' byte size overflows", name, t.name);
    rel_offsets.push_back(r.read<uint64_t>(what + " offset"));
    t.shape.assign(n_dims, 0);
    for (uint32_t d = 0; d < n_dims; ++d) t.shape[n_dims - 1 - d] = static_cast<int64_t>(ne[d]);
    check(index.emplace(t.name, tensors.size()).second,
          "{}: corrupt GGUF file: duplicate tensor name '{}'", name, t.name);
    tensors.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment.
  const uint64_t end_infos = r.pos();
  check(add_u64(end_infos, alignment - 1, &data_offset), "{}: corrupt GGUF file", name);
  data_offset -= data_offset % alignment;
  if (!tensors.empty()) {
    check(data_offset <= size,
          "{}: truncated GGUF file: tensor data would start at offset {}, past the end ({} bytes)",
          name, data_offset, size);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    GgufTensorInfo& t = tensors[i];
    const uint64_t rel = rel_offsets[i];
    check(rel % alignment == 0,
          "{}: corrupt GGUF file: tensor '{}' offset {} is not a multiple of the alignment {}",
          name, t.name, rel, alignment);
    uint64_t end = 0;
    check(add_u64(data_offset, rel, &t.offset) && add_u64(t.offset, t.n_bytes, &end) && end <= size,
          "{}: truncated or corrupt GGUF file: tensor '{}' ({} bytes at data offset {}) lies "
          "outside the file ({} bytes)",
          name, t.name, t.n_bytes, rel, size);
  }
  // No two tensors may share bytes.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensorInfo& prev = tensors[order[k - 1]];
    const GgufTensorInfo& cur = tensors[order[k]];
    check(prev.offset + prev.n_bytes <= cur.offset,
          "{}: corrupt GGUF file: tensors '{}' and '{}' overlap", name, prev.name, cur.name);
  }
}

const GgufValue& GgufFile::Impl::value(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) throw_error("{}: GGUF metadata key '{}' is missing", path, key);
  return it->second;
}

void GgufFile::Impl::wrong_type(const std::string& key, const GgufValue& v,
                                const char* expected) const {
  throw_error("{}: GGUF metadata key '{}' is {}, expected {}", path, key, value_kind(v), expected);
}

int64_t GgufFile::Impl::to_int(const std::string& key, const GgufValue& v) const {
  if (const auto* s = std::get_if<int64_t>(&v.v)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    check(*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
          "{}: GGUF metadata key '{}' value {} does not fit in int64", path, key, *u);
    return static_cast<int64_t>(*u);
  }
  wrong_type(key, v, "an integer");
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::~GgufFile() = default;

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  return std::unique_ptr<GgufFile>(new GgufFile(from_file<Impl>(path)));
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, std::string name) {
  return std::unique_ptr<GgufFile>(new GgufFile(from_bytes<Impl>(data, size, std::move(name))));
}

uint32_t GgufFile::version() const {
  return impl_->version;
}
const std::map<std::string, GgufValue>& GgufFile::metadata() const {
  return impl_->metadata;
}
bool GgufFile::has_key(const std::string& key) const {
  return impl_->metadata.contains(key);
}
uint64_t GgufFile::alignment() const {
  return impl_->alignment;
}
uint64_t GgufFile::data_offset() const {
  return impl_->data_offset;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = impl_->value(key);
  if (const auto* s = std::get_if<std::string>(&v.v)) return *s;
  impl_->wrong_type(key, v, "a string");
}

int64_t GgufFile::get_int(const std::string& key) const {
  return impl_->to_int(key, impl_->value(key));
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = impl_->value(key);
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  impl_->wrong_type(key, v, "a float");
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = impl_->value(key);
  if (const auto* b = std::get_if<bool>(&v.v)) return *b;
  impl_->wrong_type(key, v, "a bool");
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = impl_->value(key);
  const auto* arr = std::get_if<GgufArray>(&v.v);
  if (arr == nullptr) impl_->wrong_type(key, v, "an array of strings");
  std::vector<std::string> out;
  out.reserve(arr->size());
  for (const GgufValue& e : *arr) {
    const auto* s = std::get_if<std::string>(&e.v);
    if (s == nullptr) impl_->wrong_type(key, e, "a string (array element)");
    out.push_back(*s);
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue& v = impl_->value(key);
  const auto* arr = std::get_if<GgufArray>(&v.v);
  if (arr == nullptr) impl_->wrong_type(key, v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(arr->size());
  for (const GgufValue& e : *arr) out.push_back(impl_->to_int(key, e));
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue& v = impl_->value(key);
  const auto* arr = std::get_if<GgufArray>(&v.v);
  if (arr == nullptr) impl_->wrong_type(key, v, "an array of floats");
  std::vector<double> out;
  out.reserve(arr->size());
  for (const GgufValue& e : *arr) {
    const auto* d = std::get_if<double>(&e.v);
    if (d == nullptr) impl_->wrong_type(key, e, "a float (array element)");
    out.push_back(*d);
  }
  return out;
}

const std::vector<GgufTensorInfo>& GgufFile::tensor_infos() const {
  return impl_->tensors;
}

const TensorTable<GgufTensorInfo>& GgufFile::table() const {
  return *impl_;
}

const uint8_t* GgufFile::tensor_data(const std::string& name) const {
  return impl_->data + tensor_info(name).offset;
}

namespace {

// The DType of a tensor detllm can load; throws naming the tensor and file otherwise.
DType loadable_dtype(const GgufTensorInfo& t, const std::string& path) {
  const std::optional<DType> dt = ggml_dtype(t.type);
  if (!dt) {
    throw_error(
        "{}: tensor '{}' has GGML type {}, which detllm cannot load (supported: F32, F16, "
        "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS); "
        "re-quantize the model to one of these",
        path, t.name, ggml_type_name(t.type));
  }
  return *dt;
}

}  // namespace

HostTensor GgufFile::load_stored(const std::string& name) const {
  const GgufTensorInfo& t = tensor_info(name);
  const DType dt = loadable_dtype(t, impl_->path);
  if (dt == DType::kF32) return load_f32(name);
  HostTensor out;
  out.shape = t.shape;
  out.dtype = dt;
  // The open() checks made n_bytes = numel / block * block bytes and the row length a
  // multiple of the block, so the bytes are whole rows of whole blocks.
  check(static_cast<int64_t>(t.n_bytes) == dtype_row_bytes(dt, out.numel()),
        "{}: tensor '{}' holds {} bytes, not {} {} elements", impl_->path, name, t.n_bytes,
        out.numel(), dtype_name(dt));
  const uint8_t* p = impl_->data + t.offset;
  out.raw.assign(p, p + t.n_bytes);
  return out;
}

HostTensor GgufFile::load_f32(const std::string& name) const {
  const GgufTensorInfo& t = tensor_info(name);
  loadable_dtype(t, impl_->path);
  HostTensor out;
  out.shape = t.shape;
  out.data.resize(static_cast<size_t>(out.numel()));
  dequantize_ggml(t.type, impl_->data + t.offset, out.data.data(), out.numel());
  return out;
}

}  // namespace detllm
