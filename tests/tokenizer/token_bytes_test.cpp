// Tokenizer::token_bytes: the bytes each token adds to a text (what a grammar engine matches,
// src/structured). For byte-level tokenizers the tokens of encode(text) spell the text exactly;
// for SentencePiece ones, the text with the leading space the normalizer adds; a token that is
// part of a code point gives its raw bytes (no U+FFFD).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "external_data.h"
#include "formats/gguf.h"
#include "model/model_loader.h"
#include "tokenizer/tokenizer.h"

namespace detllm {
namespace {

std::vector<std::string> corpus() {
  std::ifstream in(std::string(DETLLM_SOURCE_DIR) + "/tests/data/tokenizer/corpus.jsonl");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  return out;
}

std::string spelled(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += tok.token_bytes(id);
  return s;
}

TEST(TokenBytes, ByteLevelSpellsTheText) {
  const std::string path = find_default_model();
  if (path.empty() || !std::filesystem::exists(path))
    GTEST_SKIP() << "default model not found (run scripts/bootstrap.sh or set DETLLM_DEFAULT_MODEL)";
  const auto tok = Tokenizer::from_gguf(*GgufFile::open(path));
  const auto texts = corpus();
  ASSERT_GT(texts.size(), 20u);
  for (const std::string& text : texts) EXPECT_EQ(spelled(*tok, tok->encode(text, false)), text);
  // Raw bytes, not U+FFFD: the byte-level token for 0xF0 alone.
  const auto f0 = tok->token_to_id("\xC3\xB0");  // 'ð' is byte 0xF0 in the byte alphabet
  ASSERT_TRUE(f0.has_value());
  EXPECT_EQ(tok->token_bytes(*f0), "\xF0");
  EXPECT_EQ(tok->token_bytes(*tok->eos_id()), "<|im_end|>");  // added: its content
  EXPECT_EQ(tok->token_bytes(-1), "");
}

TEST(TokenBytes, SentencePieceSpellsTheTextWithItsLeadingSpace) {
  if (auto m = test::missing_tokenizer_file({"llama2", "llama3"})) GTEST_SKIP() << *m;
  const auto llama2 = Tokenizer::from_json_file(test::tokenizer_file("llama2"));
  const auto llama3 = Tokenizer::from_json_file(test::tokenizer_file("llama3"));
  for (const std::string& text : corpus()) {
    EXPECT_EQ(spelled(*llama3, llama3->encode(text, false)), text);
    // Texts with added tokens (<s>, </s>, <unk>) are cut around them, each part prefixed.
    if (text.empty() || text.find('<') != std::string::npos) continue;
    EXPECT_EQ(spelled(*llama2, llama2->encode(text, false)), " " + text);
  }
  EXPECT_EQ(llama2->token_bytes(*llama2->token_to_id("<0xAB>")), "\xAB");
}

}  // namespace
}  // namespace detllm
