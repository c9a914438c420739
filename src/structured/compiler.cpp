#include "structured/compiler.h"

#include <nlohmann/json.hpp>

#include <future>
#include <thread>
#include <xgrammar/xgrammar.h>

#include "core/unicode.h"
#include "structured/choice_grammar.h"
#include "structured/xgrammar_impl.h"

namespace detllm::structured {

const char* kind_name(GrammarSpec::Kind kind) {
  switch (kind) {
    case GrammarSpec::Kind::kJsonSchema: return "json_schema";
    case GrammarSpec::Kind::kJsonObject: return "json_object";
    case GrammarSpec::Kind::kRegex: return "regex";
    case GrammarSpec::Kind::kChoice: return "choice";
    case GrammarSpec::Kind::kEbnf: return "grammar";
    case GrammarSpec::Kind::kStructuralTag: return "structural_tag";
  }
  return "grammar";
}

GrammarSpec::Kind CompiledGrammar::kind() const { return impl_->kind; }
int32_t CompiledGrammar::mask_width() const { return impl_->mask_width; }
size_t CompiledGrammar::memory_bytes() const { return impl_->grammar.MemorySizeBytes(); }

struct GrammarCompiler::Impl {
  xgrammar::GrammarCompiler compiler;
  int32_t mask_width;
  std::vector<int32_t> stop_ids;
};

namespace {

xgrammar::TokenizerInfo tokenizer_info(const GrammarVocabulary& v) {
  // RAW: the strings are the tokens' bytes already (Tokenizer::token_bytes); "" marks a special
  // or absent id, which xgrammar never allows except as a stop token.
  return xgrammar::TokenizerInfo(v.token_bytes, xgrammar::VocabType::RAW, v.mask_width,
                                 v.stop_ids, false);
}

[[noreturn]] void fail(GrammarSpec::Kind kind, const std::string& what) {
  throw GrammarError(fmt::format("{}: {}", kind_name(kind), what));
}

// The library's message without its source location prefix ("[time] file.cc:123: ").
std::string library_message(const std::exception& e) {
  std::string m = e.what();
  if (!m.empty() && m[0] == '[') {
    if (const size_t close = m.find("] "); close != std::string::npos) m = m.substr(close + 2);
    if (const size_t colon = m.find(": "); colon != std::string::npos &&
        m.substr(0, colon).find(".cc:") != std::string::npos) {
      m = m.substr(colon + 2);
    }
  }
  // "Check failed: (cond) is false: <message>": the message alone.
  if (m.rfind("Check failed: ", 0) == 0) {
    if (const size_t at = m.find(" is false: "); at != std::string::npos) m = m.substr(at + 11);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

// Checks sizes and what we can check better than the library (JSON syntax with a byte
// offset, UTF-8); throws GrammarError.
void precheck(const GrammarSpec& spec, const CompileLimits& limits) {
  const auto kind = spec.kind;
  if (kind == GrammarSpec::Kind::kChoice) {
    if (spec.choices.empty()) fail(kind, "no choices given");
    if (spec.choices.size() > limits.max_choices) {
      fail(kind, fmt::format("{} choices, more than the limit of {}", spec.choices.size(),
                             limits.max_choices));
    }
    size_t total = 0;
    for (size_t k = 0; k < spec.choices.size(); ++k) {
      total += spec.choices[k].size();
      if (spec.choices[k].empty()) fail(kind, fmt::format("choice {} is empty", k));
      if (const auto bad = unicode::find_invalid_utf8(spec.choices[k])) {
        fail(kind, fmt::format("choice {} is not valid UTF-8 at byte {}", k, *bad));
      }
    }
    if (total > limits.max_choice_bytes) {
      fail(kind, fmt::format("the choices hold {} bytes, more than the limit of {}", total,
                             limits.max_choice_bytes));
    }
    return;
  }
  if (kind == GrammarSpec::Kind::kJsonObject) return;
  if (spec.text.empty()) fail(kind, "empty");
  if (spec.text.size() > limits.max_text_bytes) {
    fail(kind, fmt::format("{} bytes, more than the limit of {}", spec.text.size(),
                           limits.max_text_bytes));
  }
  if (const auto bad = unicode::find_invalid_utf8(spec.text)) {
    fail(kind, fmt::format("not valid UTF-8 at byte {}", *bad));
  }
  if (kind == GrammarSpec::Kind::kJsonSchema || kind == GrammarSpec::Kind::kStructuralTag) {
    try {
      const auto doc = nlohmann::json::parse(spec.text);
      if (kind == GrammarSpec::Kind::kJsonSchema && !doc.is_object() && !doc.is_boolean()) {
        fail(kind, fmt::format("a schema is a JSON object (or true/false), not {}",
                               doc.type_name()));
      }
    } catch (const nlohmann::json::parse_error& e) {
      fail(kind, fmt::format("not valid JSON at byte {}: {}", e.byte, e.what()));
    }
  }
}

// JSON: any whitespace between tokens (pretty-printed output included), but at most this many
// characters of it in a row — unbounded whitespace lets a model loop on newlines until
// max_tokens cuts the document.
constexpr int kMaxWhitespace = 16;

xgrammar::CompiledGrammar run_library(xgrammar::GrammarCompiler& c, const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarSpec::Kind::kJsonSchema:
      return c.CompileJSONSchema(spec.text, /*any_whitespace=*/true, std::nullopt, std::nullopt,
                                 spec.strict, kMaxWhitespace);
    case GrammarSpec::Kind::kJsonObject:
      return c.CompileJSONSchema(R"({"type": "object"})", true, std::nullopt, std::nullopt,
                                 /*strict_mode=*/false, kMaxWhitespace);
    case GrammarSpec::Kind::kRegex:
      return c.CompileRegex(spec.text);
    case GrammarSpec::Kind::kChoice:
      return c.CompileGrammar(choice_grammar(spec.choices), "root");
    case GrammarSpec::Kind::kEbnf:
      return c.CompileGrammar(spec.text, "root");
    case GrammarSpec::Kind::kStructuralTag:
      return c.CompileStructuralTag(spec.text);
  }
  throw GrammarError("unknown grammar kind");
}

}  // namespace

GrammarCompiler::GrammarCompiler(const GrammarVocabulary& vocabulary, int threads,
                                 int64_t cache_bytes)
    : impl_(std::make_shared<Impl>(Impl{
          xgrammar::GrammarCompiler(tokenizer_info(vocabulary), threads > 0 ? threads : 1,
                                    cache_bytes > 0, cache_bytes > 0 ? cache_bytes : -1),
          vocabulary.mask_width, vocabulary.stop_ids})),
      mask_width_(vocabulary.mask_width) {}

GrammarCompiler::~GrammarCompiler() = default;

CompiledGrammar GrammarCompiler::compile(const GrammarSpec& spec,
                                         const CompileLimits& limits) const {
  precheck(spec, limits);
  // The library runs on its own thread so that the caller waits at most max_time; the thread
  // holds the compiler (shared) and the spec (copied), so it may outlive this call.
  auto done = std::make_shared<std::promise<xgrammar::CompiledGrammar>>();
  std::future<xgrammar::CompiledGrammar> result = done->get_future();
  std::thread([impl = impl_, spec, done] {
    try {
      done->set_value(run_library(impl->compiler, spec));
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (result.wait_for(limits.max_time) != std::future_status::ready) {
    fail(spec.kind, fmt::format("compilation took longer than the limit of {} ms",
                                limits.max_time.count()));
  }
  try {
    return CompiledGrammar(std::make_shared<const CompiledGrammar::Impl>(
        CompiledGrammar::Impl{result.get(), spec.kind, impl_->mask_width, impl_->stop_ids}));
  } catch (const GrammarError&) {
    throw;
  } catch (const std::exception& e) {
    fail(spec.kind, library_message(e));
  }
}

}  // namespace detllm::structured
