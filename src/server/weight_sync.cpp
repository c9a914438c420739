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
#include <set>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "formats/safetensors.h"
#include "server/api_error.h"

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
                       IdentityFn identity_of)
    : loop_(loop), slots_(parameter_slots(config, &weights)), identity_of_(std::move(identity_of)) {}

json WeightSync::init(const json& body) {
  std::lock_guard lk(mu_);
  const json& info = object_field(body, "init_info", "the transfer backend's settings");
  const auto it = info.find("backend");
  if (it == info.end() || !it->is_string()) {
    bad("init_info.backend",
        "init_info.backend is required: \"path\" (a safetensors directory or file the server "
        "reads) or \"shm\" (POSIX shared memory from a process on this machine); vLLM's NCCL "
        "settings (master_address, ...) are not supported");
  }
  const std::string b = it->get<std::string>();
  if (b == "nccl" || b == "ipc") {
    bad("init_info.backend", fmt::format("backend '{}' is not supported by detllm serve (it "
                                         "has no {} group): use \"path\" or \"shm\"", b,
                                         b == "nccl" ? "NCCL" : "CUDA IPC"));
  }
  if (b != "path" && b != "shm") {
    bad("init_info.backend", fmt::format("unknown backend '{}': \"path\" or \"shm\"", b));
  }
  for (const auto& [key, v] : info.items()) {
    if (key != "backend") {
      bad("init_info." + key, fmt::format("init_info.{} is not a setting of backend '{}' (it "
                                          "takes none)", key, b));
    }
  }
  if (started_) out_of_order("a weight update is in progress: /finish_weight_update first");
  backend_ = b;
  return {{"status", "ok"}, {"backend", backend_}};
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

void WeightSync::stage(std::span<const WeightSource> sources) {
  std::vector<size_t> index;
  try {
    index = check_weights(slots_, sources);  // every name, shape and dtype, or nothing
  } catch (const Error& e) {
    bad("update_info", e.what());
  }
  std::vector<std::string> twice;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (staged_.count(index[i]) != 0) twice.push_back(sources[i].name);
  }
  if (!twice.empty()) {
    bad("update_info.names", fmt::format("already given in this update (each tensor once between "
                                         "/start_weight_update and /finish_weight_update): {}",
                                         fmt::join(twice, ", ")));
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    std::vector<float> v(static_cast<size_t>(slots_[index[i]].numel()));
    widen_to_f32(sources[i], v.data(), v.size());
    staged_.emplace(index[i], std::move(v));
  }
}

json WeightSync::update(const json& body) {
  std::lock_guard lk(mu_);
  const json& info = object_field(body, "update_info", "which tensors, and where they are");
  if (!started_) out_of_order("call /start_weight_update first");
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
      for (auto& [slot, values] : staged_) {
        std::memcpy(slots_[slot].data, values.data(), values.size() * sizeof(float));
      }
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
