// The BPE model: turns one pre-tokenized word into token ids by applying ranked merges, lowest
// rank first (ties: leftmost), with a min-heap over a linked list of symbols — O(n log n) per
// word, so a 100 KB word (SentencePiece-style tokenizers have no pre-tokenizer) stays fast.
// Covers byte-level BPE (GPT-2, Llama-3, Qwen, SmolLM) and SentencePiece-style BPE with byte
// fallback (<0xNN> tokens: Llama-2, Mistral), as Hugging Face's BPE model does.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace detllm {

struct BpeOptions {
  std::optional<std::string> unk_token;   // emitted for a symbol not in the vocabulary
  bool fuse_unk = false;                  // consecutive unknown symbols share one unk token
  bool byte_fallback = false;             // unknown symbols become <0xNN> byte tokens
  bool ignore_merges = false;             // a word that is itself a token is emitted whole
  std::string continuing_subword_prefix;  // "" = none
  std::string end_of_word_suffix;         // "" = none
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `vocab`: (token, id) pairs; `merges`: pairs in rank order (rank = index). Throws
  // detllm::Error when a merge names a token that is not in the vocabulary.
  BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  // Appends the ids of `word` (valid UTF-8) to `ids`. Throws detllm::Error when a symbol is
  // not in the vocabulary and there is neither byte fallback nor an unk token to use.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when no token has this id.
  const std::string* id_to_token(int32_t id) const;
  size_t vocab_size() const { return vocab_.size(); }
  const TokenIdMap& vocab() const { return vocab_; }

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const MergeTarget* find_merge(int32_t a, int32_t b) const;

  TokenIdMap vocab_;
  std::vector<const std::string*> id_to_token_;  // points into vocab_ keys; holes are nullptr
  std::unordered_map<uint64_t, MergeTarget> merges_;
  BpeOptions options_;
  std::array<int32_t, 256> byte_token_ids_{};  // ids of <0x00>..<0xFF>, -1 when absent
};

}  // namespace detllm
