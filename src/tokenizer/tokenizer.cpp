// Tokenizer pipeline (see tokenizer.h): builds the stages from a TokenizerSpec once, then
// encode = added-token cut -> normalize -> normalized added-token cut -> pre-tokenize -> BPE ->
// post-process, in the same order Hugging Face's TokenizerImpl::encode runs them.
#include "tokenizer/tokenizer.h"

#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/unicode.h"
#include "tokenizer/tokenizer_spec.h"

namespace detllm {

struct Tokenizer::Impl {
  std::string name;
  BpeModel model;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Decoder decoder;
  std::vector<int32_t> post_prefix, post_suffix;
  AddedTokenMatcher raw_matcher;         // tokens with normalized=false, on the raw text
  AddedTokenMatcher normalized_matcher;  // tokens with normalized=true, on normalized text
  TokenIdMap added_by_content;
  std::unordered_map<int32_t, std::string> added_by_id;
  std::unordered_set<int32_t> special_ids;
  int32_t vocab_size = 0;
  std::optional<int32_t> bos_id, eos_id;
  std::string chat_template;

  // `added`: tokens with their final ids; decode spells a normalized token as its normalized
  // content (HF's id_to_token does), while token_to_id looks up the content as written.
  Impl(TokenizerSpec& spec, BpeModel bpe, std::vector<AddedToken> added, AddedTokenMatcher raw,
       AddedTokenMatcher normalized)
      : name(spec.name),
        model(std::move(bpe)),
        normalizer(std::move(spec.normalizer)),
        pre_tokenizer(std::move(spec.pre_tokenizer)),
        decoder(std::move(spec.decoder)),
        post_prefix(std::move(spec.post_prefix)),
        post_suffix(std::move(spec.post_suffix)),
        raw_matcher(std::move(raw)),
        normalized_matcher(std::move(normalized)) {
    for (const AddedToken& t : added) {
      added_by_content.insert_or_assign(t.content, t.id);
      added_by_id.insert_or_assign(t.id,
                                   t.normalized ? normalizer.normalize(t.content) : t.content);
    }
    chat_template = std::move(spec.chat_template);
  }

  // Ids of the words of one ordinary (not added-token) piece of the input.
  void encode_piece(std::string_view piece, bool at_text_start, std::vector<int32_t>& ids) const {
    bool keeps_start = true;
    const std::string normalized = normalizer.normalize(piece, &keeps_start);
    if (normalized.empty()) return;
    at_text_start = at_text_start && keeps_start;
    std::vector<std::string> words;
    if (normalized_matcher.empty()) {
      pre_tokenizer.pre_tokenize(normalized, at_text_start, words);
      for (const std::string& w : words) model.tokenize(w, ids);
      return;
    }
    for (const TextSplit& s : normalized_matcher.split(normalized)) {
      if (s.added_id >= 0) {
        ids.push_back(s.added_id);
        continue;
      }
      words.clear();
      pre_tokenizer.pre_tokenize(normalized.substr(s.begin, s.end - s.begin),
                                 at_text_start && s.begin == 0, words);
      for (const std::string& w : words) model.tokenize(w, ids);
    }
  }

  // Whether `id` is a <0xNN> token that a ByteFallback decoder joins with its neighbours.
  bool is_fallback_byte(int32_t id) const {
    if (!decoder.has_byte_fallback()) return false;
    const std::string* s = token_string(id);
    return s != nullptr && byte_fallback_value(*s).has_value();
  }

