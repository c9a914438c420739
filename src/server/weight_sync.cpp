// vLLM's weight-transfer protocol over the server's host fp32 weights (see weight_sync.h).
#include "server/weight_sync.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "formats/safetensors.h"
#include "server/api_error.h"
#include "server/packed_chunks.h"

namespace detllm::server {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, "invalid_request_error", param);
}

[[noreturn]] void out_of_order(const std::string& message) {
  throw ApiError(409, message, "invalid_request_error");
}

const json& object_field(const json& body, const char* key, const char* what) {
  if (!body.is_object()) bad("", fmt::format("the body must be a JSON object ({})", what));
  const auto it = body.find(key);
  if (it == body.end() || !it->is_object()) {
    bad(key, fmt::format("'{}' is required: an object ({})", key, what));
  }
  return *it;
}

std::vector<std::string> string_list(const json& o, const char* key, bool required) {
  std::vector<std::string> out;
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    if (required) bad(key, fmt::format("'{}' is required: a list of strings", key));
    return out;
  }
  if (!it->is_array()) bad(key, fmt::format("'{}' must be a list of strings", key));
  for (const json& v : *it) {
    if (!v.is_string()) bad(key, fmt::format("'{}' must be a list of strings", key));
    out.push_back(v.get<std::string>());
  }
  return out;
}

// The dtype names check_weights takes, from a torch name ("bfloat16", "torch.float32") or a
// safetensors one ("BF16").
std::string canonical_dtype(std::string d) {
  if (d.rfind("torch.", 0) == 0) d = d.substr(6);
  if (d == "F32" || d == "float" || d == "fp32") return "float32";
  if (d == "BF16" || d == "bf16") return "bfloat16";
  if (d == "F16" || d == "half" || d == "fp16") return "float16";
  return d;  // check_weights names anything else as refused
}

std::string dtype_of(DType d) {
  switch (d) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return std::string(dtype_name(d));
  }
}

// A safetensors header's dtype as check_weights names it ("F64" -> "float64": refused by name).
std::string safetensors_dtype(const std::string& d) {
  static const std::map<std::string, std::string> kNames = {
      {"F32", "float32"}, {"BF16", "bfloat16"}, {"F16", "float16"}, {"F64", "float64"},
      {"I64", "int64"},   {"I32", "int32"},     {"I16", "int16"},   {"I8", "int8"},
      {"U8", "uint8"},    {"BOOL", "bool"}};
  const auto it = kNames.find(d);
  return it == kNames.end() ? d : it->second;
}

// The data pointer of a source whose values are not read (check_weights with on_device).
const float kNotRead = 0.0f;

size_t element_bytes(const std::string& dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "bfloat16" || dtype == "float16") return 2;
  return 0;
}

// The bytes of one element of a torch dtype the trainer may broadcast (so a refused tensor's
// bytes can still be received and dropped); 0 for a name torch does not have.
size_t torch_element_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"float32", 4}, {"bfloat16", 2}, {"float16", 2}, {"float64", 8}, {"int64", 8},
      {"int32", 4},   {"int16", 2},    {"int8", 1},    {"uint8", 1},   {"bool", 1},
      {"float8_e4m3fn", 1}, {"float8_e5m2", 1}, {"complex64", 8}, {"complex128", 16},
      {"uint16", 2}, {"uint32", 4}, {"uint64", 8}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

// A JSON integer field in [lo, hi], or `fallback` when absent/null.
int64_t int_field(const json& o, const char* key, const std::string& where, int64_t lo, int64_t hi,
                  std::optional<int64_t> fallback) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    if (!fallback) bad(where + key, fmt::format("{}{} is required: an integer", where, key));
    return *fallback;
  }
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    bad(where + key, fmt::format("{}{} must be an integer in [{}, {}]", where, key, lo, hi));
  }
  return it->get<int64_t>();
}

bool bool_field(const json& o, const char* key, const std::string& where, bool fallback) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad(where + key, fmt::format("{}{} must be true or false", where, key));
  return it->get<bool>();
}

// vLLM's DEFAULT_PACKED_BUFFER_SIZE_BYTES and DEFAULT_PACKED_NUM_BUFFERS.
constexpr int64_t kDefaultPackedBufferBytes = int64_t{1} << 30;
constexpr int64_t kDefaultPackedNumBuffers = 2;

// init_info keys that make an init_info without "backend" vLLM's NCCL one.
bool names_nccl_fields(const json& info) {
  for (const char* k : {"master_address", "master_port", "rank_offset", "world_size",
                        "nccl_unique_id_b64"}) {
    if (info.contains(k)) return true;
  }
  return false;
}

