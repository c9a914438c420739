// The draft-model drafter (see draft_model_drafter.h for the rule).
#include "engine/draft_model_drafter.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace detllm::engine {

DraftModelDrafter::DraftModelDrafter(const LlamaModel& draft, int32_t n_blocks, int32_t block_size)
    : draft_(draft),
      kv_(draft.ops(), draft.config(), n_blocks, block_size),
      block_size_(block_size) {
  free_.resize(static_cast<size_t>(n_blocks));
  // A stack whose top is block 0: blocks are handed out in ascending order.
  std::iota(free_.rbegin(), free_.rend(), 0);
}

bool DraftModelDrafter::reserve(Slot& s, int32_t n_tokens) {
  const size_t need = static_cast<size_t>((n_tokens + block_size_ - 1) / block_size_);
  if (need <= s.blocks.size()) return true;
  if (need - s.blocks.size() > free_.size()) return false;
  while (s.blocks.size() < need) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void DraftModelDrafter::forget(SeqId seq) {
  auto it = slots_.find(seq);
  if (it == slots_.end()) return;
  free_.insert(free_.end(), it->second.blocks.rbegin(), it->second.blocks.rend());
  slots_.erase(it);
}

void DraftModelDrafter::forward(std::span<Slot* const> slots,
                                std::span<const std::vector<int32_t>> feeds,
                                std::span<int32_t> out) {
  const int32_t n_seqs = static_cast<int32_t>(slots.size());
  int32_t max_blocks = 1;
  for (const Slot* s : slots)
    max_blocks = std::max(max_blocks, static_cast<int32_t>(s->blocks.size()));
  std::vector<int32_t> tokens, positions, seq_of_token, kv_slots, rows;
  std::vector<int32_t> tables(static_cast<size_t>(n_seqs) * max_blocks, 0);
  for (int32_t i = 0; i < n_seqs; ++i) {
    Slot& s = *slots[i];
    std::copy(s.blocks.begin(), s.blocks.end(),
              tables.begin() + static_cast<size_t>(i) * max_blocks);
    for (int32_t t : feeds[i]) {
      const int32_t pos = static_cast<int32_t>(s.tokens.size());
      tokens.push_back(t);
      positions.push_back(pos);
      seq_of_token.push_back(i);
      kv_slots.push_back(s.blocks[pos / block_size_] * block_size_ + pos % block_size_);
      s.tokens.push_back(t);
    }
    rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
  }
  kernels::StepBatch batch;
  batch.n_tokens = static_cast<int32_t>(tokens.size());
  batch.positions = positions.data();
  batch.seq_of_token = seq_of_token.data();
  batch.slots = kv_slots.data();
  batch.n_seqs = n_seqs;
  batch.max_blocks = max_blocks;
  batch.block_tables = tables.data();
  // Eager, unpadded: the draft cache has no pad slots (its steps are never captured).
  draft_.forward(tokens, batch, rows, kv_, logits_, DecodePadding{GraphMode::kOff, 0});
  ++n_forwards_;
  n_rows_ += batch.n_tokens;
  const size_t vocab = static_cast<size_t>(draft_.config().vocab_size);
  for (int32_t i = 0; i < n_seqs; ++i) {
    const float* row = logits_.data() + static_cast<size_t>(i) * vocab;
    // Greedy: the first maximum (lowest id on ties), as the sampler's argmax.
    out[i] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  }
}

std::vector<std::vector<int32_t>> DraftModelDrafter::propose(std::span<const Want> wants) {
  std::vector<std::vector<int32_t>> drafts(wants.size());
  // Round 0: each sequence's tokens the draft cache lacks, from the longest common prefix on
  // (at least the last token: its row gives d1).
  std::vector<size_t> live;  // indices into wants still drafting
  std::vector<Slot*> slots;
  std::vector<std::vector<int32_t>> feeds;
  for (size_t w = 0; w < wants.size(); ++w) {
    const Want& want = wants[w];
    check(!want.tokens.empty() && want.k >= 1, "DraftModelDrafter: {} tokens, k = {}",
          want.tokens.size(), want.k);
    Slot& s = slots_[want.seq];
    const size_t n = want.tokens.size();
    size_t common = 0;
    const size_t limit = std::min(s.tokens.size(), n - 1);
    while (common < limit && s.tokens[common] == want.tokens[common]) ++common;
    s.tokens.resize(common);  // the rest of the cache (rejected drafts) is overwritten
    // Room for the tokens and the k - 1 drafts fed after them.
    if (!reserve(s, static_cast<int32_t>(n) + want.k - 1)) continue;
    live.push_back(w);
    slots.push_back(&s);
    feeds.emplace_back(want.tokens.begin() + static_cast<std::ptrdiff_t>(common),
                       want.tokens.end());
  }
  std::vector<int32_t> next(live.size());
  for (int32_t round = 0; !live.empty(); ++round) {
    forward(slots, feeds, next);
    std::vector<size_t> still;
    std::vector<Slot*> still_slots;
    std::vector<std::vector<int32_t>> still_feeds;
    for (size_t i = 0; i < live.size(); ++i) {
      std::vector<int32_t>& d = drafts[live[i]];
      d.push_back(next[i]);
      if (static_cast<int32_t>(d.size()) < wants[live[i]].k) {
        still.push_back(live[i]);
        still_slots.push_back(slots[i]);
        still_feeds.push_back({next[i]});
      }
    }
    live = std::move(still);
    slots = std::move(still_slots);
    feeds = std::move(still_feeds);
    next.resize(live.size());
  }
  return drafts;
}

}  // namespace detllm::engine
