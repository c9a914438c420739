// BPE model (see bpe.h). The merge loop follows Hugging Face's Word::merge_all step for step
// (same heap order, same staleness check), so ties resolve identically and ids match exactly.
#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "core/error.h"
#include "core/unicode.h"

namespace detllm {
namespace {

// One symbol of a word being merged; the live symbols form a doubly linked list by index.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes of the word it covers; 0 marks a symbol merged into its left neighbour
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t new_id;
};

// Heap order: lowest rank first, then leftmost position.
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};

void add_symbol(std::vector<Symbol>& symbols, int32_t id, uint32_t len) {
  const auto index = static_cast<int32_t>(symbols.size());
  if (index > 0) symbols.back().next = index;
  symbols.push_back({id, index - 1, -1, len});
}

}  // namespace

BpeModel::BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : options_(std::move(options)) {
  vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (auto& [token, id] : vocab) {
    check(id >= 0, "token '{}' has a negative id {}", token, id);
    max_id = std::max(max_id, id);
    vocab_.insert_or_assign(std::move(token), id);
  }
  check(!vocab_.empty(), "the vocabulary is empty");
  // Ids index a dense table; real vocabularies number their tokens 0..n-1 (or nearly).
  check(static_cast<size_t>(max_id) < 2 * vocab_.size() + (1u << 20),
        "token ids are too sparse: the largest is {} for {} tokens", max_id, vocab_.size());
  id_to_token_.assign(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = &token;

  const size_t prefix_len = options_.continuing_subword_prefix.size();
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = token_to_id(a), ib = token_to_id(b);
    check(ia && ib, "merge #{} '{} {}' uses a token that is not in the vocabulary", rank, a, b);
    check(b.size() >= prefix_len, "merge #{} '{} {}' lacks the continuing-subword prefix", rank, a,
          b);
    const std::string merged = a + b.substr(prefix_len);
    const auto id = token_to_id(merged);
    check(id.has_value(), "merge #{} '{} {}' makes '{}', which is not in the vocabulary", rank, a,
          b, merged);
    // A repeated pair keeps its last rank, as a HashMap built from the list does in HF.
    merges_[pair_key(*ia, *ib)] = {static_cast<int32_t>(rank), *id};
  }

  for (int b = 0; b < 256; ++b) {
    const auto id = token_to_id(fmt::format("<0x{:02X}>", b));
    byte_token_ids_[b] = id ? *id : -1;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  return id_to_token_[static_cast<size_t>(id)];
}

const BpeModel::MergeTarget* BpeModel::find_merge(int32_t a, int32_t b) const {
  const auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = token_to_id(word)) {
      ids.push_back(*id);
      return;
    }
  }

  // 1. One symbol per code point (with the subword prefix / word suffix), or its byte tokens,
  //    or unk.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  int32_t pending_unk = -1;  // an unk symbol not yet added (-1: none), and its byte length
  uint32_t pending_unk_len = 0;
  const bool decorate =
      !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty();
  std::string decorated;
  size_t i = 0;
  while (i < word.size()) {
    const size_t begin = i;
    unicode::next_code_point(word, i);
    const auto byte_len = static_cast<uint32_t>(i - begin);
    std::string_view s = word.substr(begin, byte_len);
    if (decorate) {
      decorated.clear();
      if (begin != 0) decorated += options_.continuing_subword_prefix;
      decorated += s;
      if (i == word.size()) decorated += options_.end_of_word_suffix;
      s = decorated;
    }
    if (const auto id = token_to_id(s)) {
      if (pending_unk >= 0) {
        add_symbol(symbols, pending_unk, pending_unk_len);
        pending_unk = -1;
      }
      add_symbol(symbols, *id, byte_len);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : s) all = all && byte_token_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : s) add_symbol(symbols, byte_token_ids_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (!options_.unk_token) {
      throw_error(
          "cannot tokenize '{}': it is not in the vocabulary and the model has no unk "
          "token or byte fallback",
          s);
    }
    const auto unk_id = token_to_id(*options_.unk_token);
    check(unk_id.has_value(), "the unk token '{}' is not in the vocabulary", *options_.unk_token);
    if (pending_unk >= 0 && options_.fuse_unk) {
      pending_unk_len += byte_len;
    } else {
      if (pending_unk >= 0) add_symbol(symbols, pending_unk, pending_unk_len);
      pending_unk = *unk_id;
      pending_unk_len = byte_len;
    }
  }
  if (pending_unk >= 0) add_symbol(symbols, pending_unk, pending_unk_len);

  // 2. Merge: repeatedly apply the lowest-ranked adjacent pair (leftmost on ties).
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> queue;
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const MergeTarget* m = find_merge(symbols[k].id, symbols[k + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(k), m->new_id});
    }
  }
  const auto n = static_cast<int32_t>(symbols.size());
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.len == 0 || left.next == -1) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[static_cast<size_t>(right_pos)];
    // Stale entry: the pair at this position no longer makes the same token.
    const MergeTarget* m = find_merge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;

    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[static_cast<size_t>(right_pos)].len = 0;
    if (right.next > -1 && right.next < n) symbols[static_cast<size_t>(right.next)].prev = top.pos;

    if (left.prev >= 0) {
      if (const MergeTarget* pm = find_merge(symbols[static_cast<size_t>(left.prev)].id, left.id)) {
        queue.push({pm->rank, left.prev, pm->new_id});
      }
    }
    if (left.next > -1 && left.next < n) {
      if (const MergeTarget* nm = find_merge(left.id, symbols[static_cast<size_t>(left.next)].id)) {
        queue.push({nm->rank, top.pos, nm->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
}

}  // namespace detllm
