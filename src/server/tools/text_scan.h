// Scanning model output for the parsers: where a JSON object or array that starts inside it
// ends (so that text after it — ";", a closing tag, more calls — can be told apart; the value
// itself is then parsed by nlohmann::json, which checks it), and markers that may still be
// arriving at the end of a stream.
#pragma once

#include <cstddef>
#include <string_view>

namespace detllm::server {

// text[start] must be '{' or '['. Returns one past the bracket that closes it (strings and
// their escapes skipped), or npos when the text ends first or text[start] opens nothing.
size_t json_value_end(std::string_view text, size_t start);

// The index of the first character at or after `pos` that is not JSON whitespace.
size_t skip_json_space(std::string_view text, size_t pos);

// The length of the longest suffix of `text` that is a proper prefix of `marker`: the part of
// a stream to hold back because the marker may be arriving.
size_t partial_marker_len(std::string_view text, std::string_view marker);

}  // namespace detllm::server
