// Typed JSON field reads with errors that name the field.
#include "server/json_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace detllm::server {

std::string_view json_type_name(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "object";
    case nlohmann::json::value_t::array: return "array";
    case nlohmann::json::value_t::string: return "string";
    case nlohmann::json::value_t::boolean: return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "integer";
    case nlohmann::json::value_t::number_float: return "number";
    default: return "value";
  }
}

FieldReader::FieldReader(const nlohmann::json& obj, std::string path)
    : obj_(obj), path_(std::move(path)) {
  if (!obj_.is_object()) {
    const std::string where = path_.empty() ? "the request body" : path_.substr(0, path_.size() - 1);
    throw_bad_request(where, "{} must be a JSON object, got {}", where, json_type_name(obj_));
  }
}

const nlohmann::json* FieldReader::get_raw(std::string_view key) {
  seen_.emplace(key);
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::wrong_type(std::string_view key, std::string_view expected) const {
  const auto& v = obj_.find(key);
  throw_bad_request(name(key), "'{}' must be {}, got {}", name(key), expected,
                    json_type_name(*v));
}

void FieldReader::unsupported(std::string_view key) const {
  throw_bad_request(name(key),
                    "'{}' is not supported by this server (only its default value is accepted)",
                    name(key));
}

std::optional<int64_t> FieldReader::get_int(std::string_view key, int64_t lo, int64_t hi) {
  const nlohmann::json* v = get_raw(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo))) {
      throw_bad_request(name(key), "'{}' is {}; it must be in {}…{}", name(key), u, lo, hi);
    }
    return static_cast<int64_t>(u);
  }
  if (!v->is_number_integer()) wrong_type(key, "an integer");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    throw_bad_request(name(key), "'{}' is {}; it must be in {}…{}", name(key), x, lo, hi);
  }
  return x;
}

std::optional<uint64_t> FieldReader::get_uint64(std::string_view key) {
  const nlohmann::json* v = get_raw(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer()) {
    throw_bad_request(name(key), "'{}' is {}; it must be a non-negative integer below 2^64",
                      name(key), v->get<int64_t>());
  }
  wrong_type(key, "a non-negative integer");
}

std::optional<double> FieldReader::get_number(std::string_view key, double lo, double hi) {
  const nlohmann::json* v = get_raw(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    throw_bad_request(name(key), "'{}' is {}; it must be in [{}, {}]", name(key), x, lo, hi);
  }
  return x;
}

std::optional<float> FieldReader::get_float(std::string_view key, float lo, float hi,
                                            bool lo_open) {
  const nlohmann::json* v = get_raw(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number");
  const double x = v->get<double>();
  const auto f = static_cast<float>(x);
  const bool below = lo_open ? !(f > lo) : !(f >= lo);
  if (!std::isfinite(x) || !std::isfinite(f) || below || f > hi) {
    const std::string narrowed =
        static_cast<double>(f) == x ? "" : fmt::format(" ({} as a 32-bit float)", f);
    throw_bad_request(name(key), "'{}' is {}{}; it must be in {}{}, {}]", name(key), x, narrowed,
                      lo_open ? "(" : "[", lo, hi);
  }
  return f;
}

std::optional<bool> FieldReader::get_bool(std::string_view key) {
  const nlohmann::json* v = get_raw(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "a boolean");
  return v->get<bool>();
}

std::optional<std::string> FieldReader::get_string(std::string_view key, size_t max_bytes) {
  const nlohmann::json* v = get_raw(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(key, "a string");
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    throw_bad_request(name(key), "'{}' is {} bytes long; at most {} are accepted", name(key),
                      s.size(), max_bytes);
  }
  return s;
}

void FieldReader::reject_unknown() const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (seen_.find(it.key()) == seen_.end()) {
      throw_bad_request(name(it.key()),
                        "unrecognized request argument '{}' (see docs/server.md for the fields "
                        "this server accepts)",
                        name(it.key()));
    }
  }
}

}  // namespace detllm::server
