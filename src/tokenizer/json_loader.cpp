// tokenizer.json -> TokenizerSpec (see json_loader.h), and Tokenizer::from_json_file /
// from_json_string. Every field is read through checked accessors so a bad file gives
// "<file>: <field path>: <problem>" rather than a crash; unknown component types are refused.
#include "tokenizer/json_loader.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/mmap_file.h"
#include "tokenizer/tokenizer.h"

namespace detllm {
namespace {

using json = nlohmann::json;

class Reader {
 public:
  explicit Reader(const std::string& name) : name_(name) {}

  [[noreturn]] void fail(std::string_view where, std::string_view problem) const {
    throw_error("{}: {}: {}", name_, where, problem);
  }

  const json& object(const json& v, std::string_view where) const {
    if (!v.is_object()) fail(where, "expected a JSON object");
    return v;
  }
  // A field that must be present and not null.
  const json& need(const json& obj, const char* key, const std::string& where) const {
    object(obj, where);
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail(where + "." + key, "required field is missing");
    return *it;
  }
  // A field that may be missing or null.
  const json* opt(const json& obj, const char* key) const {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string string(const json& v, const std::string& where) const {
    if (!v.is_string()) fail(where, "expected a string");
    return v.get<std::string>();
  }
  std::string need_string(const json& obj, const char* key, const std::string& where) const {
    return string(need(obj, key, where), where + "." + key);
  }
  std::optional<std::string> opt_string(const json& obj, const char* key,
                                        const std::string& where) const {
    const json* v = opt(obj, key);
    if (!v) return std::nullopt;
    return string(*v, where + "." + key);
  }
  bool opt_bool(const json& obj, const char* key, bool fallback, const std::string& where) const {
    const json* v = opt(obj, key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(where + "." + key, "expected true or false");
    return v->get<bool>();
  }
  int64_t integer(const json& v, const std::string& where, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail(where, "expected an integer");
    const int64_t x = v.is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX))
                          : v.get<int64_t>();
    if (x < lo || x > hi) fail(where, fmt::format("{} is out of range [{}, {}]", x, lo, hi));
    return x;
  }
  int32_t token_id(const json& v, const std::string& where) const {
    return static_cast<int32_t>(integer(v, where, 0, std::numeric_limits<int32_t>::max() - 1));
  }
  const json& array(const json& v, const std::string& where) const {
    if (!v.is_array()) fail(where, "expected an array");
    return v;
  }
  std::string type_of(const json& component, const std::string& where) const {
    return need_string(component, "type", where);
  }

