// libFuzzer target for the tokenizer.json loader: any input must load or throw detllm::Error,
// and a tokenizer that loads must encode, decode and stream without crashing. Build with
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DDETLLM_FUZZ=ON && ninja -C build-fuzz
//   tokenizer_json_fuzz
//   ./build-fuzz/tests/tokenizer_json_fuzz -max_len=4096 tests/data/tokenizer   (seed corpus)
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<detllm::Tokenizer> tok;
  try {
    tok = detllm::Tokenizer::from_json_string(input, "fuzz.json");
  } catch (const detllm::Error&) {
    return 0;
  }
  static constexpr std::string_view kTexts[] = {"",
                                                " ",
                                                "Hello world",
                                                "a<s>b</s>",
                                                "  \n\t x  ",
                                                "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD 123",
                                                "\xF0\x9F\x98\x80!",
                                                "abababababababab"};
  for (std::string_view text : kTexts) {
    try {
      const std::vector<int32_t> ids = tok->encode(text, true);
      (void)tok->decode(ids, false);
      (void)tok->decode(ids, true);
      detllm::StreamDecoder stream(*tok);
      for (int32_t id : ids) (void)stream.push(id);
      (void)stream.flush();
    } catch (const detllm::Error&) {
      // A text the vocabulary cannot cover (no unk token, no byte fallback) is a clear error.
    }
  }
  // Arbitrary ids, in range or not.
  const std::vector<int32_t> ids = {0, 1, -1, 2, tok->vocab_size(), tok->vocab_size() - 1, 255};
  (void)tok->decode(ids, false);
  return 0;
}