// One POSIX shared-memory object, mapped read-only for the time of one update_weights call.
class ShmView {
 public:
  ShmView(const std::string& name, size_t need) : name_(name) {
    if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos) {
      bad("shm_names", fmt::format("shm name '{}' must be one POSIX shared-memory name: '/' then "
                                   "no other '/' (as shm_open takes it)", name));
    }
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) {
      bad("shm_names", fmt::format("shm_open('{}'): {} (the trainer must create it on this "
                                   "machine before /update_weights)", name, std::strerror(errno)));
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < need) {
      ::close(fd);
      bad("shm_names", fmt::format("shm object '{}' holds {} bytes; its tensor needs {}", name,
                                   static_cast<long long>(st.st_size), need));
    }
    size_ = std::max<size_t>(need, 1);
    void* p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) bad("shm_names", fmt::format("mmap('{}'): {}", name, std::strerror(errno)));
    data_ = p;
  }
  ~ShmView() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  ShmView(const ShmView&) = delete;
  ShmView& operator=(const ShmView&) = delete;
  const void* data() const { return data_; }

 private:
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

WeightSync::WeightSync(EngineLoop& loop, const ModelConfig& config, ModelWeights& weights,
                       IdentityFn identity_of, NcclLinkFactory nccl, int32_t nccl_device,
                       PlaceFn place)
    : loop_(loop),
      slots_(parameter_slots(config, &weights)),
      identity_of_(std::move(identity_of)),
      nccl_factory_(std::move(nccl)),
      nccl_device_(nccl_device),
      place_(std::move(place)) {}

WeightSync::~WeightSync() = default;

std::vector<std::string> WeightSync::backends() const {
  std::vector<std::string> out = {"path", "shm"};
  if (nccl_factory_) out.push_back("nccl");
  return out;
}

json WeightSync::init(const json& body) {
  std::lock_guard lk(mu_);
  const json& info = object_field(body, "init_info", "the transfer backend's settings");
  const auto it = info.find("backend");
  if ((it == info.end() && names_nccl_fields(info)) ||
      (it != info.end() && it->is_string() && it->get<std::string>() == "nccl")) {
    return init_nccl(info);
  }
  if (it == info.end() || !it->is_string()) {
    bad("init_info.backend",
        "init_info.backend is required: \"path\" (a safetensors directory or file the server "
        "reads) or \"shm\" (POSIX shared memory from a process on this machine); vLLM's NCCL "
        "settings (master_address, ...) are not supported");
  }
  const std::string b = it->get<std::string>();
  if (b == "ipc") {
    bad("init_info.backend", "backend 'ipc' (CUDA IPC handles) is not supported by detllm "
                             "serve: use \"nccl\", \"path\" or \"shm\"");
  }
  if (b != "path" && b != "shm") {
    bad("init_info.backend", fmt::format("unknown backend '{}': \"path\", \"shm\" or \"nccl\"", b));
  }
  for (const auto& [key, v] : info.items()) {
    if (key != "backend") {
      bad("init_info." + key, fmt::format("init_info.{} is not a setting of backend '{}' (it "
                                          "takes none)", key, b));
    }
  }
  if (started_) out_of_order("a weight update is in progress: /finish_weight_update first");
  link_.reset();  // a trainer that moves to path/shm leaves its NCCL group
  backend_ = b;
  return {{"status", "ok"}, {"backend", backend_}};
}