 private:
  const std::string& name_;
};

// A {"String": s} / {"Regex": r} pattern, as a regex (strings are escaped).
std::shared_ptr<const Regex> read_pattern(const Reader& r, const json& v, const std::string& where,
                                          std::string* literal) {
  r.object(v, where);
  if (const json* s = r.opt(v, "String")) {
    const std::string text = r.string(*s, where + ".String");
    if (text.empty()) r.fail(where + ".String", "an empty pattern matches nothing useful");
    if (literal) {
      *literal = text;
      return nullptr;
    }
    return std::make_shared<Regex>(regex_escape(text));
  }
  if (const json* re = r.opt(v, "Regex")) {
    const std::string text = r.string(*re, where + ".Regex");
    try {
      return std::make_shared<Regex>(text);
    } catch (const Error& e) {
      r.fail(where + ".Regex", e.what());
    }
  }
  r.fail(where, "expected {\"String\": ...} or {\"Regex\": ...}");
}

// A "Sequence" entry's list v[key]: f(element, its place "where.key[i]") for each, in order.
template <class F>
void for_each_in(const Reader& r, const json& v, const char* key, const std::string& where, F f) {
  const std::string at = where + "." + key;
  const json& list = r.array(r.need(v, key, where), at);
  for (size_t i = 0; i < list.size(); ++i) f(list[i], fmt::format("{}[{}]", at, i));
}

void read_normalizer(const Reader& r, const json& n, const std::string& where,
                     std::vector<NormalizerStep>& steps) {
  const std::string type = r.type_of(n, where);
  NormalizerStep step;
  using K = NormalizerStep::Kind;
  if (type == "Sequence") {
    for_each_in(r, n, "normalizers", where,
                [&](const json& e, const std::string& at) { read_normalizer(r, e, at, steps); });
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = K::kUnicode;
    step.form = type == "NFC"    ? unicode::NormalForm::kNfc
                : type == "NFD"  ? unicode::NormalForm::kNfd
                : type == "NFKC" ? unicode::NormalForm::kNfkc
                                 : unicode::NormalForm::kNfkd;
  } else if (type == "Prepend") {
    step.kind = K::kPrepend;
    step.text = r.need_string(n, "prepend", where);
  } else if (type == "Replace") {
    step.kind = K::kReplace;
    step.regex = read_pattern(r, r.need(n, "pattern", where), where + ".pattern", &step.literal);
    step.text = r.need_string(n, "content", where);
  } else if (type == "Lowercase") {
    step.kind = K::kLowercase;
  } else if (type == "Strip") {
    step.kind = K::kStrip;
    step.strip_left = r.opt_bool(n, "strip_left", true, where);
    step.strip_right = r.opt_bool(n, "strip_right", true, where);
  } else {
    r.fail(where, fmt::format("unsupported normalizer type '{}' (supported: NFC, NFD, NFKC, NFKD, "
                              "Prepend, Replace, Lowercase, Strip, Sequence)",
                              type));
  }
  steps.push_back(std::move(step));
}

SplitBehavior read_behavior(const Reader& r, const json& v, const std::string& where) {
  const std::string b = r.string(v, where);
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  r.fail(where, fmt::format("unknown split behavior '{}'", b));
}

PreTokenizerStep::PrependScheme read_prepend_scheme(const Reader& r, const json& v,
                                                    const std::string& where) {
  // Newer files say prepend_scheme; older ones add_prefix_space.
  if (const auto s = r.opt_string(v, "prepend_scheme", where)) {
    if (*s == "always") return PreTokenizerStep::PrependScheme::kAlways;
    if (*s == "first") return PreTokenizerStep::PrependScheme::kFirst;
    if (*s == "never") return PreTokenizerStep::PrependScheme::kNever;
    r.fail(where + ".prepend_scheme", fmt::format("unknown value '{}'", *s));
  }
  return r.opt_bool(v, "add_prefix_space", true, where) ? PreTokenizerStep::PrependScheme::kAlways
                                                        : PreTokenizerStep::PrependScheme::kNever;
}

void read_pre_tokenizer(const Reader& r, const json& p, const std::string& where,
                        std::vector<PreTokenizerStep>& steps) {
  const std::string type = r.type_of(p, where);
  PreTokenizerStep step;
  using K = PreTokenizerStep::Kind;
  if (type == "Sequence") {
    for_each_in(r, p, "pretokenizers", where,
                [&](const json& e, const std::string& at) { read_pre_tokenizer(r, e, at, steps); });
    return;
  } else if (type == "Split") {
    step.kind = K::kSplit;
    step.regex = read_pattern(r, r.need(p, "pattern", where), where + ".pattern", nullptr);
    step.behavior = read_behavior(r, r.need(p, "behavior", where), where + ".behavior");
    step.invert = r.opt_bool(p, "invert", false, where);
  } else if (type == "ByteLevel") {
    step.kind = K::kByteLevel;
    step.add_prefix_space = r.opt_bool(p, "add_prefix_space", true, where);
    step.use_regex = r.opt_bool(p, "use_regex", true, where);
  } else if (type == "Digits") {
    step.kind = K::kDigits;
    step.individual_digits = r.opt_bool(p, "individual_digits", false, where);
  } else if (type == "Metaspace") {
    step.kind = K::kMetaspace;
    if (const auto rep = r.opt_string(p, "replacement", where)) step.replacement = *rep;
    step.prepend_scheme = read_prepend_scheme(r, p, where);
    step.split = r.opt_bool(p, "split", true, where);
  } else {
    r.fail(where, fmt::format("unsupported pre-tokenizer type '{}' (supported: Split, ByteLevel, "
                              "Digits, Metaspace, Sequence)",
                              type));
  }
  steps.push_back(std::move(step));
}

void read_decoder(const Reader& r, const json& d, const std::string& where,
                  std::vector<DecoderStep>& steps) {
  const std::string type = r.type_of(d, where);
  DecoderStep step;
  using K = DecoderStep::Kind;
  if (type == "Sequence") {
    for_each_in(r, d, "decoders", where,
                [&](const json& e, const std::string& at) { read_decoder(r, e, at, steps); });
    return;
  } else if (type == "ByteLevel") {
    step.kind = K::kByteLevel;
  } else if (type == "Replace") {
    step.kind = K::kReplace;
    const json& pattern = r.need(d, "pattern", where);
    const json* s = r.opt(pattern, "String");
    if (!s) r.fail(where + ".pattern", "only {\"String\": ...} patterns are supported in decoders");
    step.pattern = r.string(*s, where + ".pattern.String");
    step.content = r.need_string(d, "content", where);
  } else if (type == "ByteFallback") {
    step.kind = K::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = K::kFuse;
  } else if (type == "Strip") {
    step.kind = K::kStrip;
    step.content = r.need_string(d, "content", where);
    step.start =
        static_cast<size_t>(r.integer(r.need(d, "start", where), where + ".start", 0, 1 << 20));
    step.stop =
        static_cast<size_t>(r.integer(r.need(d, "stop", where), where + ".stop", 0, 1 << 20));
  } else if (type == "Metaspace") {
    step.kind = K::kMetaspace;
    if (const auto rep = r.opt_string(d, "replacement", where)) step.replacement = *rep;
    step.prepend = read_prepend_scheme(r, d, where) != PreTokenizerStep::PrependScheme::kNever;
  } else {
    r.fail(where, fmt::format("unsupported decoder type '{}' (supported: ByteLevel, Replace, "
                              "ByteFallback, Fuse, Strip, Metaspace, Sequence)",
                              type));
  }
  steps.push_back(std::move(step));
}

// Token ids of a TemplateProcessing special token, by its name in the template.
std::vector<int32_t> template_special_ids(const Reader& r, const json& special_tokens,
                                          const std::string& token_name, const std::string& where) {
  const json& entry = r.need(special_tokens, token_name.c_str(), where + ".special_tokens");
  const std::string w = where + ".special_tokens." + token_name;
  const json& ids = r.array(r.need(entry, "ids", w), w + ".ids");
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.size(); ++i)
    out.push_back(r.token_id(ids[i], fmt::format("{}.ids[{}]", w, i)));
  return out;
}

void read_post_processor(const Reader& r, const json& p, const std::string& where,
                         std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  const std::string type = r.type_of(p, where);
  if (type == "Sequence") {
    for_each_in(r, p, "processors", where, [&](const json& e, const std::string& at) {
      std::vector<int32_t> pre, suf;
      read_post_processor(r, e, at, pre, suf);
      prefix.insert(prefix.begin(), pre.begin(), pre.end());
      suffix.insert(suffix.end(), suf.begin(), suf.end());
    });
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    const json& single = r.array(r.need(p, "single", where), where + ".single");
    const json& special = r.need(p, "special_tokens", where);
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string w = fmt::format("{}.single[{}]", where, i);
      if (const json* seq = r.opt(single[i], "Sequence")) {
        if (r.need_string(*seq, "id", w + ".Sequence") != "A" || seen_sequence) {
          r.fail(w, "a single-sequence template must contain sequence A exactly once");
        }
        seen_sequence = true;
      } else if (const json* tok = r.opt(single[i], "SpecialToken")) {
        const auto ids =
            template_special_ids(r, special, r.need_string(*tok, "id", w + ".SpecialToken"), where);
        auto& dst = seen_sequence ? suffix : prefix;
        dst.insert(dst.end(), ids.begin(), ids.end());
      } else {
        r.fail(w, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) r.fail(where + ".single", "the template never places sequence A");
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    // "cls": [token, id], "sep": [token, id]  ->  [cls] A [sep]
    for (const char* key : {"cls", "sep"}) {
      const json& pair = r.array(r.need(p, key, where), where + "." + key);
      if (pair.size() != 2) r.fail(where + "." + key, "expected [token, id]");
      const int32_t id = r.token_id(pair[1], where + "." + key + "[1]");
      (std::string(key) == "cls" ? prefix : suffix).push_back(id);
    }
  } else {
    r.fail(where, fmt::format("unsupported post-processor type '{}' (supported: "
                              "TemplateProcessing, ByteLevel, BertProcessing, "
                              "RobertaProcessing, Sequence)",
                              type));
  }
}

void read_model(const Reader& r, const json& model, TokenizerSpec& spec) {
  const std::string where = "model";
  r.object(model, where);
  std::string type = "BPE";
  if (const auto t = r.opt_string(model, "type", where)) {
    type = *t;
  } else if (!r.opt(model, "merges")) {
    r.fail(where, "the model has no type and no merges; only BPE models are supported");
  }
  if (type != "BPE") {
    r.fail(where + ".type",
           fmt::format("unsupported model type '{}': only BPE tokenizers are supported", type));
  }
  const json& vocab = r.object(r.need(model, "vocab", where), where + ".vocab");
  spec.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    spec.vocab.emplace_back(token, r.token_id(id, where + ".vocab[\"" + token + "\"]"));
  }
  const json& merges = r.array(r.need(model, "merges", where), where + ".merges");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string w = fmt::format("{}.merges[{}]", where, i);
    if (m.is_string()) {
      // Old format: "a b" — exactly one space (tokens cannot contain spaces here).
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        r.fail(w, fmt::format("merge '{}' is not two tokens separated by one space", s));
      }
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2) {
      spec.merges.emplace_back(r.string(m[0], w + "[0]"), r.string(m[1], w + "[1]"));
    } else {
      r.fail(w, "expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  if (const json* dropout = r.opt(model, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      r.fail(where + ".dropout", "BPE dropout makes tokenization random and is not supported");
    }
  }
  spec.bpe.unk_token = r.opt_string(model, "unk_token", where);
  spec.bpe.fuse_unk = r.opt_bool(model, "fuse_unk", false, where);
  spec.bpe.byte_fallback = r.opt_bool(model, "byte_fallback", false, where);
  spec.bpe.ignore_merges = r.opt_bool(model, "ignore_merges", false, where);
  spec.bpe.continuing_subword_prefix =
      r.opt_string(model, "continuing_subword_prefix", where).value_or("");
  spec.bpe.end_of_word_suffix = r.opt_string(model, "end_of_word_suffix", where).value_or("");
}

