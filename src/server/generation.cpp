// Engine events -> choices (see generation.h).
#include "server/generation.h"

#include <algorithm>

#include "server/api_error.h"

namespace detllm::server {

Generation::Generation(EngineLoop& loop, const Tokenizer& tokenizer,
                       std::vector<engine::Request> requests, std::vector<PromptState> prompts,
                       std::vector<int32_t> kept_special_ids)
    : loop_(loop),
      tokenizer_(tokenizer),
      requests_(std::move(requests)),
      kept_special_ids_(std::move(kept_special_ids)),
      prompts_(std::move(prompts)) {
  n_ = requests_.empty() ? 1 : requests_[0].n;
  for (const auto& r : requests_) {
    stop_token_ids_.push_back(r.stop_token_ids);
    stop_strings_.push_back(r.stop);
  }
  choices_.resize(requests_.size() * static_cast<size_t>(n_));
  for (size_t i = 0; i < choices_.size(); ++i) {
    ChoiceState& c = choices_[i];
    c.index = static_cast<int32_t>(i);
    c.prompt_index = static_cast<int32_t>(i / static_cast<size_t>(n_));
    // Output text skips special tokens (EOS, chat markers), as OpenAI-compatible servers do.
    c.decoder = std::make_unique<StreamDecoder>(tokenizer_, /*skip_special_tokens=*/true);
    c.stop = StopFilter(requests_[static_cast<size_t>(c.prompt_index)].stop);
  }
}

void Generation::set_text_options(bool skip_special_tokens, bool include_stop_str) {
  for (ChoiceState& c : choices_) {
    c.decoder = std::make_unique<StreamDecoder>(tokenizer_, skip_special_tokens);
    c.stop = StopFilter(stop_strings_[static_cast<size_t>(c.prompt_index)], include_stop_str);
  }
}

Generation::~Generation() {
  if (ticket_) ticket_->set_notify(nullptr);
  if (ticket_ && !finished()) loop_.cancel(ticket_);
}

void Generation::set_notify(std::function<void()> notify) {
  if (ticket_) ticket_->set_notify(std::move(notify));
}

void Generation::cancel() {
  if (ticket_ && !finished()) loop_.cancel(ticket_);
}

void Generation::start() {
  t_submit_ = std::chrono::steady_clock::now();
  ticket_ = loop_.submit(std::move(requests_));
  requests_.clear();
  for (;;) {
    events_.clear();
    ticket_->wait_events(events_, std::chrono::milliseconds(200));
    for (size_t i = 0; i < events_.size(); ++i) {
      EngineEvent& e = events_[i];
      if (e.kind == EngineEvent::Kind::kRejected) {
        switch (e.rejection) {
          case EngineEvent::Rejection::kShuttingDown:
            throw ApiError(503, e.error, "service_unavailable");
          case EngineEvent::Rejection::kSelfCheckFailed:
            // The server cannot keep the determinism promise on this machine: 503 (another
            // replica may), naming the field that lets the client be served here.
            throw ApiError(503, e.error, "service_unavailable", "deterministic",
                           "self_check_failed");
          case EngineEvent::Rejection::kInvalid:
            break;
        }
        throw ApiError(400, e.error, "invalid_request_error");
      }
      if (e.kind == EngineEvent::Kind::kAccepted) {
        identity_ = e.identity;
        // Events queued behind the acceptance are applied now.
        for (size_t j = i + 1; j < events_.size(); ++j) apply(events_[j]);
        if (finished()) t_finished_ = std::chrono::steady_clock::now();
        return;
      }
    }
  }
}

bool Generation::poll(std::chrono::milliseconds timeout) {
  events_.clear();
  if (!ticket_->wait_events(events_, timeout)) return false;
  const bool was_finished = finished();
  for (auto& e : events_) apply(e);
  if (!was_finished && finished()) t_finished_ = std::chrono::steady_clock::now();
  return true;
}

Generation::Timings Generation::timings() const {
  using Sec = std::chrono::duration<double>;
  Timings t;
  if (ticket_ && ticket_->scheduled_ns() != 0) {
    const auto scheduled = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::nanoseconds(ticket_->scheduled_ns())));
    t.queue_s = std::max(0.0, Sec(scheduled - t_submit_).count());
  }
  if (got_token_) t.ttft_s = Sec(t_first_token_ - t_submit_).count();
  size_t longest = 0;
  for (const auto& c : choices_) longest = std::max(longest, c.tokens.size());
  if (got_token_ && longest > 1) {
    t.tpot_s = Sec(t_last_token_ - t_first_token_).count() / static_cast<double>(longest - 1);
  }
  if (finished() && t_finished_ != std::chrono::steady_clock::time_point{}) {
    t.e2e_s = Sec(t_finished_ - t_submit_).count();
  }
  return t;
}

void Generation::apply(EngineEvent& e) {
  const size_t p = static_cast<size_t>(e.prompt_index);
  switch (e.kind) {
    case EngineEvent::Kind::kAccepted:
      break;
    case EngineEvent::Kind::kRejected:
      error_ = e.error;
      break;
    case EngineEvent::Kind::kPromptLogprobs:
      prompts_[p].logprobs = std::move(e.prompt_logprobs);
      prompts_[p].logprobs_ready = true;
      break;
    case EngineEvent::Kind::kToken: {
      t_last_token_ = std::chrono::steady_clock::now();
      if (!got_token_) t_first_token_ = t_last_token_;
      got_token_ = true;
      ChoiceState& c = choices_[p * static_cast<size_t>(n_) + e.token.sample_index];
      const int32_t id = e.token.token;
      if (std::find(kept_special_ids_.begin(), kept_special_ids_.end(), id) !=
          kept_special_ids_.end()) {
        // A parser's marker token: the text so far, then the marker itself.
        c.text += c.stop.push(c.decoder->flush());
        c.text += c.stop.push(tokenizer_.decode(std::span(&id, 1), false));
      } else {
        c.text += c.stop.push(c.decoder->push(id));
      }
      c.tokens.push_back(std::move(e.token));
      break;
    }
    case EngineEvent::Kind::kFinish: {
      ChoiceState& c = choices_[p * static_cast<size_t>(n_) + e.sample_index];
      if (c.finish) break;
      c.text += c.stop.push(c.decoder->flush());
      c.text += c.stop.finish();
      c.finish = c.stop.stopped() ? engine::FinishReason::kStop : e.reason;
      if (c.stop.stopped()) {
        c.stop_string = c.stop.matched();
      } else if (e.reason == engine::FinishReason::kStop && !c.tokens.empty()) {
        const auto& ids = stop_token_ids_[p];
        const int32_t last = c.tokens.back().token;
        if (std::find(ids.begin(), ids.end(), last) != ids.end()) c.stop_token = last;
      }
      c.completion_tokens = e.usage.completion_tokens;
      if (e.sample_index == 0) prompts_[p].cached_tokens = e.usage.cached_tokens;
      ++n_finished_;
      break;
    }
  }
}

int32_t Generation::prompt_tokens() const {
  int32_t s = 0;
  for (const auto& p : prompts_) s += static_cast<int32_t>(p.ids.size());
  return s;
}

int32_t Generation::completion_tokens() const {
  int32_t s = 0;
  for (const auto& c : choices_) s += c.completion_tokens;
  return s;
}

int32_t Generation::cached_tokens() const {
  int32_t s = 0;
  for (const auto& p : prompts_) s += p.cached_tokens;
  return s;
}

}  // namespace detllm::server