  const std::string* token_string(int32_t id) const {
    const auto it = added_by_id.find(id);
    if (it != added_by_id.end()) return &it->second;
    return model.id_to_token(id);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_spec(TokenizerSpec spec) {
  BpeModel bpe = [&] {
    try {
      return BpeModel(std::move(spec.vocab), spec.merges, spec.bpe);
    } catch (const Error& e) {
      throw_error("{}: invalid BPE model: {}", spec.name, e.what());
    }
  }();
  spec.merges.clear();
  spec.merges.shrink_to_fit();

  // Added tokens take the model's id when their content is already a token (as HF's
  // AddedVocabulary does); otherwise the id the file gives.
  std::vector<AddedToken> added;
  for (AddedToken t : spec.added_tokens) {
    if (t.content.empty()) continue;
    if (const auto id = bpe.token_to_id(t.content)) t.id = *id;
    check(t.id >= 0, "{}: added token '{}' has no id", spec.name, t.content);
    added.push_back(std::move(t));
  }
  // Trie pattern order: special tokens first, then the others, each in file order.
  std::vector<AddedToken> raw_tokens, norm_tokens;
  std::vector<std::string> raw_patterns, norm_patterns;
  for (int pass = 0; pass < 2; ++pass) {
    for (const AddedToken& t : added) {
      if (t.special != (pass == 0)) continue;
      if (t.normalized) {
        norm_tokens.push_back(t);
        norm_patterns.push_back(Normalizer(spec.normalizer).normalize(t.content));
      } else {
        raw_tokens.push_back(t);
        raw_patterns.push_back(t.content);
      }
    }
  }
  auto impl =
      std::make_unique<Impl>(spec, std::move(bpe), added,
                             AddedTokenMatcher(std::move(raw_tokens), std::move(raw_patterns)),
                             AddedTokenMatcher(std::move(norm_tokens), std::move(norm_patterns)));

  // Special ids: every id whose token string is the content of a special added token.
  std::unordered_set<std::string> seen(impl->model.vocab().size());
  for (const auto& [token, id] : impl->model.vocab()) seen.insert(token);
  for (const AddedToken& t : added) {
    seen.insert(t.content);
    if (!t.special) continue;
    impl->special_ids.insert(t.id);
    if (const auto id = impl->model.token_to_id(t.content)) impl->special_ids.insert(*id);
  }
  impl->vocab_size = static_cast<int32_t>(seen.size());

  auto resolve = [&](const std::optional<int32_t>& id, const std::optional<std::string>& token,
                     const char* what) -> std::optional<int32_t> {
    if (id) {
      check(impl->token_string(*id) != nullptr, "{}: the {} token id {} is not in the vocabulary",
            spec.name, what, *id);
      return id;
    }
    if (!token) return std::nullopt;
    std::optional<int32_t> found;
    const auto it = impl->added_by_content.find(*token);
    if (it != impl->added_by_content.end()) found = it->second;
    if (!found) found = impl->model.token_to_id(*token);
    check(found.has_value(), "{}: the {} token '{}' is not in the vocabulary", spec.name, what,
          *token);
    return found;
  };
  impl->bos_id = resolve(spec.bos_id, spec.bos_token, "BOS");
  impl->eos_id = resolve(spec.eos_id, spec.eos_token, "EOS");
  for (int32_t id : impl->post_prefix) {
    check(impl->token_string(id) != nullptr,
          "{}: post-processor token id {} is not in the vocabulary", spec.name, id);
  }
  for (int32_t id : impl->post_suffix) {
    check(impl->token_string(id) != nullptr,
          "{}: post-processor token id {} is not in the vocabulary", spec.name, id);
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const auto bad = unicode::find_invalid_utf8(text)) {
    throw_error(
        "cannot tokenize: the text is not valid UTF-8 (bad byte 0x{:02X} at offset {}); "
        "pass UTF-8 text",
        static_cast<unsigned char>(text[*bad]), *bad);
  }
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = m.post_prefix;
  for (const TextSplit& s : m.raw_matcher.split(text)) {
    if (s.added_id >= 0) {
      ids.push_back(s.added_id);
    } else {
      m.encode_piece(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), m.post_suffix.begin(), m.post_suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* s = m.token_string(id);
    if (s == nullptr) continue;
    if (skip_special_tokens && m.special_ids.count(id)) continue;
    tokens.push_back(*s);
  }
  return m.decoder.decode(std::move(tokens));
}

int32_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos_id;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos_id;
}
const std::string& Tokenizer::chat_template() const {
  return impl_->chat_template;
}
const std::string& Tokenizer::name() const {
  return impl_->name;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->added_by_content.find(token);
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* s = impl_->token_string(id);
  check(s != nullptr, "{}: no token has id {} (vocabulary size {})", impl_->name, id,
        impl_->vocab_size);
  return *s;
}

bool Tokenizer::is_special(int32_t id) const {
  return impl_->special_ids.count(id) != 0;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const Impl& m = *impl_;
  if (const auto it = m.added_by_id.find(id); it != m.added_by_id.end()) return it->second;
  const std::string* s = m.model.id_to_token(id);
  return s == nullptr ? std::string() : m.decoder.token_bytes(*s);
}

// --- StreamDecoder -------------------------------------------------------------------------

namespace {
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

void StreamDecoder::reset() {
  ids_.clear();
  prefix_.clear();
  prefix_count_ = 0;
}

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  // A run of <0xNN> tokens decodes all or nothing (ByteFallback), so wait for its end.
  if (tokenizer_.impl_->is_fallback_byte(id)) return {};
  std::string text = tokenizer_.decode(ids_, skip_special_tokens_);
  // A trailing U+FFFD means the last token may end mid-code-point: wait for the rest.
  if (text.size() <= prefix_.size() || ends_with_replacement(text)) return {};
  // The window starts with already-emitted context tokens, so decoders that look at token
  // boundaries (SentencePiece's leading-space strip) see what a full decode sees; the text
  // new to this push is what follows the context's own decoding.
  std::string fresh = text.compare(0, prefix_.size(), prefix_) == 0
                          ? text.substr(prefix_.size())
                          : unicode::utf8_lossy(std::string_view(text).substr(prefix_.size()));
  // Slide: the tokens just emitted become the context for the next push.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_count_));
  prefix_count_ = ids_.size();
  prefix_ = tokenizer_.decode(ids_, skip_special_tokens_);
  return fresh;
}

std::string StreamDecoder::flush() {
  std::string rest;
  if (ids_.size() > prefix_count_) {
    const std::string text = tokenizer_.decode(ids_, skip_special_tokens_);
    if (text.size() > prefix_.size()) rest = text.substr(prefix_.size());
  }
  reset();
  return rest;
}

}  // namespace detllm