void read_added_tokens(const Reader& r, const json& root, TokenizerSpec& spec) {
  const json* list = r.opt(root, "added_tokens");
  if (!list) return;
  r.array(*list, "added_tokens");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    const std::string w = fmt::format("added_tokens[{}]", i);
    AddedToken a;
    a.id = r.token_id(r.need(t, "id", w), w + ".id");
    a.content = r.need_string(t, "content", w);
    a.single_word = r.opt_bool(t, "single_word", false, w);
    a.lstrip = r.opt_bool(t, "lstrip", false, w);
    a.rstrip = r.opt_bool(t, "rstrip", false, w);
    a.special = r.opt_bool(t, "special", false, w);
    a.normalized = r.opt_bool(t, "normalized", !a.special, w);
    spec.added_tokens.push_back(std::move(a));
  }
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": "..."}.
std::optional<std::string> config_token(const Reader& r, const json& config, const char* key) {
  const json* v = r.opt(config, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return r.need_string(*v, "content", std::string("tokenizer_config.") + key);
  r.fail(std::string("tokenizer_config.") + key, "expected a string or {\"content\": ...}");
}

void read_config(const Reader& r, const json& config, TokenizerSpec& spec) {
  r.object(config, "tokenizer_config");
  spec.bos_token = config_token(r, config, "bos_token");
  spec.eos_token = config_token(r, config, "eos_token");
  if (const json* t = r.opt(config, "chat_template")) {
    if (t->is_string()) {
      spec.chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      // A list of named templates: use the one named "default".
      for (size_t i = 0; i < t->size(); ++i) {
        const std::string w = fmt::format("tokenizer_config.chat_template[{}]", i);
        if (r.need_string((*t)[i], "name", w) == "default") {
          spec.chat_template = r.need_string((*t)[i], "template", w);
        }
      }
    } else {
      r.fail("tokenizer_config.chat_template", "expected a string or a list of templates");
    }
  }
}

json parse_or_fail(std::string_view text, const std::string& name, const char* what) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw_error("{}: malformed {}: {}", name, what, e.what());
  }
}

}  // namespace

