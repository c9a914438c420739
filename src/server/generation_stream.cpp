// Completion / chat bodies, streamed as SSE or written whole (see generation_stream.h).
#include "server/generation_stream.h"

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;

class GenerationStream final : public ResponseStream {
 public:
  GenerationStream(std::unique_ptr<Generation> g, ResponseMeta meta, const Tokenizer& tokenizer,
                   StreamSpec spec)
      : gen_(std::move(g)), meta_(std::move(meta)), tokenizer_(tokenizer), spec_(spec) {
    if (spec_.api == StreamSpec::Api::kChat && spec_.stream) {
      for (const ChoiceState& c : gen_->choices()) {
        ChatOutputConfig config = spec_.output;
        config.choice_index = c.index;
        splitters_.emplace_back(config);
      }
    }
  }

  PumpResult pump(const Writer& write, std::chrono::milliseconds wait) override {
    if (!gen_->finished()) gen_->poll(wait);
    return spec_.stream ? pump_sse(write) : pump_whole(write);
  }

  void cancel() override { gen_->cancel(); }
  void set_notify(std::function<void()> notify) override { gen_->set_notify(std::move(notify)); }
  int32_t prompt_tokens() const override { return gen_->prompt_tokens(); }
  int32_t completion_tokens() const override { return gen_->completion_tokens(); }
  Latency latency() const override {
    const Generation::Timings t = gen_->timings();
    return {t.queue_s, t.ttft_s, t.tpot_s, t.e2e_s};
  }

 private:
  PumpResult fail() {
    gen_->cancel();
    return PumpResult::kFailed;
  }

  std::string error_json() const {
    return error_body(ApiError(500, gen_->error(), "server_error"));
  }

  PumpResult pump_whole(const Writer& write) {
    if (!gen_->finished()) return PumpResult::kMore;
    std::string body;
    if (!gen_->error().empty()) {
      body = error_json();
    } else if (spec_.api == StreamSpec::Api::kCompletion) {
      body = dump_json(completion_response(meta_, *gen_, tokenizer_, spec_.echo, spec_.logprobs));
    } else {
      body = dump_json(chat_response(meta_, *gen_, tokenizer_, spec_.logprobs, spec_.echo_text,
                                     spec_.output));
    }
    return write(body) ? PumpResult::kDone : fail();
  }

  std::string_view object() const {
    return spec_.api == StreamSpec::Api::kCompletion ? "text_completion"
                                                     : "chat.completion.chunk";
  }

  void emit(std::string& out, json choice) {
    json j = chunk_envelope(meta_, object(), json::array({std::move(choice)}));
    if (spec_.include_usage) j["usage"] = nullptr;
    out += sse_event(dump_json(j));
  }

  // The prompt chunk of a completion with echo: its text and, when asked, its logprobs (which
  // arrive once the prompt is computed).
  bool emit_echo(std::string& out, ChoiceState& c) {
    const PromptState& p = gen_->prompts()[static_cast<size_t>(c.prompt_index)];
    if (spec_.logprobs && !p.logprobs_ready && !gen_->finished()) return false;
    json lp = nullptr;
    if (spec_.logprobs) {
      CompletionLogprobs b(tokenizer_, 0, meta_.tokens_as_ids);
      b.add_prompt(p.ids, p.logprobs);
      c.text_offset = b.text_offset();
      lp = b.take();
    } else {
      c.text_offset = p.text.size();
    }
    emit(out, {{"index", c.index}, {"text", p.text}, {"logprobs", std::move(lp)},
               {"finish_reason", nullptr}});
    c.echo_sent = true;
    return true;
  }

  void emit_delta(std::string& out, ChoiceState& c) {
    if (spec_.api == StreamSpec::Api::kChat) return emit_chat_delta(out, c);
    const std::string text = c.text.substr(c.n_text_sent);
    const std::span<const engine::TokenEvent> tokens =
        std::span(c.tokens).subspan(c.n_tokens_sent);
    const bool finishing = c.finish.has_value() && !c.finish_sent;
    const bool routed = meta_.routed_experts_k > 0;
    if (text.empty() && ((!spec_.logprobs && !routed) || tokens.empty()) && !finishing) return;
    json lp = nullptr;
    if (spec_.logprobs) {
      CompletionLogprobs b(tokenizer_, c.text_offset, meta_.tokens_as_ids);
      b.add_generated(tokens);
      c.text_offset = b.text_offset();
      lp = b.take();
    }
    json choice = {{"index", c.index}, {"text", text}, {"logprobs", std::move(lp)}};
    if (routed) choice["routed_experts"] = routed_experts_json(tokens, meta_.routed_experts_k);
    choice["finish_reason"] = finishing ? finish_reason_json(c.finish) : json(nullptr);
    choice["stop_reason"] = finishing ? stop_reason_json(c) : json(nullptr);
    emit(out, std::move(choice));
    c.n_text_sent = c.text.size();
    c.n_tokens_sent = c.tokens.size();
    c.finish_sent = c.finish_sent || finishing;
  }

