// Tokenizer::from_gguf: builds a TokenizerSpec from a GGUF file's tokenizer.* metadata. A GGUF
// stores only the vocabulary, merges (or scores), token types and a pre-tokenizer *name*, so
// the pipeline is rebuilt to match the tokenizer.json the model was released with.
//   tokenizer.ggml.model "gpt2":  byte-level BPE; tokenizer.ggml.pre picks the split rules.
//   tokenizer.ggml.model "llama": SentencePiece-style BPE with byte fallback (Llama-2 layout);
//                                 merges are derived from the scores when the file has none.
#include <algorithm>

#include "core/error.h"
#include "core/unicode.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_spec.h"

namespace detllm {
namespace {

// llama.cpp token types (llama_token_type).
constexpr int64_t kTokenNormal = 1, kTokenUnknown = 2, kTokenControl = 3, kTokenUserDefined = 4;

constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

PreTokenizerStep split_step(const char* pattern) {
  PreTokenizerStep s;
  s.kind = PreTokenizerStep::Kind::kSplit;
  s.regex = std::make_shared<Regex>(pattern);
  s.behavior = SplitBehavior::kIsolated;
  return s;
}

PreTokenizerStep byte_level_step(bool use_regex) {
  PreTokenizerStep s;
  s.kind = PreTokenizerStep::Kind::kByteLevel;
  s.add_prefix_space = false;
  s.use_regex = use_regex;
  return s;
}

// The pre-tokenizer (and normalizer) of the tokenizer.json each llama.cpp pre-type stands for.
void byte_level_pipeline(const std::string& pre, const std::string& name, TokenizerSpec& spec) {
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    spec.pre_tokenizer.push_back(byte_level_step(true));
  } else if (pre == "smollm") {
    // SmolLM's tokenizer.json: Digits(individual_digits) then ByteLevel with GPT-2's regex.
    PreTokenizerStep digits;
    digits.kind = PreTokenizerStep::Kind::kDigits;
    digits.individual_digits = true;
    spec.pre_tokenizer.push_back(digits);
    spec.pre_tokenizer.push_back(byte_level_step(true));
  } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe") {
    spec.pre_tokenizer.push_back(split_step(kLlama3Split));
    spec.pre_tokenizer.push_back(byte_level_step(false));
    spec.bpe.ignore_merges = true;  // as Llama-3's tokenizer.json
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    NormalizerStep nfc;
    nfc.kind = NormalizerStep::Kind::kUnicode;
    nfc.form = unicode::NormalForm::kNfc;
    spec.normalizer.push_back(nfc);
    spec.pre_tokenizer.push_back(split_step(kQwen2Split));
    spec.pre_tokenizer.push_back(byte_level_step(false));
  } else {
    throw_error(
        "{}: unsupported GGUF pre-tokenizer '{}' (tokenizer.ggml.pre); supported: "
        "default, gpt2, smollm, llama3/llama-bpe, qwen2",
        name, pre);
  }
  DecoderStep d;
  d.kind = DecoderStep::Kind::kByteLevel;
  spec.decoder.push_back(d);
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// SentencePiece files carry scores instead of merges. Every split of a token into two tokens
// is a merge, ranked by the merged token's score (higher first), then by longer left and right
// parts — the order transformers' generate_merges gives, so both rebuild the same model.
std::vector<std::pair<std::string, std::string>> merges_from_scores(
    const std::vector<std::string>& tokens, const std::vector<double>& scores) {
  TokenIdMap ids;
  for (size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], static_cast<int32_t>(i));
  struct Candidate {
    int32_t left, right;
    double score;
    size_t left_len, right_len;
  };
  std::vector<Candidate> all;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& tok = tokens[t];
    std::vector<Candidate> local;
    for (size_t cut = 1; cut < tok.size(); ++cut) {
      if ((static_cast<unsigned char>(tok[cut]) & 0xC0) == 0x80) continue;  // mid code point
      const auto l = ids.find(std::string_view(tok).substr(0, cut));
      const auto r = ids.find(std::string_view(tok).substr(cut));
      if (l == ids.end() || r == ids.end()) continue;
      local.push_back(
          {l->second, r->second, scores[t], code_points(l->first), code_points(r->first)});
    }
    std::sort(local.begin(), local.end(), [](const Candidate& a, const Candidate& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_len != b.left_len) return a.left_len > b.left_len;
    return a.right_len > b.right_len;
  });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(all.size());
  for (const Candidate& c : all) merges.emplace_back(tokens[c.left], tokens[c.right]);
  return merges;
}

