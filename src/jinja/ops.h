// Python operator semantics for Jinja values: arithmetic, comparison, `in`, indexing, slicing
// and iteration, with CPython's results and TypeErrors (thrown as jinja::Failure) and 64-bit
// integers that fail on overflow instead of growing.
#pragma once

#include <cstdint>
#include <optional>

#include "jinja/value.h"

namespace detllm::jinja {

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

const char* op_symbol(BinaryOp op);
const char* op_symbol(CompareOp op);

// a <op> b. Strings and lists built by + and * are limited to max_bytes / max items.
Value binary(BinaryOp op, const Value& a, const Value& b, size_t max_bytes);
Value negate(const Value& v);      // -v
Value unary_plus(const Value& v);  // +v
bool compare(CompareOp op, const Value& a, const Value& b);
// Python's a < b ordering for sort/min/max: -1, 0 or 1; Failure when the types do not order.
int order(const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // item in container

// obj[key] as Python does it; nullopt where Python raises LookupError or TypeError (jinja2
// then tries an attribute, else yields undefined). Indexes strings by code point.
std::optional<Value> item(const Value& obj, const Value& key);
// obj[start:stop:step]; each bound may be none (omitted). jinja2 slices with plain Python, so
// slicing anything but a list, tuple or string fails (Failure), as do non-integer bounds.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// fmt % args: Python's printf-style formatting (%s %r %d %i %f %e %g %x %o %c %%, flags, width,
// precision, %(name)s with a mapping). Text is limited to max_bytes.
Value percent_format(const std::string& fmt, const Value& args, size_t max_bytes);

// iter(v) materialized: list/tuple items, a string's characters, a dict's keys; undefined
// iterates as empty (jinja2's Undefined). Failure for anything else.
List iterate(const Value& v);
// len(v); Failure for values without a length.
int64_t length(const Value& v);

}  // namespace detllm::jinja