json WeightSync::init_nccl(const json& info) {
  static const std::set<std::string> kKeys = {
      "backend",    "master_address", "master_port",          "rank_offset",
      "world_size", "packed",         "packed_buffer_size_bytes", "packed_num_buffers",
      "nccl_unique_id_b64"};
  for (const auto& [key, v] : info.items()) {
    if (kKeys.count(key) == 0) {
      bad("init_info." + key, fmt::format("init_info.{} is not a setting of the nccl backend "
                                          "({})", key, fmt::join(kKeys, ", ")));
    }
  }
  const std::string w = "init_info.";
  NcclJoinInfo join;
  join.rank = static_cast<int32_t>(int_field(info, "rank_offset", w, 1, 1 << 20, std::nullopt));
  join.world_size = static_cast<int32_t>(int_field(info, "world_size", w, 2, 1 << 20, std::nullopt));
  if (join.world_size != join.rank + 1) {
    bad("init_info.world_size", fmt::format("world_size {} with rank_offset {}: this server is "
                                            "one process (/get_world_size answers 1), so the "
                                            "group is the trainer's ranks then this one: "
                                            "world_size must be rank_offset + 1", join.world_size,
                                            join.rank));
  }
  const bool has_uid = info.contains("nccl_unique_id_b64") && !info["nccl_unique_id_b64"].is_null();
  const bool has_addr = info.contains("master_address") && !info["master_address"].is_null();
  const bool has_port = info.contains("master_port") && !info["master_port"].is_null();
  if (has_uid && (has_addr || has_port)) {
    bad("init_info.nccl_unique_id_b64", "pass nccl_unique_id_b64 or master_address/master_port, "
                                        "not both");
  }
  if (has_uid) {
    if (!info["nccl_unique_id_b64"].is_string()) {
      bad("init_info.nccl_unique_id_b64", "init_info.nccl_unique_id_b64 must be a string");
    }
    try {
      join.unique_id = unique_id_from_base64(info["nccl_unique_id_b64"].get<std::string>());
    } catch (const Error& e) {
      bad("init_info.nccl_unique_id_b64", e.what());
    }
  } else {
    if (!has_addr || !has_port) {
      bad("init_info.master_address", "the nccl backend needs master_address and master_port "
                                      "(the trainer's TCPStore), or nccl_unique_id_b64");
    }
    if (!info["master_address"].is_string() || info["master_address"].get<std::string>().empty()) {
      bad("init_info.master_address", "init_info.master_address must be a host name or address");
    }
    join.master_address = info["master_address"].get<std::string>();
    join.master_port = static_cast<uint16_t>(int_field(info, "master_port", w, 1, 65535, std::nullopt));
  }
  const bool packed = bool_field(info, "packed", w, false);
  const int64_t buffer =
      int_field(info, "packed_buffer_size_bytes", w, 1, int64_t{1} << 40, kDefaultPackedBufferBytes);
  // The trainer's double buffering; the receiver takes the broadcasts one after another in the
  // order they were issued, whatever the count (checked, not used).
  int_field(info, "packed_num_buffers", w, 1, 64, kDefaultPackedNumBuffers);
  if (!nccl_factory_) {
    bad("init_info.backend", "the nccl weight transfer needs a detllm built with NCCL (cmake "
                             "-DDETLLM_NCCL=ON where NCCL and CUDA are installed); this build "
                             "has none: use \"path\" or \"shm\"");
  }
  if (started_) out_of_order("a weight update is in progress: /finish_weight_update first");
  join.device = nccl_device_;
  link_.reset();  // a group of an earlier init is left first
  backend_.clear();
  try {
    link_ = nccl_factory_(join);
  } catch (const Error& e) {
    bad("init_info", fmt::format("joining the trainer's NCCL group failed: {}", e.what()));
  }
  backend_ = "nccl";
  packed_ = packed;
  packed_buffer_bytes_ = static_cast<uint64_t>(buffer);
  last_meta_.clear();
  return {{"status", "ok"}, {"backend", backend_}, {"rank", join.rank},
          {"world_size", join.world_size}, {"nccl", link_->describe()}};
}

json WeightSync::start(const json& body) {
  std::lock_guard lk(mu_);
  if (body.is_object()) {
    for (const auto& [key, v] : body.items()) {
      if (key == "is_checkpoint_format") {
        if (!v.is_boolean() || !v.get<bool>()) {
          bad(key, "is_checkpoint_format must be true: tensors are taken by Hugging Face "
                   "checkpoint name and layout only");
        }
      } else {
        bad(key, fmt::format("'{}' is not a field of /start_weight_update", key));
      }
    }
  } else if (!body.is_null()) {
    bad("", "the body must be a JSON object or empty");
  }
  if (backend_.empty()) out_of_order("call /init_weight_transfer_engine first");
  if (started_) out_of_order("a weight update is already in progress: /finish_weight_update");
  started_ = true;
  staged_.clear();
  return {{"status", "ok"}};
}

void WeightSync::check_all(std::span<const WeightSource> sources) const {
  try {
    check_weights(slots_, sources);
  } catch (const Error& e) {
    bad("update_info", e.what());
  }
}

