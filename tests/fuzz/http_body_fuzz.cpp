// libFuzzer target for HTTP request bodies: any bytes given to the OpenAI schema parsers
// (completions, chat, tokenize, detokenize) must parse or throw ApiError with a 4xx status —
// never crash, hang or throw anything else — and the stop-string filter must keep its
// invariants on the decoded strings. Build with
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DDETLLM_FUZZ=ON && ninja -C build-fuzz
//   http_body_fuzz
//   ./build-fuzz/tests/http_body_fuzz -max_len=4096 -dict=tests/fuzz/http_body.dict
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/api_error.h"
#include "server/openai_schema.h"
#include "server/stop_filter.h"

namespace {

void check_status(const detllm::server::ApiError& e) {
  if (e.status() < 400 || e.status() >= 500) std::abort();
}

template <typename Fn>
void parse_or_reject(Fn fn) {
  try {
    fn();
  } catch (const detllm::server::ApiError& e) {
    check_status(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace detllm::server;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  RequestLimits limits;
  limits.max_string_bytes = 4096;
  nlohmann::json j;
  try {
    j = parse_json_body(body);
  } catch (const ApiError& e) {
    check_status(e);
    return 0;
  }
  parse_or_reject([&] {
    const CompletionRequest c = parse_completion_request(j, limits);
    // Stop filter invariants: the released text is a prefix of the input and never holds a
    // stop string.
    if (!c.prompts.empty() && c.prompts[0].text) {
      const std::string& text = *c.prompts[0].text;
      StopFilter f(c.gen.stop);
      std::string out;
      for (size_t i = 0; i < text.size(); i += 3) out += f.push(std::string_view(text).substr(i, 3));
      out += f.finish();
      if (text.compare(0, out.size(), out) != 0) std::abort();
      for (const auto& s : c.gen.stop) {
        if (out.find(s) != std::string::npos) std::abort();
      }
    }
  });
  parse_or_reject([&] { (void)parse_chat_request(j, limits); });
  parse_or_reject([&] { (void)parse_tokenize_request(j, limits); });
  parse_or_reject([&] { (void)parse_detokenize_request(j, limits); });
  return 0;
}
