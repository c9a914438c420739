// The default model's tokenizer (SmolLM2, from its GGUF) and one GrammarCompiler for it, shared
// by the tests of this folder; random walks through a grammar's masks.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "model/model_loader.h"
#include "structured/compiler.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace detllm::test {

struct GrammarEnv {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<structured::GrammarCompiler> compiler;
  std::vector<char> blank;  // [id]: the token's bytes are whitespace alone (or none)
};

// nullptr when the default model is missing (the caller skips).
inline const GrammarEnv* grammar_env() {
  static const std::unique_ptr<GrammarEnv> env = [] () -> std::unique_ptr<GrammarEnv> {
    const std::string path = find_default_model();
    if (path.empty() || !std::filesystem::exists(path)) return nullptr;
    auto e = std::make_unique<GrammarEnv>();
    e->tokenizer = Tokenizer::from_gguf(*GgufFile::open(path));
    const auto vocab = structured::GrammarVocabulary::from_tokenizer(*e->tokenizer);
    e->compiler = std::make_unique<structured::GrammarCompiler>(vocab);
    for (const std::string& b : vocab.token_bytes)
      e->blank.push_back(b.find_first_not_of(" \t\n\r") == std::string::npos);
    return e;
  }();
  return env.get();
}

#define DETLLM_GRAMMAR_ENV(env)                                                             \
  const ::detllm::test::GrammarEnv* env = ::detllm::test::grammar_env();                    \
  if (env == nullptr)                                                                       \
    GTEST_SKIP() << "default model not found (run scripts/bootstrap.sh or set "             \
                    "DETLLM_DEFAULT_MODEL): its tokenizer is the vocabulary of these tests"

inline std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& words, int32_t width) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < width; ++id) {
    if ((words[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) ids.push_back(id);
  }
  return ids;
}

struct Walk {
  std::vector<int32_t> tokens;               // accepted tokens, the stop id last if terminated
  std::vector<std::vector<uint32_t>> masks;  // the mask before each token
  bool terminated = false;
};

// Draws allowed tokens with a seeded RNG until the matcher terminates or max_steps. Biased so
// that walks end: a stop id when allowed; otherwise tokens that are not whitespace alone, when
// there are some (a JSON grammar's free whitespace would otherwise make most walks wander).
inline Walk random_walk(const GrammarEnv& env, structured::Matcher& m, uint64_t seed,
                        int max_steps = 400) {
  const Tokenizer& tok = *env.tokenizer;
  std::mt19937_64 rng(seed);
  Walk w;
  const int32_t width = m.mask_width();
  std::vector<uint32_t> words(structured::Matcher::bitmask_words(width));
  const int32_t eos = tok.eos_id().value_or(-1);
  for (int step = 0; step < max_steps && !m.is_terminated(); ++step) {
    if (!m.fill_next_token_bitmask(words)) break;
    w.masks.push_back(words);
    const std::vector<int32_t> ids = allowed_ids(words, width);
    std::vector<int32_t> pick;
    for (int32_t id : ids) {
      if (id == eos) { pick = {id}; break; }
      if (!env.blank[static_cast<size_t>(id)]) pick.push_back(id);
    }
    if (pick.empty()) pick = ids;
    const int32_t id = pick[std::uniform_int_distribution<size_t>(0, pick.size() - 1)(rng)];
    EXPECT_TRUE(m.accept_token(id)) << "a token its own mask allowed was refused: " << id;
    w.tokens.push_back(id);
  }
  w.terminated = m.is_terminated();
  return w;
}

// The text of a walk, its stop token left out.
inline std::string walk_text(const Tokenizer& tok, const Walk& w) {
  std::vector<int32_t> ids = w.tokens;
  if (w.terminated && !ids.empty()) ids.pop_back();
  return tok.decode(ids);
}

}  // namespace detllm::test
