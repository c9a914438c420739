// Python `str` semantics over UTF-8 for the Jinja interpreter: chat templates call str methods
// (strip, split, startswith, lower...) and Jinja prints floats and reprs the way CPython does, so
// matching Hugging Face's rendering byte for byte means re-implementing those rules here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace detllm::jinja::text {

// Code points of UTF-8 text. An ill-formed byte decodes to U+DC80 + byte (Python's
// "surrogateescape") and encodes back to the same byte, so any byte string round-trips.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_code_point(std::string& out, char32_t c);
size_t length(std::string_view s);  // len(s): number of code points

bool is_space(char32_t c);              // str.isspace() / regex \s on str
bool is_all_space(std::string_view s);  // non-empty and every code point is_space

// str.strip / lstrip / rstrip; `chars` = nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split / str.rsplit; `sep` = nullopt splits on runs of whitespace. maxsplit < 0: no limit.
// Throws detllm::Error for an empty separator (Python: "empty separator").
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.find / str.rfind / str.count, positions in code points; -1 when absent.
int64_t find(std::string_view s, std::string_view sub, bool from_right);
int64_t count(std::string_view s, std::string_view sub);

std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
// str.isalpha / isdigit / isalnum / isnumeric / islower / isupper / isspace.
bool predicate(std::string_view s, std::string_view name);

// repr(float) / str(float): shortest round-trip digits, CPython's choice of notation.
std::string float_repr(double v);
// repr(str): quotes and escapes as CPython does.
std::string string_repr(std::string_view s);
// json.dumps(str, ensure_ascii=...): ensure_ascii writes non-ASCII as \uXXXX escapes.
std::string json_quote(std::string_view s, bool ensure_ascii);

}  // namespace detllm::jinja::text
