// Generation: the HTTP side of one completion request — its engine Ticket and the choices it
// produces. It applies engine events as they arrive: token ids and logprobs, incremental
// detokenization (StreamDecoder) and stop-string cutting (StopFilter), and keeps cursors of
// what was already streamed. Runs on the HTTP thread; the engine thread only pushes events.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/engine_loop.h"
#include "server/stop_filter.h"
#include "tokenizer/tokenizer.h"

namespace detllm::server {

struct PromptState {
  std::vector<int32_t> ids;                     // (n_prompt) prompt token ids
  std::string text;                             // the prompt as text (given, or decoded from ids)
  std::vector<engine::PromptLogprob> logprobs;  // (n_prompt - 1) when asked (echo + logprobs)
  bool logprobs_ready = false;                  // the prompt-logprobs event arrived
  int32_t cached_tokens = 0;                    // prefix-cache hits
};

struct ChoiceState {
  int32_t index = 0;  // OpenAI choice index: prompt_index * n + sample_index
  int32_t prompt_index = 0;
  std::vector<engine::TokenEvent> tokens;  // every generated token (id, logprob, top)
  std::string text;                        // text released so far (cut at a stop string)
  std::optional<engine::FinishReason> finish;
  // Why a `stop` finish stopped, as vLLM's stop_reason: the stop string, or the stop token id
  // (from stop_token_ids); none for the end-of-text token or a `length` finish.
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token;
  int32_t completion_tokens = 0;
  // Streaming cursors: what the client has been sent.
  size_t n_tokens_sent = 0;
  size_t n_text_sent = 0;
  bool finish_sent = false;
  bool echo_sent = false;  // completions + echo: the prompt chunk went out
  size_t text_offset = 0;  // completions logprobs: text_offset of the next token

  std::unique_ptr<StreamDecoder> decoder;
  StopFilter stop;
};

class Generation {
 public:
  // prompts[i] is the prompt of requests[i]; every request has the same n and stop strings.
  // Output text skips special tokens except `kept_special_ids` (an output parser's markers,
  // e.g. mistral's [TOOL_CALLS]), which appear as their text.
  Generation(EngineLoop& loop, const Tokenizer& tokenizer, std::vector<engine::Request> requests,
             std::vector<PromptState> prompts, std::vector<int32_t> kept_special_ids = {});
  ~Generation();  // cancels the ticket when not finished
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Submits and waits for the engine's verdict. Throws ApiError: 400 with the engine's
  // message when the requests are refused (e.g. they can never fit in the KV cache), 503
  // while shutting down, 503 code "self_check_failed" for a deterministic request when the
  // startup self-check failed.
  void start();
  // Waits up to `timeout` for events and applies them; true when something changed.
  bool poll(std::chrono::milliseconds timeout);
  bool finished() const { return n_finished_ == choices_.size() || !error_.empty(); }
  // Before start(): output text with or without special tokens (default without), and with the
  // matched stop string kept (default cut before it).
  void set_text_options(bool skip_special_tokens, bool include_stop_str);
  // Aborts the engine requests (client gone, server stopping). Idempotent.
  void cancel();
  // See ResponseStream::set_notify; after start().
  void set_notify(std::function<void()> notify);
  // A failure after the requests were accepted (an engine error); "" if none.
  const std::string& error() const { return error_; }
  // After start(): the weights every request of this generation runs on.
  const std::shared_ptr<const WeightIdentity>& identity() const { return identity_; }

  std::vector<ChoiceState>& choices() { return choices_; }
  const std::vector<PromptState>& prompts() const { return prompts_; }
  int32_t n() const { return n_; }
  int32_t prompt_tokens() const;      // sum over prompts
  int32_t completion_tokens() const;  // sum over choices
  int32_t cached_tokens() const;      // sum over prompts
  // Latencies in seconds (vLLM's meanings), -1 where not known: queue (submitted -> first
  // scheduled), time to first token, time per output token after the first (longest
  // choice), end to end (submitted -> finished).
  struct Timings {
    double queue_s = -1.0;
    double ttft_s = -1.0;
    double tpot_s = -1.0;
    double e2e_s = -1.0;
  };
  Timings timings() const;

 private:
  void apply(EngineEvent& e);

  EngineLoop& loop_;
  const Tokenizer& tokenizer_;
  std::vector<engine::Request> requests_;  // until start()
  std::vector<std::vector<int32_t>> stop_token_ids_;  // per prompt
  std::vector<std::vector<std::string>> stop_strings_;  // per prompt
  std::vector<int32_t> kept_special_ids_;
  std::vector<PromptState> prompts_;
  std::vector<ChoiceState> choices_;  // (n_prompts * n)
  int32_t n_ = 1;
  std::shared_ptr<Ticket> ticket_;
  size_t n_finished_ = 0;
  std::chrono::steady_clock::time_point t_submit_{};
  std::chrono::steady_clock::time_point t_first_token_{};
  std::chrono::steady_clock::time_point t_last_token_{};
  std::chrono::steady_clock::time_point t_finished_{};
  bool got_token_ = false;
  std::string error_;
  std::shared_ptr<const WeightIdentity> identity_;
  std::vector<EngineEvent> events_;  // scratch
};

}  // namespace detllm::server