void WeightSync::stage(std::span<const WeightSource> sources,
                       std::map<size_t, std::vector<float>>& into) {
  std::vector<size_t> index;
  try {
    index = check_weights(slots_, sources);  // every name, shape and dtype, or nothing
  } catch (const Error& e) {
    bad("update_info", e.what());
  }
  std::vector<std::string> twice;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (staged_.count(index[i]) != 0 || into.count(index[i]) != 0) twice.push_back(sources[i].name);
  }
  if (!twice.empty()) {
    bad("update_info.names", fmt::format("already given in this update (each tensor once between "
                                         "/start_weight_update and /finish_weight_update): {}",
                                         fmt::join(twice, ", ")));
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    std::vector<float> v(static_cast<size_t>(slots_[index[i]].numel()));
    widen_to_f32(sources[i], v.data(), v.size());
    into.emplace(index[i], std::move(v));
  }
}

json WeightSync::update(const json& body) {
  std::lock_guard lk(mu_);
  const json& info = object_field(body, "update_info", "which tensors, and where they are");
  if (!started_) out_of_order("call /start_weight_update first");
  if (backend_ == "nccl") return update_nccl(info);
  const std::vector<std::string> names = string_list(info, "names", backend_ == "shm");
  std::vector<WeightSource> sources;
  if (backend_ == "path") {
    for (const auto& [key, v] : info.items()) {
      if (key != "path" && key != "names") {
        bad("update_info." + key, fmt::format("update_info.{} is not a field of the path "
                                              "backend (path, names)", key));
      }
    }
    const auto p = info.find("path");
    if (p == info.end() || !p->is_string()) {
      bad("update_info.path", "update_info.path is required: a safetensors directory or file "
                              "the server can read");
    }
    std::unique_ptr<SafetensorsDir> dir;
    try {
      dir = SafetensorsDir::open(p->get<std::string>());
    } catch (const Error& e) {
      bad("update_info.path", e.what());
    }
    const std::vector<std::string> all = names.empty() ? dir->tensor_names() : names;
    std::vector<std::string> missing;
    for (const std::string& n : all) {
      if (!dir->has_tensor(n)) missing.push_back(n);
    }
    if (!missing.empty()) {
      bad("update_info.names", fmt::format("not in {}: {}", p->get<std::string>(),
                                           fmt::join(missing, ", ")));
    }
    // Names, shapes and dtypes of every tensor first (one error lists every problem) ...
    std::vector<WeightSource> meta;
    for (const std::string& n : all) {
      meta.push_back({n, dir->tensor_shape(n), safetensors_dtype(dir->dtype(n)), &kNotRead, true});
    }
    check_all(meta);
    // ... then the data (mapped; read before dir closes the files).
    for (const std::string& n : all) {
      const RawTensorView v = dir->raw_view(n);
      sources.push_back({n, v.shape, dtype_of(v.dtype), v.data, false});
    }
    stage(sources);
    return {{"status", "ok"}, {"staged", sources.size()}, {"staged_total", staged_.size()}};
  }
  // shm
  for (const auto& [key, v] : info.items()) {
    if (key != "names" && key != "dtype_names" && key != "shapes" && key != "shm_names") {
      bad("update_info." + key, fmt::format("update_info.{} is not a field of the shm backend "
                                            "(names, dtype_names, shapes, shm_names)", key));
    }
  }
  const std::vector<std::string> dtypes = string_list(info, "dtype_names", true);
  const std::vector<std::string> shm = string_list(info, "shm_names", true);
  const auto shapes = info.find("shapes");
  if (shapes == info.end() || !shapes->is_array()) {
    bad("update_info.shapes", "update_info.shapes is required: a list of shapes (lists of ints)");
  }
  if (dtypes.size() != names.size() || shm.size() != names.size() ||
      shapes->size() != names.size()) {
    bad("update_info", fmt::format("names ({}), dtype_names ({}), shapes ({}) and shm_names ({}) "
                                   "must have one entry per tensor", names.size(), dtypes.size(),
                                   shapes->size(), shm.size()));
  }
  std::vector<std::unique_ptr<ShmView>> views;
  for (size_t i = 0; i < names.size(); ++i) {
    const json& sh = (*shapes)[i];
    std::vector<int64_t> shape;
    bool ok = sh.is_array();
    if (ok) {
      for (const json& d : sh) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40)) {
          ok = false;
          break;
        }
        shape.push_back(d.get<int64_t>());
      }
    }
    if (!ok) bad("update_info.shapes", fmt::format("shapes[{}] ({}) is not a list of sizes", i, names[i]));
    WeightSource s{names[i], shape, canonical_dtype(dtypes[i]), nullptr, false};
    sources.push_back(std::move(s));
  }
  // Names, shapes and dtypes first (no shared memory is opened for a refused update) ...
  {
    std::vector<WeightSource> meta = sources;
    for (auto& m : meta) m.data = &kNotRead, m.on_device = true;
    check_all(meta);
  }
  // ... then the data.
  for (size_t i = 0; i < sources.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : sources[i].shape) numel *= d;
    views.push_back(std::make_unique<ShmView>(shm[i], static_cast<size_t>(numel) *
                                                          element_bytes(sources[i].dtype)));
    sources[i].data = views.back()->data();
  }
  stage(sources);
  return {{"status", "ok"}, {"staged", sources.size()}, {"staged_total", staged_.size()}};
}

