// detllm bench request files (request_file.h): JSON lines written with nlohmann's ordered
// objects, read back line by line with every field checked.
#include "bench/request_file.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

#include "core/error.h"

namespace detllm::bench {
namespace {

using Json = nlohmann::json;

constexpr const char* kRemake =
    "the file is damaged: make it again with `detllm bench … --save-requests FILE --save-only`";
constexpr const char* kNotARequestFile =
    "not a detllm request file (is it the ShareGPT dataset itself? pass that with --workload "
    "sharegpt --dataset FILE); request files are written by --save-requests";

// A value as it appears in the file, shortened for a message.
std::string shown(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// An integer field's value; false when it is not an integer. Unsigned values beyond int64
// saturate (they are out of every range checked here).
bool as_int64(const Json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    out = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
              ? std::numeric_limits<int64_t>::max()
              : static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return true;
  }
  return false;
}

class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    check(in_.good(),
          "cannot open the request file {}: check the path, or make one with `detllm bench "
          "--workload sharegpt|fixed|long … --save-requests {} --save-only`",
          path, path);
  }

  // The next line without its line end; false at the end of the file.
  bool next(std::string& line) {
    if (!std::getline(in_, line)) return false;
    ++line_no_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(
        fmt::format("{}:{}: {}", path_, line_no_, fmt::format(f, std::forward<Args>(args)...)));
  }

  // The line as one JSON object; `hint` ends the message when it is not one.
  Json object(const std::string& line, const char* what, const char* hint = kRemake) const {
    if (line.empty()) fail("empty line where {} should be; {}", what, hint);
    Json j;
    try {
      j = Json::parse(line);
    } catch (const Json::parse_error& e) {
      fail("{} is not valid JSON (byte {} of the line: {}); {}", what, e.byte, e.what(), hint);
    }
    if (!j.is_object()) fail("{} must be a JSON object, not {}; {}", what, shown(j), hint);
    return j;
  }

  int64_t line_no() const { return line_no_; }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t line_no_ = 0;
};

