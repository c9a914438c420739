// Tokenizer: text <-> token ids, exactly equal to Hugging Face `tokenizers` on the supported
// files (byte-level BPE: GPT-2, Llama-3, Qwen2/3, SmolLM; SentencePiece-style BPE with byte
// fallback: Llama-2, Mistral), loaded from tokenizer.json or from GGUF metadata.
//
// encode: cut on added/special tokens -> normalize -> pre-tokenize -> BPE -> post-process.
// decode: ids -> token strings -> decoder chain. StreamDecoder: decode incrementally, emitting
// only complete UTF-8. A Tokenizer is immutable after loading; encode/decode are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace detllm {

class GgufFile;
struct TokenizerSpec;

class Tokenizer {
 public:
  // Reads tokenizer.json, and tokenizer_config.json beside it if present (chat_template,
  // bos_token, eos_token). Throws detllm::Error naming the file and the problem.
  static std::unique_ptr<Tokenizer> from_json_file(const std::string& tokenizer_json_path);
  // From the text of a tokenizer.json (and optionally of a tokenizer_config.json); `name` is
  // used in error messages. For tests and the fuzz target.
  static std::unique_ptr<Tokenizer> from_json_string(std::string_view json, std::string name,
                                                     std::string_view config_json = {});
  // From the tokenizer.* metadata of a GGUF file (tokenizer.ggml.model "gpt2" or "llama").
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& gguf);
  // From a loader's spec (tokenizer_spec.h); validates it. Throws detllm::Error.
  static std::unique_ptr<Tokenizer> from_spec(TokenizerSpec spec);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // == HF tokenizer.encode(text, add_special_tokens=...).ids. `text` must be valid UTF-8
  // (detllm::Error otherwise).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // == HF tokenizer.decode(ids, skip_special_tokens=...). Unknown ids are skipped, as in HF.
  // The result is always valid UTF-8 (ill-formed bytes become U+FFFD).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Number of distinct tokens, added tokens included (HF get_vocab_size(True)).
  int32_t vocab_size() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as stored (byte-level tokens in the byte alphabet). Throws
  // detllm::Error for an id no token has.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // The bytes token `id` adds to decoded text when it is not the first token, without UTF-8
  // repair (Decoder::token_bytes); an added token's content as written. "" for an id no token
  // has. For grammar engines, which match bytes (src/structured/).
  std::string token_bytes(int32_t id) const;
  // The chat template (Jinja source) from tokenizer_config.json or GGUF; "" if none.
  const std::string& chat_template() const;
  const std::string& name() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class StreamDecoder;
};

// Incremental decoding for streaming output. push(id) returns the text that the new token
// completes; text is held back while the decoded tail is an unfinished UTF-8 sequence (a
// byte-level token that ends mid-code-point) or while a run of <0xNN> byte-fallback tokens may
// still continue (such a run decodes as a whole), so every returned piece is complete UTF-8.
// The concatenation of all pushes and flush() equals decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  // Returns whatever is still held (an unfinished sequence decodes to U+FFFD) and resets.
  std::string flush();
  void reset();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // the window: context tokens, then tokens not yet emitted
  std::string prefix_;        // decode(ids_[0, prefix_count_)), already emitted
  size_t prefix_count_ = 0;
};

}  // namespace detllm