void sentencepiece_pipeline(const GgufFile& gguf, const std::vector<std::string>& tokens,
                            TokenizerSpec& spec) {
  const std::string space = "\xE2\x96\x81";  // ▁
  const bool add_space_prefix = gguf.has_key("tokenizer.ggml.add_space_prefix")
                                    ? gguf.get_bool("tokenizer.ggml.add_space_prefix")
                                    : true;
  NormalizerStep prepend, replace;
  prepend.kind = NormalizerStep::Kind::kPrepend;
  prepend.text = space;
  replace.kind = NormalizerStep::Kind::kReplace;
  replace.literal.assign(1, ' ');
  replace.text = space;
  if (add_space_prefix) spec.normalizer.push_back(prepend);
  spec.normalizer.push_back(replace);

  spec.bpe.byte_fallback = true;
  spec.bpe.fuse_unk = true;
  const int64_t unk = gguf.has_key("tokenizer.ggml.unknown_token_id")
                          ? gguf.get_int("tokenizer.ggml.unknown_token_id")
                          : 0;
  check(unk >= 0 && static_cast<size_t>(unk) < tokens.size(),
        "{}: tokenizer.ggml.unknown_token_id {} is out of range", spec.name, unk);
  spec.bpe.unk_token = tokens[static_cast<size_t>(unk)];

  if (gguf.has_key("tokenizer.ggml.merges")) {
    for (const std::string& m : gguf.get_string_array("tokenizer.ggml.merges")) {
      const size_t sp = m.find(' ', 1);
      check(sp != std::string::npos, "{}: merge '{}' has no space", spec.name, m);
      spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  } else {
    const std::vector<double> scores = gguf.get_float_array("tokenizer.ggml.scores");
    check(scores.size() == tokens.size(), "{}: {} scores for {} tokens", spec.name, scores.size(),
          tokens.size());
    spec.merges = merges_from_scores(tokens, scores);
  }

  DecoderStep rep, fallback, fuse, strip;
  rep.kind = DecoderStep::Kind::kReplace;
  rep.pattern = space;
  rep.content.assign(1, ' ');
  fallback.kind = DecoderStep::Kind::kByteFallback;
  fuse.kind = DecoderStep::Kind::kFuse;
  strip.kind = DecoderStep::Kind::kStrip;
  strip.content.assign(1, ' ');
  strip.start = 1;
  spec.decoder = {rep, fallback, fuse};
  if (add_space_prefix) spec.decoder.push_back(strip);
}

std::optional<int32_t> optional_id(const GgufFile& gguf, const std::string& key, size_t n_tokens,
                                   const std::string& name) {
  if (!gguf.has_key(key)) return std::nullopt;
  const int64_t id = gguf.get_int(key);
  check(id >= 0 && static_cast<size_t>(id) < n_tokens, "{}: {} = {} is out of range [0, {})", name,
        key, id, n_tokens);
  return static_cast<int32_t>(id);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& gguf) {
  TokenizerSpec spec;
  spec.name = gguf.path();
  const std::string model = gguf.get_string("tokenizer.ggml.model");
  const std::vector<std::string> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  check(!tokens.empty(), "{}: tokenizer.ggml.tokens is empty", spec.name);
  std::vector<int64_t> types;
  if (gguf.has_key("tokenizer.ggml.token_type")) {
    types = gguf.get_int_array("tokenizer.ggml.token_type");
    check(types.size() == tokens.size(), "{}: {} token types for {} tokens", spec.name,
          types.size(), tokens.size());
  }

  bool add_bos = false;
  if (model == "gpt2") {
    byte_level_pipeline(
        gguf.has_key("tokenizer.ggml.pre") ? gguf.get_string("tokenizer.ggml.pre") : "default",
        spec.name, spec);
    for (const std::string& m : gguf.get_string_array("tokenizer.ggml.merges")) {
      const size_t sp = m.find(' ', 1);
      check(sp != std::string::npos, "{}: merge '{}' has no space", spec.name, m);
      spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  } else if (model == "llama") {
    sentencepiece_pipeline(gguf, tokens, spec);
    add_bos = true;  // llama.cpp's default for SentencePiece vocabularies
  } else {
    throw_error("{}: unsupported tokenizer.ggml.model '{}' (supported: gpt2, llama)", spec.name,
                model);
  }

  spec.vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    spec.vocab.emplace_back(tokens[i], static_cast<int32_t>(i));
    const int64_t type = types.empty() ? kTokenNormal : types[i];
    // Control (and SentencePiece's unknown) tokens are special; user-defined ones are added
    // but not special. Both are matched whole in the text, as llama.cpp and transformers do.
    if (type == kTokenControl || type == kTokenUnknown || type == kTokenUserDefined) {
      AddedToken t;
      t.content = tokens[i];
      t.id = static_cast<int32_t>(i);
      t.special = type != kTokenUserDefined;
      spec.added_tokens.push_back(std::move(t));
    }
  }

  spec.bos_id = optional_id(gguf, "tokenizer.ggml.bos_token_id", tokens.size(), spec.name);
  spec.eos_id = optional_id(gguf, "tokenizer.ggml.eos_token_id", tokens.size(), spec.name);
  if (gguf.has_key("tokenizer.ggml.add_bos_token")) {
    add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token");
  }
  if (add_bos && spec.bos_id) spec.post_prefix.push_back(*spec.bos_id);
  if (gguf.has_key("tokenizer.ggml.add_eos_token") &&
      gguf.get_bool("tokenizer.ggml.add_eos_token") && spec.eos_id) {
    spec.post_suffix.push_back(*spec.eos_id);
  }
  if (gguf.has_key("tokenizer.chat_template")) {
    spec.chat_template = gguf.get_string("tokenizer.chat_template");
  }
  return from_spec(std::move(spec));
}

}  // namespace detllm