const Json* find(const Json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

RequestFileHeader parse_header(const LineReader& r, const Json& h) {
  const Json* format = find(h, "format");
  if (format == nullptr) {
    r.fail("the first line must be the header, with \"format\":\"{}\"; {}", kRequestFileFormat,
           kNotARequestFile);
  }
  if (!format->is_string() || format->get<std::string>() != kRequestFileFormat) {
    r.fail("request file format {}, but this detllm reads \"{}\": {}", shown(*format),
           kRequestFileFormat, kRemake);
  }
  auto str = [&](const char* key, bool required) -> std::string {
    const Json* v = find(h, key);
    if (v == nullptr) {
      if (required) r.fail("the header has no \"{}\" (a string); {}", key, kRemake);
      return {};
    }
    if (!v->is_string()) r.fail("the header's \"{}\" must be a string, not {}", key, shown(*v));
    return v->get<std::string>();
  };
  auto integer = [&](const char* key, bool required, int64_t min, int64_t max) -> int64_t {
    const Json* v = find(h, key);
    if (v == nullptr) {
      if (required) r.fail("the header has no \"{}\" (an integer); {}", key, kRemake);
      return -1;
    }
    int64_t x = 0;
    if (!as_int64(*v, x) || x < min || x > max) {
      r.fail("the header's \"{}\" must be an integer in {}…{}, not {}; {}", key, min, max,
             shown(*v), kRemake);
    }
    return x;
  };
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  RequestFileHeader out;
  out.workload = str("workload", true);
  out.description = str("description", true);
  out.model = str("model", false);
  out.tokenizer = str("tokenizer", false);
  out.created_by = str("created_by", false);
  out.vocab_size = static_cast<int32_t>(integer("vocab_size", true, 1, kInt32Max));
  out.n_requests = integer("n_requests", true, 1, kInt32Max);
  out.prompt_tokens = integer("prompt_tokens", false, 1, kInt64Max);
  out.output_tokens = integer("output_tokens", false, 1, kInt64Max);
  if (const Json* s = find(h, "seed")) {
    if (!s->is_number_unsigned() && !(s->is_number_integer() && s->get<int64_t>() >= 0)) {
      r.fail("the header's \"seed\" must be an unsigned integer, not {}", shown(*s));
    }
    out.seed = s->get<uint64_t>();
  }
  return out;
}

BenchRequest parse_request(const LineReader& r, const Json& j, int64_t index, int32_t vocab_size,
                           int32_t max_context, const RequestFileHeader& header) {
  for (const auto& [key, value] : j.items()) {
    if (key != "prompt" && key != "output_len") {
      r.fail(
          "request {}: unexpected field \"{}\" (a request is {{\"prompt\":[ids...],"
          "\"output_len\":N}})",
          index, key);
    }
  }
  const Json* prompt = find(j, "prompt");
  const Json* output = find(j, "output_len");
  if (prompt == nullptr || output == nullptr) {
    r.fail("request {}: no \"{}\" (a request is {{\"prompt\":[ids...],\"output_len\":N}}); {}",
           index, prompt == nullptr ? "prompt" : "output_len", kRemake);
  }
  if (!prompt->is_array()) {
    r.fail("request {}: \"prompt\" must be a list of token ids, not {}", index, shown(*prompt));
  }
  if (prompt->empty()) r.fail("request {}: the prompt is empty (it needs >= 1 token)", index);
  int64_t n_out = 0;
  if (!as_int64(*output, n_out) || n_out < 1) {
    r.fail("request {}: \"output_len\" must be an integer >= 1 (tokens to generate), not {}", index,
           shown(*output));
  }
  const auto n_prompt = static_cast<int64_t>(prompt->size());
  if (n_out > max_context - n_prompt) {  // no overflow for a huge output_len
    r.fail(
        "request {}: {} prompt + {} output tokens exceed the model's context of {} tokens: "
        "run a model with a longer context, or make the file for this model",
        index, n_prompt, n_out, max_context);
  }
  BenchRequest out;
  out.output_len = static_cast<int32_t>(n_out);
  out.prompt.reserve(static_cast<size_t>(n_prompt));
  for (size_t k = 0; k < prompt->size(); ++k) {
    const Json& t = (*prompt)[k];
    int64_t id = 0;
    if (!as_int64(t, id)) {
      r.fail("request {}: prompt[{}] is {}, not a token id (an integer)", index, k, shown(t));
    }
    if (id < 0 || id >= vocab_size) {
      r.fail(
          "request {}: prompt[{}] = {} is outside the vocabulary of the model loaded (ids "
          "0…{}); the file was made for a vocabulary of {} ({}): run it with a model of that "
          "vocabulary, or make the file with this model",
          index, k, id, vocab_size - 1, header.vocab_size,
          header.model.empty() ? std::string("model not recorded") : "model " + header.model);
    }
    out.prompt.push_back(static_cast<int32_t>(id));
  }
  return out;
}

}  // namespace

RequestFileHeader request_file_header(const Workload& w, const std::string& model,
                                      const std::string& created_by) {
  RequestFileHeader h;
  h.workload = w.name;
  h.description = w.description;
  h.model = model;
  h.vocab_size = w.vocab_size;
  h.tokenizer = w.counted_with;
  h.seed = w.seed;
  h.n_requests = static_cast<int64_t>(w.requests.size());
  h.prompt_tokens = w.n_prompt_tokens();
  h.output_tokens = w.n_output_tokens();
  h.created_by = created_by;
  return h;
}

