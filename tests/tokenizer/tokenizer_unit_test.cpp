// Tokenizer pieces and failure modes: UTF-8 repair, the byte alphabet, malformed and
// unsupported tokenizer.json files (clear errors, never crashes), streaming decode across
// split code points, and the GGUF SentencePiece path (scores -> merges) against tokenizer.json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

#include "core/error.h"
#include "core/unicode.h"
#include "external_data.h"
#include "formats/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace detllm {
namespace {

using json = nlohmann::json;

using test::missing_tokenizer_file;
using test::tokenizer_file;

// Loading a large tokenizer.json takes about a second: load each once per test binary.
const Tokenizer& shared(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) slot = Tokenizer::from_json_file(tokenizer_file(name));
  return *slot;
}

std::vector<std::string> read_corpus() {
  std::ifstream in(std::string(DETLLM_SOURCE_DIR) + "/tests/data/tokenizer/corpus.jsonl");
  std::vector<std::string> corpus;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) corpus.push_back(json::parse(line).get<std::string>());
  }
  return corpus;
}

// --- UTF-8 and the byte alphabet --------------------------------------------------------------

TEST(TokenizerUnicode, LossyMatchesRust) {
  // Expected values are what Rust's String::from_utf8_lossy (and Python's 'replace') give.
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(unicode::utf8_lossy("plain"), "plain");
  EXPECT_EQ(unicode::utf8_lossy("\xE2\x82"
                                "A"),
            r + "A");                                                 // cut-short sequence
  EXPECT_EQ(unicode::utf8_lossy("x\xF0\x9F\x98"), "x" + r);           // truncated at the end
  EXPECT_EQ(unicode::utf8_lossy("\xC0\xAF"), r + r);                  // overlong lead
  EXPECT_EQ(unicode::utf8_lossy("\xED\xA0\x80"), r + r + r);          // surrogate
  EXPECT_EQ(unicode::utf8_lossy("\x80\xBF"), r + r);                  // lone continuations
  EXPECT_EQ(unicode::utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_FALSE(unicode::find_invalid_utf8("\xF0\x9F\x98\x80 ok").has_value());
  EXPECT_EQ(unicode::find_invalid_utf8("ok\xC3"), 2u);
}

TEST(TokenizerUnicode, NormalFormsAndClasses) {
  EXPECT_EQ(unicode::normalize("Cafe\xCC\x81", unicode::NormalForm::kNfc), "Caf\xC3\xA9");
  EXPECT_EQ(unicode::normalize("\xEF\xAC\x81", unicode::NormalForm::kNfkc), "fi");
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_FALSE(unicode::is_whitespace(0x180E));
  EXPECT_TRUE(unicode::is_numeric(0x2167));    // Roman numeral eight (Nl)
  EXPECT_TRUE(unicode::is_word_char(0x0301));  // combining mark
  EXPECT_FALSE(unicode::is_word_char('-'));
}

TEST(TokenizerByteLevel, AlphabetRoundTrips) {
  EXPECT_EQ(byte_level::byte_to_char(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_level::byte_to_char('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_level::byte_to_char('A'), static_cast<char32_t>('A'));
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string back;
  ASSERT_TRUE(byte_level::decode_token(byte_level::encode(all), back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(byte_level::decode_token("\xE4\xBD\xA0", back));  // '你' is not in the alphabet
}

TEST(TokenizerRegex, OnigurumaClassesAndEmptyMatches) {
  const Regex space(R"(\s+)");
  // U+180E is not White_Space (Oniguruma) although PCRE2's own \s would match it.
  EXPECT_TRUE(space
                  .find_all("a\xE1\xA0\x8E"
                            "b")
                  .empty());
  EXPECT_EQ(space
                .find_all("a \t\xE3\x80\x80"
                          "b")
                .size(),
            1u);
  const Regex empty("x*");
  const auto m = empty.find_all("axxb");
  ASSERT_EQ(m.size(), 4u);  // "", "xx", "", "" — no infinite loop on empty matches
  EXPECT_EQ(m[1], std::make_pair(size_t{1}, size_t{3}));
  EXPECT_THROW(Regex("(unclosed"), Error);
}

// --- Malformed and unsupported files ----------------------------------------------------------

// The message of the detllm::Error that `fn` throws ("" if it throws none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string minimal_json(const std::string& model_extra = "", const std::string& root_extra = "") {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"])" +
         model_extra + "}" + root_extra + "}";
}

TEST(TokenizerJson, MinimalBpeWorks) {
  const auto tok = Tokenizer::from_json_string(minimal_json(), "min.json");
  EXPECT_EQ(tok->encode("abab"), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{2, 0}), "ab a");  // no decoder: joined by spaces
  EXPECT_EQ(tok->vocab_size(), 3);
  EXPECT_EQ(tok->bos_id(), std::nullopt);
  EXPECT_THROW(tok->encode("abc"), Error);  // 'c' unknown, no unk token, no byte fallback
}

TEST(TokenizerJson, MalformedInputsGiveClearErrors) {
  auto load = [](const std::string& text) {
    return error_of([&] { Tokenizer::from_json_string(text, "bad.json"); });
  };
  EXPECT_NE(load("{").find("bad.json: malformed tokenizer.json"), std::string::npos);
  EXPECT_NE(load("").find("bad.json"), std::string::npos);
  EXPECT_NE(load("[1, 2]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(load("{}").find("model: required field is missing"), std::string::npos);
  EXPECT_NE(load(R"({"model": {"type": "Unigram", "vocab": []}})")
                .find("unsupported model type 'Unigram'"),
            std::string::npos);
  EXPECT_NE(load(R"({"model": {"type": "BPE", "merges": []}})").find("model.vocab"),
            std::string::npos);
  EXPECT_NE(
      load(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})").find("out of range"),
      std::string::npos);
  EXPECT_NE(load(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})")
                .find("expected an integer"),
            std::string::npos);
  EXPECT_NE(load(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a z"]}})")
                .find("not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(
      load(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})").find("merges[0]"),
      std::string::npos);
  EXPECT_NE(load(minimal_json(R"(, "dropout": 0.1)")).find("dropout"), std::string::npos);
  EXPECT_NE(
      load(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})").find("vocabulary is empty"),
      std::string::npos);
  EXPECT_NE(load(R"({"model": {"type": "BPE", "vocab": {"a": 2000000000}, "merges": []}})")
                .find("too sparse"),
            std::string::npos);
  EXPECT_NE(load(minimal_json("", R"(, "normalizer": {"type": "BertNormalizer"})"))
                .find("'BertNormalizer'"),
            std::string::npos);
  EXPECT_NE(
      load(minimal_json("", R"(, "pre_tokenizer": {"type": "Whitespace"})")).find("'Whitespace'"),
      std::string::npos);
  EXPECT_NE(load(minimal_json("", R"(, "decoder": {"type": "WordPiece"})")).find("'WordPiece'"),
            std::string::npos);
  EXPECT_NE(load(minimal_json("", R"(, "post_processor": {"type": "Nope"})")).find("'Nope'"),
            std::string::npos);
  EXPECT_NE(
      load(
          minimal_json(
              "",
              R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"})"))
          .find("cannot compile"),
      std::string::npos);
  EXPECT_NE(
      load(minimal_json("", R"(, "added_tokens": [{"content": "x"}])")).find("added_tokens[0].id"),
      std::string::npos);
  EXPECT_NE(load(minimal_json("", R"(, "padding": {"length": 8})")).find("padding"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json_file("/nonexistent/tokenizer.json");
            }).find("/nonexistent/tokenizer.json"),
            std::string::npos);
}

TEST(TokenizerJson, ConfigGivesTemplateAndSpecialTokens) {
  const std::string config =
      R"({"bos_token": {"content": "a"}, "eos_token": "b",
          "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  const auto tok = Tokenizer::from_json_string(minimal_json(), "min.json", config);
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->chat_template(), "D");
  EXPECT_NE(error_of([&] {
              Tokenizer::from_json_string(minimal_json(), "m", R"({"bos_token": "zz"})");
            }).find("BOS token 'zz' is not in the vocabulary"),
            std::string::npos);
}

TEST(TokenizerApi, InvalidInputAndIds) {
  if (auto m = missing_tokenizer_file({"llama3"})) GTEST_SKIP() << *m;
  const Tokenizer* tok = &shared("llama3");
  EXPECT_NE(error_of([&] { tok->encode("ok\xC3("); }).find("not valid UTF-8"), std::string::npos);
  EXPECT_THROW(tok->id_to_token(-1), Error);
  EXPECT_THROW(tok->id_to_token(tok->vocab_size()), Error);
  EXPECT_EQ(tok->id_to_token(9906), "Hello");
  EXPECT_EQ(tok->token_to_id("<|eot_id|>"), 128009);
  EXPECT_TRUE(tok->is_special(128009));
  EXPECT_FALSE(tok->is_special(9906));
  EXPECT_EQ(tok->token_to_id("no such token"), std::nullopt);
  EXPECT_TRUE(tok->encode("").empty());
}

// --- Round trips and streaming -----------------------------------------------------------------

TEST(TokenizerRoundTrip, ByteLevelIsLossless) {
  if (auto m = missing_tokenizer_file({"llama3", "qwen3"})) GTEST_SKIP() << *m;
  const Tokenizer* llama3 = &shared("llama3");
  const Tokenizer* qwen3 = &shared("qwen3");
  for (const std::string& text : read_corpus()) {
    EXPECT_EQ(llama3->decode(llama3->encode(text, false)), text);
    // Qwen normalizes to NFC first.
    EXPECT_EQ(qwen3->decode(qwen3->encode(text, false)),
              unicode::normalize(text, unicode::NormalForm::kNfc));
  }
}

// Pushes ids one at a time; returns the pieces (each must be complete UTF-8).
std::vector<std::string> stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder stream(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(stream.push(id));
  pieces.push_back(stream.flush());
  for (const std::string& p : pieces) EXPECT_FALSE(unicode::find_invalid_utf8(p).has_value());
  return pieces;
}

TEST(TokenizerStream, ByteLevelEmojiSplitAcrossTokens) {
  if (auto m = missing_tokenizer_file({"llama3"})) GTEST_SKIP() << *m;
  const Tokenizer* tok = &shared("llama3");
  const std::string text = "melt \xF0\x9F\xAB\xA0 ok";  // U+1FAE0, spelled by several tokens
  const auto ids = tok->encode(text, false);
  const auto pieces = stream_all(*tok, ids);
  std::string joined;
  size_t held = 0;
  for (const std::string& p : pieces) {
    joined += p;
    held += p.empty();
  }
  EXPECT_EQ(joined, text);
  EXPECT_GT(held, 1u) << "the emoji's first tokens should be held back";
  EXPECT_NE(std::find(pieces.begin(), pieces.end(), " \xF0\x9F\xAB\xA0"), pieces.end());
}

TEST(TokenizerStream, SentencePieceByteFallback) {
  if (auto m = missing_tokenizer_file({"llama2"})) GTEST_SKIP() << *m;
  const Tokenizer* tok = &shared("llama2");
  const std::string text = "a \xF0\x9F\xAB\xA0 b\nc";  // emoji and newline are <0xNN> tokens
  const auto ids = tok->encode(text, true);
  ASSERT_GT(ids.size(), 6u);
  const auto pieces = stream_all(*tok, ids);
  std::string joined;
  for (const std::string& p : pieces) joined += p;
  EXPECT_EQ(joined, tok->decode(ids));
  EXPECT_EQ(tok->decode(ids, true), text);
  // A lone continuation byte never completes: flush gives U+FFFD.
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.push(*tok->token_to_id("<0xAB>")), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
}

// --- GGUF SentencePiece path --------------------------------------------------------------------

// Writes a GGUF v3 file with metadata only.
class GgufWriter {
 public:
  void kv_string(const std::string& key, const std::string& v) {
    key_type(key, 8);
    str(v);
  }
  void kv_u32(const std::string& key, uint32_t v) {
    key_type(key, 4);
    pod(v);
  }
  void kv_bool(const std::string& key, bool v) {
    key_type(key, 7);
    body_.push_back(v ? 1 : 0);
  }
  void kv_strings(const std::string& key, const std::vector<std::string>& v) {
    key_type(key, 9);
    pod(uint32_t{8});
    pod(uint64_t{v.size()});
    for (const auto& s : v) str(s);
  }
  template <typename T>
  void kv_array(const std::string& key, uint32_t type, const std::vector<T>& v) {
    key_type(key, 9);
    pod(type);
    pod(uint64_t{v.size()});
    for (T x : v) pod(x);
  }
  std::vector<uint8_t> finish() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    auto put = [&](uint64_t x) {
      for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(x >> (8 * i)));
    };
    put(0);  // tensors
    put(n_kv_);
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  template <typename T>
  void pod(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    body_.insert(body_.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    pod(uint64_t{s.size()});
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void key_type(const std::string& key, uint32_t type) {
    ++n_kv_;
    str(key);
    pod(type);
  }
  std::vector<uint8_t> body_;
  uint64_t n_kv_ = 0;
};

// A Llama-2 GGUF carries scores, not merges; the merges rebuilt from them must tokenize like
// the tokenizer.json. The scores are made from that file's merge ranks (a merged piece scores
// minus the rank of its first merge; other pieces score lowest), as SentencePiece orders them.
TEST(TokenizerGguf, SentencePieceScoresMatchTokenizerJson) {
  if (auto m = missing_tokenizer_file({"llama2"})) GTEST_SKIP() << *m;
  std::ifstream in(tokenizer_file("llama2"));
  const json file = json::parse(in);
  const json& vocab = file.at("model").at("vocab");
  std::vector<std::string> tokens(vocab.size());
  for (const auto& [token, id] : vocab.items()) tokens.at(id.get<size_t>()) = token;
  std::vector<float> scores(tokens.size(), -1e9f);
  const json& merges = file.at("model").at("merges");
  for (size_t rank = merges.size(); rank-- > 0;) {
    const std::string m = merges[rank].get<std::string>();
    const std::string merged = m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1);
    scores.at(vocab.at(merged).get<size_t>()) = -static_cast<float>(rank);
  }
  std::vector<int32_t> types(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool byte = tokens[i].size() == 6 && tokens[i].rfind("<0x", 0) == 0;
    types[i] = i == 0 ? 2 : (i < 3 ? 3 : (byte ? 6 : 1));
  }
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.kv_string("tokenizer.ggml.model", "llama");
  w.kv_strings("tokenizer.ggml.tokens", tokens);
  w.kv_array("tokenizer.ggml.scores", 6, scores);
  w.kv_array("tokenizer.ggml.token_type", 5, types);
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);
  w.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  w.kv_bool("tokenizer.ggml.add_bos_token", true);
  const std::vector<uint8_t> bytes = w.finish();
  const auto gguf = GgufFile::parse(bytes.data(), bytes.size(), "llama2-test.gguf");
  const auto from_gguf = Tokenizer::from_gguf(*gguf);
  const Tokenizer* from_json = &shared("llama2");
  EXPECT_EQ(from_gguf->bos_id(), 1);
  EXPECT_EQ(from_gguf->vocab_size(), from_json->vocab_size());
  int mismatches = 0;
  for (const std::string& text : read_corpus()) {
    const auto ids = from_json->encode(text);
    EXPECT_EQ(from_gguf->encode(text), ids) << json(text).dump();
    EXPECT_EQ(from_gguf->decode(ids), from_json->decode(ids));
    mismatches += from_gguf->encode(text) != ids;
    if (mismatches > 5) break;
  }
}

TEST(TokenizerGguf, UnsupportedModelIsAClearError) {
  GgufWriter w;
  w.kv_string("tokenizer.ggml.model", "bert");
  w.kv_strings("tokenizer.ggml.tokens", {"a"});
  const std::vector<uint8_t> bytes = w.finish();
  const auto gguf = GgufFile::parse(bytes.data(), bytes.size(), "bert.gguf");
  EXPECT_NE(error_of([&] {
              Tokenizer::from_gguf(*gguf);
            }).find("unsupported tokenizer.ggml.model 'bert'"),
            std::string::npos);
  GgufWriter w2;
  w2.kv_string("tokenizer.ggml.model", "gpt2");
  w2.kv_string("tokenizer.ggml.pre", "mystery");
  w2.kv_strings("tokenizer.ggml.tokens", {"a"});
  w2.kv_strings("tokenizer.ggml.merges", {});
  const std::vector<uint8_t> bytes2 = w2.finish();
  const auto gguf2 = GgufFile::parse(bytes2.data(), bytes2.size(), "x.gguf");
  EXPECT_NE(error_of([&] { Tokenizer::from_gguf(*gguf2); }).find("pre-tokenizer 'mystery'"),
            std::string::npos);
}

}  // namespace
}  // namespace detllm