json WeightSync::update_nccl(const json& info) {
  for (const auto& [key, v] : info.items()) {
    if (key != "names" && key != "dtype_names" && key != "shapes" && key != "packed" &&
        key != "packed_buffer_size_bytes" && key != "packed_num_buffers") {
      bad("update_info." + key, fmt::format("update_info.{} is not a field of the nccl backend "
                                            "(names, dtype_names, shapes; packed, "
                                            "packed_buffer_size_bytes, packed_num_buffers as "
                                            "vLLM < 0.28 sent them)", key));
    }
  }
  if (link_ == nullptr) {
    out_of_order("no NCCL group: call /init_weight_transfer_engine (again: an earlier transfer "
                 "failed and left the group)");
  }
  // vLLM < 0.28 sent the wire settings with each update; newer ones at init.
  const std::string w = "update_info.";
  const bool packed = bool_field(info, "packed", w, packed_);
  const auto buffer = static_cast<uint64_t>(int_field(info, "packed_buffer_size_bytes", w, 1,
                                                      int64_t{1} << 40,
                                                      static_cast<int64_t>(packed_buffer_bytes_)));
  int_field(info, "packed_num_buffers", w, 1, 64, kDefaultPackedNumBuffers);
  std::vector<TensorMeta> meta;
  {
    const std::vector<std::string> names = string_list(info, "names", false);
    const std::vector<std::string> dtypes = string_list(info, "dtype_names", false);
    const auto shapes = info.find("shapes");
    const size_t n_shapes = shapes == info.end() || shapes->is_null() ? 0 : shapes->size();
    if (shapes != info.end() && !shapes->is_null() && !shapes->is_array()) {
      bad("update_info.shapes", "update_info.shapes must be a list of shapes (lists of ints)");
    }
    if (dtypes.size() != names.size() || n_shapes != names.size()) {
      bad("update_info", fmt::format("names ({}), dtype_names ({}) and shapes ({}) must have one "
                                     "entry per tensor", names.size(), dtypes.size(), n_shapes));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const json& sh = (*shapes)[i];
      TensorMeta m{names[i], canonical_dtype(dtypes[i]), {}};
      bool ok = sh.is_array();
      for (size_t k = 0; ok && k < sh.size(); ++k) {
        ok = sh[k].is_number_integer() && sh[k].get<int64_t>() >= 0 &&
             sh[k].get<int64_t>() <= (int64_t{1} << 40);
        if (ok) m.shape.push_back(sh[k].get<int64_t>());
      }
      if (!ok) bad("update_info.shapes", fmt::format("shapes[{}] ({}) is not a list of sizes", i, names[i]));
      meta.push_back(std::move(m));
    }
  }
  if (meta.empty()) {
    // vLLM: empty lists reuse the metadata of the previous update_weights on this group.
    if (last_meta_.empty()) {
      bad("update_info.names", "update_info.names is empty and no earlier update on this NCCL "
                               "group named its tensors");
    }
    meta = last_meta_;
  }
  // Every tensor's bytes, so that even a refused update receives exactly what the trainer sends.
  std::vector<uint64_t> bytes;
  for (const TensorMeta& m : meta) {
    const size_t e = torch_element_bytes(m.dtype);
    if (e == 0) {
      link_.reset();
      bad("update_info.dtype_names",
          fmt::format("{}: dtype '{}' is not a torch dtype, so its broadcast cannot even be "
                      "received; the NCCL group was left (the trainer's broadcast will not "
                      "complete): call /init_weight_transfer_engine again", m.name, m.dtype));
    }
    uint64_t n = e;
    for (int64_t d : m.shape) n *= static_cast<uint64_t>(d);
    bytes.push_back(n);
  }
  // Names, shapes and dtypes: the problems are reported after the bytes were received.
  std::string problems;
  {
    std::vector<WeightSource> check_only;
    for (const TensorMeta& m : meta) check_only.push_back({m.name, m.shape, m.dtype, &kNotRead, true});
    try {
      const std::vector<size_t> index = check_weights(slots_, check_only);
      std::set<size_t> seen;
      std::vector<std::string> twice;
      for (size_t i = 0; i < index.size(); ++i) {
        if (staged_.count(index[i]) != 0 || !seen.insert(index[i]).second) twice.push_back(meta[i].name);
      }
      if (!twice.empty()) {
        problems = fmt::format("already given in this update (each tensor once between "
                               "/start_weight_update and /finish_weight_update): {}",
                               fmt::join(twice, ", "));
      }
    } catch (const Error& e) {
      problems = e.what();
    }
  }
  std::map<size_t, std::vector<float>> received;
  std::vector<uint8_t> buf;
  std::vector<uint8_t> aligned;
  for (const BroadcastChunk& c : plan_broadcasts(bytes, packed, buffer)) {
    buf.resize(static_cast<size_t>(c.bytes));
    try {
      link_->receive(buf.data(), buf.size());
    } catch (const Error& e) {
      link_.reset();
      throw ApiError(500, fmt::format("the NCCL receive failed: {}; nothing of this call was "
                                      "staged, and the group was left: call "
                                      "/init_weight_transfer_engine again", e.what()),
                     "server_error");
    }
    if (!problems.empty()) continue;  // received and dropped: the group stays in step
    uint64_t off = 0;
    for (size_t i = c.first; i < c.first + c.count; ++i) {
      const uint8_t* p = buf.data() + off;
      if (reinterpret_cast<uintptr_t>(p) % 4 != 0) {  // a float32 after an odd bf16 tensor
        aligned.assign(p, p + bytes[i]);
        p = aligned.data();
      }
      const WeightSource src{meta[i].name, meta[i].shape, meta[i].dtype, p, false};
      stage(std::span(&src, 1), received);
      off += bytes[i];
    }
  }
  if (!problems.empty()) {
    bad("update_info", fmt::format("{}\n(the {} broadcast tensors were received and dropped; "
                                   "nothing was staged)", problems, meta.size()));
  }
  const size_t n = received.size();
  staged_.merge(received);
  last_meta_ = std::move(meta);
  return {{"status", "ok"}, {"staged", n}, {"staged_total", staged_.size()}};
}

