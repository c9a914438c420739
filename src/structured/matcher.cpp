#include "structured/matcher.h"

#include <algorithm>

#include "structured/xgrammar_impl.h"

namespace detllm::structured {

struct Matcher::Impl {
  xgrammar::GrammarMatcher matcher;  // shares the compiled grammar (the library's own pointer)
  int32_t mask_width;
};

namespace {

// max_rollback_tokens -1: the whole history is kept, so any accepted token can be rolled back.
xgrammar::GrammarMatcher make_matcher(const CompiledGrammar::Impl& g) {
  return xgrammar::GrammarMatcher(g.grammar, g.stop_ids, /*terminate_without_stop_token=*/false,
                                  /*max_rollback_tokens=*/-1);
}

}  // namespace

Matcher::Matcher(const CompiledGrammar& grammar)
    : impl_(std::make_unique<Impl>(
          Impl{make_matcher(grammar.impl()), grammar.mask_width()})) {}

Matcher::Matcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

Matcher Matcher::from_tokens(const CompiledGrammar& grammar, std::span<const int32_t> tokens) {
  Matcher m(grammar);
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (!m.accept_token(tokens[k])) {
      throw GrammarError(fmt::format("{}: token {} (id {}) is not allowed by the grammar",
                                     kind_name(grammar.kind()), k, tokens[k]));
    }
  }
  return m;
}

Matcher Matcher::fork() const {
  Matcher m(std::make_unique<Impl>(Impl{impl_->matcher.Fork(), impl_->mask_width}));
  m.n_accepted_ = n_accepted_;
  return m;
}

int32_t Matcher::mask_width() const { return impl_->mask_width; }

bool Matcher::fill_next_token_bitmask(std::span<uint32_t> words) {
  const size_t n = bitmask_words(impl_->mask_width);
  check(words.size() == n, "grammar bitmask: {} words given, {} needed for {} ids", words.size(),
        n, impl_->mask_width);
  if (impl_->matcher.IsTerminated()) {
    std::fill(words.begin(), words.end(), 0u);
    return false;
  }
  int64_t shape[1] = {static_cast<int64_t>(n)};
  DLTensor t{};
  t.data = words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  impl_->matcher.FillNextTokenBitmask(&t);
  // Ids past the mask width (the last word's padding) are never allowed.
  if (const int r = impl_->mask_width % 32) words[n - 1] &= (uint32_t{1} << r) - 1;
  return std::any_of(words.begin(), words.end(), [](uint32_t w) { return w != 0; });
}

bool Matcher::accept_token(int32_t id) {
  if (id < 0 || id >= impl_->mask_width || impl_->matcher.IsTerminated()) return false;
  if (!impl_->matcher.AcceptToken(id)) return false;
  ++n_accepted_;
  return true;
}

void Matcher::rollback(int32_t n) {
  check(n >= 0 && n <= n_accepted_, "grammar matcher: cannot roll back {} of {} accepted tokens",
        n, n_accepted_);
  if (n == 0) return;
  impl_->matcher.Rollback(n);
  n_accepted_ -= n;
}

bool Matcher::is_terminated() const { return impl_->matcher.IsTerminated(); }

void Matcher::reset() {
  impl_->matcher.Reset();
  n_accepted_ = 0;
}

}  // namespace detllm::structured
