// FieldReader: typed, range-checked reads of one JSON object's fields for request validation.
// Every read names the field in its error (a 400 ApiError), null counts as absent (as in
// OpenAI's API), and the reader remembers which fields it saw so that unknown ones are refused.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace detllm::server {

class FieldReader {
 public:
  // `obj` must outlive the reader; `path` prefixes field names in errors ("messages[2].").
  // Throws ApiError 400 when obj is not a JSON object.
  explicit FieldReader(const nlohmann::json& obj, std::string path = {});

  // Integer in [lo, hi]; a float with an integral value (e.g. 16.0) is refused, as JSON
  // integers are what OpenAI's schema says.
  std::optional<int64_t> get_int(std::string_view key, int64_t lo, int64_t hi);
  // Unsigned 64-bit integer (seeds).
  std::optional<uint64_t> get_uint64(std::string_view key);
  // Finite number in [lo, hi].
  std::optional<double> get_number(std::string_view key, double lo, double hi);
  // A number as the 32-bit float the sampler uses, checked after narrowing: in [lo, hi], or
  // in (lo, hi] when `lo_open` (so 1e-320, which narrows to 0, is refused by this field's name).
  std::optional<float> get_float(std::string_view key, float lo, float hi, bool lo_open = false);
  std::optional<bool> get_bool(std::string_view key);
  // A string of at most max_bytes bytes.
  std::optional<std::string> get_string(std::string_view key, size_t max_bytes);
  // The raw value (nullptr when absent or null); the caller checks its type.
  const nlohmann::json* get_raw(std::string_view key);
  // A field that is accepted and has no effect here (e.g. "user").
  void ignore(std::string_view key) { seen_.emplace(key); }
  // An OpenAI field this server does not implement: accepted only at its neutral value
  // (`neutral(value)` true), otherwise 400 saying it is unsupported.
  template <typename Pred>
  void accept_if_neutral(std::string_view key, Pred neutral) {
    const nlohmann::json* v = get_raw(key);
    if (v != nullptr && !neutral(*v)) unsupported(key);
  }

  // Throws ApiError 400 naming the first field that no read asked for.
  void reject_unknown() const;

  std::string name(std::string_view key) const { return path_ + std::string(key); }

 private:
  [[noreturn]] void wrong_type(std::string_view key, std::string_view expected) const;
  [[noreturn]] void unsupported(std::string_view key) const;

  const nlohmann::json& obj_;
  std::string path_;
  std::set<std::string, std::less<>> seen_;
};

// Short JSON type name for error messages ("string", "integer", "array", ...).
std::string_view json_type_name(const nlohmann::json& v);

}  // namespace detllm::server
