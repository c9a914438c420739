// TokenizerSpec: everything a loader (tokenizer.json, GGUF metadata) reads out of its file, in
// one plain struct. Tokenizer::from_spec validates it once and builds the pipeline; loaders
// never build pipeline objects themselves, so both sources go through the same checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace detllm {

struct TokenizerSpec {
  std::string name;  // file name, quoted in error messages

  // The BPE model.
  std::vector<std::pair<std::string, int32_t>> vocab;       // (token, id)
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  BpeOptions bpe;

  std::vector<AddedToken> added_tokens;  // in file order
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<DecoderStep> decoder;

  // Post-processor for a single sequence with add_special_tokens=true:
  // ids = post_prefix + encoded + post_suffix (TemplateProcessing, Bert/Roberta processing).
  std::vector<int32_t> post_prefix;
  std::vector<int32_t> post_suffix;

  // BOS/EOS: an id (GGUF) or a token string resolved against the vocabulary (tokenizer_config).
  std::optional<int32_t> bos_id, eos_id;
  std::optional<std::string> bos_token, eos_token;
  std::string chat_template;
};

}  // namespace detllm
