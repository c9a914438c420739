// Speculative decoding in the engine (see engine.h, docs/speculative.md): drafts (n-gram
// lookup or a draft model) are put after a sample's last committed token before the step is
// scheduled; after the forward, the rows over the last token and the drafts give one draw per
// position on the request's own Philox stream, and the verdict (draft_verdict.h) keeps each
// draft that equals its draw. How many drafts a window asks for is the sample's DraftPolicy.
#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/ngram_drafter.h"

namespace detllm::engine {
namespace {

// Matmul weights one token's forward reads (attention projections, MLP or the experts it is
// routed to, lm_head): a decode step's cost on a backend bound by them.
double matmul_weights_per_token(const ModelConfig& c) {
  const double attn =
      static_cast<double>(c.dim) * (2.0 * c.n_heads + 2.0 * c.n_kv_heads) * c.head_dim;
  const double mlp = c.moe.active()
                         ? 3.0 * c.dim *
                               (static_cast<double>(c.moe.n_experts_used) * c.moe.expert_ffn_dim +
                                c.moe.shared_expert_ffn_dim)
                         : 3.0 * c.dim * c.ffn_dim;
  return c.n_layers * (attn + mlp) + static_cast<double>(c.vocab_size) * c.dim;
}

}  // namespace

bool Engine::drafts_for(const Request& req) const {
  return config_.speculative.enabled() && req.speculation && req.max_tokens > 0 && !req.constraint;
}

void Engine::set_up_draft_model(const LlamaModel* draft_model) {
  const SpeculativeConfig& sc = config_.speculative;
  if (sc.method != SpeculativeMethod::kDraftModel) {
    check(draft_model == nullptr,
          "a draft model was given but the speculative method is '{}': use --speculative-method "
          "draft_model (or give no draft model)",
          speculative_method_name(sc.method));
    return;
  }
  check(draft_model != nullptr,
        "speculative method draft_model needs a draft model: give it with --speculative-model "
        "PATH (a smaller model with the same tokenizer)");
  const ModelConfig& target = model_.config();
  const ModelConfig& draft = draft_model->config();
  check(draft.vocab_size == target.vocab_size,
        "the draft model's vocabulary ({} tokens) is not the target model's ({} tokens): a draft "
        "model must share the target's tokenizer",
        draft.vocab_size, target.vocab_size);
  check(draft.max_position >= config_.max_model_len,
        "the draft model's context ({} tokens) is shorter than max_model_len ({}): lower "
        "--max-model-len to at most {}",
        draft.max_position, config_.max_model_len, draft.max_position);
  draft_cost_ = matmul_weights_per_token(draft) / matmul_weights_per_token(target);
  // As many draft KV tokens as the target's pool: every running sequence can draft.
  draft_model_drafter_ = std::make_unique<DraftModelDrafter>(
      *draft_model, config_.scheduler.kv.n_blocks, config_.scheduler.kv.block_size);
}

void Engine::propose_drafts() {
  const SpeculativeConfig& sc = config_.speculative;
  const NgramDrafterConfig ngram{sc.prompt_lookup_min, sc.prompt_lookup_max};
  std::vector<DraftModelDrafter::Want> wants;
  for (auto& [rid, r] : requests_) {
    // Before the fork the first token is still to draw (n samples draw it from one row).
    if (!r.drafting || !r.forked) continue;
    for (SampleState& st : r.samples) {
      if (st.done || st.seq < 0) continue;
      const Sequence& q = scheduler_.sequence(st.seq);
      // A plain decode comes next: only the last token, committed, is left to compute.
      if (q.status != SeqStatus::kRunning || q.n_uncomputed() != 1 ||
          q.n_committed != q.n_tokens()) {
        continue;
      }
      // A window still counted here never finished (a preemption dropped its drafts).
      st.window_proposed = st.window_accepted = 0;
      // Room for the drafts and the draw after them below max_new_tokens.
      const int32_t k = std::min(st.draft_policy.draft_length(q.n_generated()),
                                 q.options.max_new_tokens - q.n_generated() - 1);
      if (k <= 0) continue;
      if (draft_model_drafter_) {
        wants.push_back({st.seq, q.tokens, k});
        continue;
      }
      const std::vector<int32_t> drafts = propose_ngram_drafts(q.tokens, ngram, k);
      if (drafts.empty()) continue;
      scheduler_.append_drafts(st.seq, drafts);
      st.window_proposed = static_cast<int32_t>(drafts.size());
      stats_.n_draft_tokens += static_cast<int64_t>(drafts.size());
      ++stats_.n_drafts;
    }
  }
  if (wants.empty()) return;
  const int64_t forwards = draft_model_drafter_->n_forwards();
  const std::vector<std::vector<int32_t>> drafts = draft_model_drafter_->propose(wants);
  stats_.n_drafter_forwards += draft_model_drafter_->n_forwards() - forwards;
  for (size_t i = 0; i < wants.size(); ++i) {
    if (drafts[i].empty()) continue;
    scheduler_.append_drafts(wants[i].seq, drafts[i]);
    const auto [rid, sample_index] = seq_owner_.at(wants[i].seq);
    requests_.at(rid).samples[sample_index].window_proposed =
        static_cast<int32_t>(drafts[i].size());
    stats_.n_draft_tokens += static_cast<int64_t>(drafts[i].size());
    ++stats_.n_drafts;
  }
}

void Engine::handle_draft_rows(RequestId rid, RequestState& r, int32_t sample_index,
                               const ScheduledSeq& s, std::span<const SampleResult> draws) {
  const Sequence& q = scheduler_.sequence(s.id);
  const int32_t first = first_verified_position(q, s);
  if (first < q.n_tokens() && first <= s.first_pos + s.n_tokens) ++stats_.n_draft_windows;
  // The window's drafts accepted in earlier steps (a window verified over several).
  const int32_t accepted_before = r.samples[sample_index].window_accepted;
  Verdict v;
  with_sink(rid, r, sample_index, s,
            [&](VerdictSink& sink) { v = apply_verdict(scheduler_, s, draws, sink); });
  stats_.n_accepted_draft_tokens += v.n_accepted;
  std::vector<int64_t>& per_pos = stats_.n_accepted_draft_tokens_per_pos;
  for (int32_t i = accepted_before; i < accepted_before + v.n_accepted; ++i) {
    if (static_cast<size_t>(i) >= per_pos.size()) per_pos.resize(static_cast<size_t>(i) + 1, 0);
    ++per_pos[static_cast<size_t>(i)];
  }
  // r may be gone (the verdict finished its last sample); a finished sample needs no policy.
  auto owner = seq_owner_.find(s.id);
  if (owner == seq_owner_.end()) return;
  SampleState& st = requests_.at(owner->second.first).samples[owner->second.second];
  if (st.window_proposed == 0) return;
  st.window_accepted += v.n_accepted;
  const Sequence& after = scheduler_.sequence(s.id);
  if (after.n_committed != after.n_tokens()) return;  // drafts left: the window goes on
  const int32_t pauses = st.draft_policy.n_pauses();
  st.draft_policy.on_window(st.window_proposed, st.window_accepted, after.n_generated());
  stats_.n_draft_pauses += st.draft_policy.n_pauses() - pauses;
  st.window_proposed = st.window_accepted = 0;
}

}  // namespace detllm::engine