TokenizerSpec parse_tokenizer_json(std::string_view json_text, std::string_view config_json,
                                   const std::string& name) {
  TokenizerSpec spec;
  spec.name = name;
  const Reader r(spec.name);
  const json root = parse_or_fail(json_text, name, "tokenizer.json");
  r.object(root, "tokenizer.json");
  try {
    for (const char* key : {"truncation", "padding"}) {
      if (r.opt(root, key)) {
        r.fail(key, "is set; detllm does not truncate or pad at tokenization — set it to null");
      }
    }
    read_model(r, r.need(root, "model", "tokenizer.json"), spec);
    read_added_tokens(r, root, spec);
    if (const json* n = r.opt(root, "normalizer"))
      read_normalizer(r, *n, "normalizer", spec.normalizer);
    if (const json* p = r.opt(root, "pre_tokenizer")) {
      read_pre_tokenizer(r, *p, "pre_tokenizer", spec.pre_tokenizer);
    }
    if (const json* p = r.opt(root, "post_processor")) {
      read_post_processor(r, *p, "post_processor", spec.post_prefix, spec.post_suffix);
    }
    if (const json* d = r.opt(root, "decoder")) read_decoder(r, *d, "decoder", spec.decoder);
    if (!config_json.empty()) {
      read_config(r, parse_or_fail(config_json, name, "tokenizer_config.json"), spec);
    }
  } catch (const json::exception& e) {
    // Accessors check types first; this is a last guard against surprises in the library.
    throw_error("{}: unexpected JSON content: {}", name, e.what());
  }
  return spec;
}

namespace {

// The file's text, or nullopt when there is no file at `path`; anything there that is not a
// readable regular file (a FIFO, a directory) is refused by name, never waited on.
std::optional<std::string> read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !std::filesystem::is_symlink(path, ec)) {
    return std::nullopt;
  }
  return read_regular_file(path);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json_file(const std::string& tokenizer_json_path) {
  const auto json_text = read_file(tokenizer_json_path);
  if (!json_text) {
    throw_error("cannot read tokenizer file '{}': check that it exists and is readable",
                tokenizer_json_path);
  }
  const size_t slash = tokenizer_json_path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? std::string() : tokenizer_json_path.substr(0, slash + 1);
  const auto config_text = read_file(dir + "tokenizer_config.json");
  return from_spec(parse_tokenizer_json(*json_text, config_text.value_or(""), tokenizer_json_path));
}

std::unique_ptr<Tokenizer> Tokenizer::from_json_string(std::string_view json, std::string name,
                                                       std::string_view config_json) {
  return from_spec(parse_tokenizer_json(json, config_json, name));
}

}  // namespace detllm