void save_requests(const std::string& path, const Workload& w, const RequestFileHeader& header) {
  check(!w.requests.empty(), "save_requests: the workload has no requests");
  check(header.n_requests == static_cast<int64_t>(w.requests.size()),
        "save_requests: the header counts {} requests, the workload has {}", header.n_requests,
        w.requests.size());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    check(f.good(),
          "cannot write the request file {}: check that its folder exists and is "
          "writable",
          tmp);
    const nlohmann::ordered_json h = {{"format", kRequestFileFormat},
                                      {"workload", header.workload},
                                      {"description", header.description},
                                      {"model", header.model},
                                      {"vocab_size", header.vocab_size},
                                      {"tokenizer", header.tokenizer},
                                      {"seed", header.seed},
                                      {"n_requests", header.n_requests},
                                      {"prompt_tokens", header.prompt_tokens},
                                      {"output_tokens", header.output_tokens},
                                      {"created_by", header.created_by}};
    f << h.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
    for (const BenchRequest& r : w.requests) {
      const nlohmann::ordered_json j = {{"prompt", r.prompt}, {"output_len", r.output_len}};
      f << j.dump() << '\n';
    }
    f.flush();
    check(f.good(), "writing the request file {} failed (disk full?)", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  check(!ec, "cannot move {} to {}: {}", tmp, path, ec.message());
}

RequestFile load_requests(const std::string& path, int32_t vocab_size, int32_t max_context,
                          int32_t n) {
  check(vocab_size >= 1 && max_context >= 1 && n >= 0, "load_requests: bad limits");
  LineReader reader(path);
  std::string line;
  if (!reader.next(line)) {
    throw_error(
        "{}: the request file is empty (a header line and one line per request "
        "expected); {}",
        path, kRemake);
  }
  RequestFile out;
  out.header = parse_header(reader, reader.object(line, "the header", kNotARequestFile));
  const RequestFileHeader& h = out.header;
  std::vector<BenchRequest>& requests = out.workload.requests;
  requests.reserve(static_cast<size_t>(h.n_requests));
  while (reader.next(line)) {
    const auto index = static_cast<int64_t>(requests.size());
    if (index == h.n_requests) {
      reader.fail(
          "more requests than the header's n_requests = {}: the file was edited or "
          "joined; {}",
          h.n_requests, kRemake);
    }
    requests.push_back(
        parse_request(reader, reader.object(line, "a request"), index, vocab_size, max_context, h));
  }
  const Workload& w = out.workload;
  check(static_cast<int64_t>(requests.size()) == h.n_requests,
        "{}: the header says {} requests, the file holds {}: it is cut off (an interrupted "
        "copy?); {}",
        path, h.n_requests, requests.size(), kRemake);
  check(h.prompt_tokens < 0 || h.prompt_tokens == w.n_prompt_tokens(),
        "{}: the header counts {} prompt tokens, the requests hold {}: the file was edited; {}",
        path, h.prompt_tokens, w.n_prompt_tokens(), kRemake);
  check(h.output_tokens < 0 || h.output_tokens == w.n_output_tokens(),
        "{}: the header counts {} output tokens, the requests hold {}: the file was edited; {}",
        path, h.output_tokens, w.n_output_tokens(), kRemake);
  check(n <= h.n_requests,
        "{} holds {} requests, fewer than the {} asked for (--n): lower --n or make a bigger "
        "file",
        path, h.n_requests, n);
  if (n > 0) requests.resize(static_cast<size_t>(n));

  const std::string file_name = std::filesystem::path(path).filename().string();
  out.workload.name = fmt::format("{} (file {})", h.workload, file_name);
  out.workload.vocab_size = h.vocab_size;
  out.workload.counted_with = h.tokenizer;
  out.workload.seed = h.seed;
  const std::string which = n > 0 && n < h.n_requests
                                ? fmt::format("the first {} of its {} requests", n, h.n_requests)
                                : fmt::format("its {} requests", h.n_requests);
  out.workload.description =
      fmt::format("{} from request file {} ({}{}; model {}, vocabulary {}, {}, seed {}): {}",
                  h.workload, path, which, h.created_by.empty() ? "" : ", saved by " + h.created_by,
                  h.model.empty() ? std::string("not recorded") : h.model, h.vocab_size,
                  h.tokenizer.empty() ? std::string("lengths set by the workload")
                                      : "lengths counted with " + h.tokenizer,
                  h.seed, h.description);
  return out;
}

}  // namespace detllm::bench