json WeightSync::finish(const json& body) {
  std::lock_guard lk(mu_);
  std::string version;
  if (body.is_object()) {
    for (const auto& [key, v] : body.items()) {
      if (key == "weight_version") {
        if (!v.is_string() && !v.is_number_integer()) {
          bad(key, "weight_version must be a string (or an integer: the training step)");
        }
        version = v.is_string() ? v.get<std::string>() : std::to_string(v.get<int64_t>());
        if (version.empty() || version.size() > 256) {
          bad(key, "weight_version must be 1 to 256 characters");
        }
      } else {
        bad(key, fmt::format("'{}' is not a field of /finish_weight_update", key));
      }
    }
  } else if (!body.is_null()) {
    bad("", "the body must be a JSON object or empty");
  }
  if (!started_) out_of_order("no weight update in progress: call /start_weight_update first");
  if (version.empty()) version = fmt::format("update-{}", n_updates_ + 1);
  std::shared_ptr<const WeightIdentity> identity =
      std::make_shared<WeightIdentity>(identity_of_(version));
  try {
    loop_.run_exclusive([&] {
      // The engine thread, no request in the engine, admissions held: the new values, then a
      // new engine (its KV pool and prefix cache empty) under the new identity.
      std::vector<ParameterSlot> written;
      for (auto& [slot, values] : staged_) {
        std::memcpy(slots_[slot].data, values.data(), values.size() * sizeof(float));
        written.push_back(slots_[slot]);
      }
      if (place_) place_(written);  // a device backend's placed copy, before any request
      loop_.rebuild_engine(identity);
    });
  } catch (const Error& e) {
    // Nothing was written (a keep-mode pause holds requests, or the server is stopping); the
    // staged tensors stay, so the trainer can pause differently and finish again.
    throw ApiError(409, e.what(), "invalid_request_error");
  }
  ++n_updates_;
  const size_t n = staged_.size();
  staged_.clear();
  started_ = false;
  return {{"status", "ok"},
          {"weight_version", identity->version},
          {"system_fingerprint", identity->fingerprint_deterministic},
          {"updated", n}};
}

}  // namespace detllm::server