  // A chat choice's new text through its splitter (reasoning, content, held tool calls): one
  // chunk with the released text and the new tokens' logprobs; at the end, each tool call
  // as OpenAI streams it (its id, type and name with arguments "", then the arguments) and a
  // last chunk with the finish_reason.
  void emit_chat_delta(std::string& out, ChoiceState& c) {
    ChatOutputSplitter& split = splitters_[static_cast<size_t>(c.index)];
    const std::span<const engine::TokenEvent> tokens =
        std::span(c.tokens).subspan(c.n_tokens_sent);
    const bool finishing = c.finish.has_value() && !c.finish_sent;
    ChatDelta d = split.push(std::string_view(c.text).substr(c.n_text_sent));
    c.n_text_sent = c.text.size();
    if (finishing) {
      ChatDelta last = split.finish();
      d.reasoning += last.reasoning;
      d.content += last.content;
      d.tool_calls = std::move(last.tool_calls);
    }
    const bool has_text = !d.reasoning.empty() || !d.content.empty();
    const bool has_logprobs = (spec_.logprobs || meta_.routed_experts_k > 0) && !tokens.empty();
    const bool calls = !d.tool_calls.empty();
    auto choice_of = [&](json delta, json lp, bool last) {
      json choice = {{"index", c.index}, {"delta", std::move(delta)}, {"logprobs", std::move(lp)}};
      choice["finish_reason"] =
          last ? chat_finish_reason_json(c.finish, split.called()) : json(nullptr);
      choice["stop_reason"] = last ? stop_reason_json(c) : json(nullptr);
      return choice;
    };
    if (has_text || has_logprobs || (finishing && !calls)) {
      json delta = json::object();
      if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
      if (!d.content.empty() || (!finishing && d.reasoning.empty())) delta["content"] = d.content;
      json lp = spec_.logprobs ? chat_logprobs(tokenizer_, tokens, meta_.tokens_as_ids)
                               : json(nullptr);
      json choice = choice_of(std::move(delta), std::move(lp), finishing && !calls);
      if (meta_.routed_experts_k > 0) {
        choice["routed_experts"] = routed_experts_json(tokens, meta_.routed_experts_k);
      }
      emit(out, std::move(choice));
    }
    for (size_t k = 0; k < d.tool_calls.size(); ++k) {
      const ToolCall& call = d.tool_calls[k];
      json head = {{"index", k},
                   {"id", call.id},
                   {"type", "function"},
                   {"function", {{"name", call.name}, {"arguments", ""}}}};
      emit(out, choice_of({{"tool_calls", json::array({std::move(head)})}}, nullptr, false));
      json args = {{"index", k}, {"function", {{"arguments", call.arguments}}}};
      emit(out, choice_of({{"tool_calls", json::array({std::move(args)})}}, nullptr, false));
    }
    if (finishing && calls) emit(out, choice_of(json::object(), nullptr, true));
    c.n_tokens_sent = c.tokens.size();
    c.finish_sent = c.finish_sent || finishing;
  }

  PumpResult pump_sse(const Writer& write) {
    std::string out;
    if (!started_) {
      started_ = true;
      if (spec_.api == StreamSpec::Api::kChat) {
        for (const ChoiceState& c : gen_->choices()) {
          emit(out, {{"index", c.index},
                     {"delta", {{"role", "assistant"}, {"content", spec_.echo_text}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}});
        }
      }
    }
    if (gen_->error().empty()) {
      for (ChoiceState& c : gen_->choices()) {
        if (spec_.echo && !c.echo_sent && !emit_echo(out, c)) continue;
        emit_delta(out, c);
      }
    }
    if (!gen_->finished()) {
      if (!out.empty() && !write(out)) return fail();
      return PumpResult::kMore;
    }
    if (!gen_->error().empty()) {
      out += sse_event(error_json());
    } else if (spec_.include_usage) {
      json j = chunk_envelope(meta_, object(), json::array());
      j["usage"] = usage_json(*gen_);
      out += sse_event(dump_json(j));
    }
    out += kSseDone;
    return write(out) ? PumpResult::kDone : fail();
  }

  std::unique_ptr<Generation> gen_;
  ResponseMeta meta_;
  const Tokenizer& tokenizer_;
  StreamSpec spec_;
  std::vector<ChatOutputSplitter> splitters_;  // chat streams: one per choice (by index)
  bool started_ = false;
};

}  // namespace

std::shared_ptr<ResponseStream> make_generation_stream(std::unique_ptr<Generation> generation,
                                                       ResponseMeta meta,
                                                       const Tokenizer& tokenizer,
                                                       StreamSpec spec) {
  return std::make_shared<GenerationStream>(std::move(generation), std::move(meta), tokenizer,
                                            spec);
}

}  // namespace detllm::server
