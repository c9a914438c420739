// Exact parity with Hugging Face `tokenizers` on real vocabularies: Llama-2, Llama-3 and Qwen3
// (tokenizer.json from outside the repository: tests/external_data.h) and SmolLM2 (the default
// model's GGUF). Goldens: tests/data/tokenizer/golden_<name>.json, from
// scripts/ref/tokenizer_golden.py. The SmolLM2 case finds the model through $DETLLM_DEFAULT_MODEL
// or models/, else it skips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "external_data.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace detllm {
namespace {

using json = nlohmann::json;

std::string data_path(const std::string& file) {
  return std::string(DETLLM_SOURCE_DIR) + "/tests/data/tokenizer/" + file;
}
using test::missing_tokenizer_file;
using test::tokenizer_file;
std::string default_model_path() {
  if (const char* env = std::getenv("DETLLM_DEFAULT_MODEL"); env && *env) return env;
  return std::string(DETLLM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return json::parse(in);
}

std::vector<std::string> read_corpus() {
  std::ifstream in(data_path("corpus.jsonl"));
  std::vector<std::string> corpus;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) corpus.push_back(json::parse(line).get<std::string>());
  }
  return corpus;
}

std::string show(const std::string& text) {
  return json(text.substr(0, 80)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Streams ids one by one; every piece must be valid UTF-8 and the pieces must add up to the
// full decode.
void expect_stream_matches(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                           const std::string& expected, const std::string& what) {
  StreamDecoder stream(tok, skip);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    if (!piece.empty()) {
      // No piece may end inside a code point.
      const auto last = static_cast<unsigned char>(piece.back());
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << what;
    }
    streamed += piece;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, expected) << what;
}

void check_parity(const Tokenizer& tok, const std::string& name) {
  const std::vector<std::string> corpus = read_corpus();
  const json golden = read_json(data_path("golden_" + name + ".json"));
  const json& cases = golden.at("cases");
  ASSERT_EQ(cases.size(), corpus.size())
      << "regenerate the goldens: scripts/ref/tokenizer_golden.py";
  EXPECT_EQ(tok.vocab_size(), golden.at("vocab_size").get<int32_t>());

  int failures = 0;
  for (size_t i = 0; i < corpus.size() && failures < 10; ++i) {
    const json& c = cases[i];
    const std::string& text = corpus[i];
    const std::string what = name + " case " + std::to_string(i) + " " + show(text);
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const auto plain = c.contains("plain") ? c.at("plain").get<std::vector<int32_t>>() : ids;
    const auto got = tok.encode(text, true);
    const auto got_plain = tok.encode(text, false);
    EXPECT_EQ(got, ids) << what;
    EXPECT_EQ(got_plain, plain) << what;
    const std::string expected = c.at("text").get<std::string>();
    const std::string expected_skip = c.value("text_skip", expected);
    EXPECT_EQ(tok.decode(ids, false), expected) << what;
    EXPECT_EQ(tok.decode(ids, true), expected_skip) << what;
    expect_stream_matches(tok, ids, false, expected, what + " (stream)");
    failures += (got != ids) + (got_plain != plain);
  }
  for (const json& c : golden.at("decode_cases")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const std::string expected = c.at("text").get<std::string>();
    EXPECT_EQ(tok.decode(ids, false), expected) << name << " decode " << c.at("ids").dump();
    EXPECT_EQ(tok.decode(ids, true), c.value("text_skip", expected))
        << name << " decode(skip) " << c.at("ids").dump();
    expect_stream_matches(tok, ids, false, expected, name + " stream " + c.at("ids").dump());
  }
}

TEST(TokenizerParity, Llama2) {
  if (auto m = missing_tokenizer_file({"llama2"})) GTEST_SKIP() << *m;
  const auto tok = Tokenizer::from_json_file(tokenizer_file("llama2"));
  check_parity(*tok, "llama2");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->chat_template(), "");
}

TEST(TokenizerParity, Llama3) {
  if (auto m = missing_tokenizer_file({"llama3"})) GTEST_SKIP() << *m;
  const auto tok = Tokenizer::from_json_file(tokenizer_file("llama3"));
  check_parity(*tok, "llama3");
  EXPECT_EQ(tok->bos_id(), 128000);
  EXPECT_EQ(tok->eos_id(), 128001);
  EXPECT_NE(tok->chat_template().find("start_header_id"), std::string::npos);
}

TEST(TokenizerParity, Qwen3) {
  if (auto m = missing_tokenizer_file({"qwen3"})) GTEST_SKIP() << *m;
  const auto tok = Tokenizer::from_json_file(tokenizer_file("qwen3"));
  check_parity(*tok, "qwen3");
  EXPECT_EQ(tok->bos_id(), std::nullopt);
  EXPECT_EQ(tok->eos_id(), 151645);  // <|im_end|>
  EXPECT_TRUE(tok->is_special(151644));
  EXPECT_FALSE(tok->is_special(151665));  // <tool_response>: added, not special
}

TEST(TokenizerParity, SmolLM2FromGguf) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "default model not found at " << path
                 << "; run scripts/bootstrap.sh or set DETLLM_DEFAULT_MODEL";
  }
  const auto gguf = GgufFile::open(path);
  const auto tok = Tokenizer::from_gguf(*gguf);
  check_parity(*tok, "smollm2");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_NE(tok->chat_template().find("im_start"), std::string::npos);
}

// Hand-made tokenizer.json files covering what the real ones do not use (added-token flags,
// Split behaviors, Digits, Metaspace, more normalizers and post-processors).
TEST(TokenizerParity, SyntheticAddedTokenFlags) {
  const auto tok = Tokenizer::from_json_file(data_path("synthetic_flags.json"));
  check_parity(*tok, "synthetic_flags");
}

TEST(TokenizerParity, SyntheticSplits) {
  const auto tok = Tokenizer::from_json_file(data_path("synthetic_splits.json"));
  check_parity(*tok, "synthetic_splits");
}

// Long inputs stay fast: a 200 KB single word (Llama-2 has no pre-tokenizer) and long runs.
TEST(TokenizerParity, LongInputsAreFast) {
  if (auto m = missing_tokenizer_file({"llama2", "llama3"})) GTEST_SKIP() << *m;
  const auto llama2 = Tokenizer::from_json_file(tokenizer_file("llama2"));
  const auto llama3 = Tokenizer::from_json_file(tokenizer_file("llama3"));
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "abcdefghi" + std::to_string(i % 10);
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = llama2->encode(text);
  EXPECT_EQ(llama2->decode(ids, true), text);
  const std::string spaces(200000, ' ');
  EXPECT_EQ(llama3->decode(llama3->encode(spaces)), spaces);
  const std::string newlines(100000, '\n');
  EXPECT_EQ(llama3->decode(llama3->encode(newlines)), newlines);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 60.0);  // generous for sanitizer builds; quadratic would take minutes
}

}  // namespace
}  // namespace detllm
