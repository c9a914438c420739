// Request parsing and validation of the OpenAI schema (server/openai_schema.h): every accepted
// form of each field, and for each kind of bad input the 400 naming the offending field.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "kernels/sampling/sampling_params.h"
#include "server/api_error.h"
#include "server/api_error_expect.h"
#include "server/openai_schema.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;

RequestLimits limits() {
  return RequestLimits{};
}

CompletionRequest completion(const std::string& body) {
  return parse_completion_request(parse_json_body(body), limits());
}
ChatRequest chat(const std::string& body) {
  return parse_chat_request(parse_json_body(body), limits());
}

TEST(OpenAiSchema, CompletionDefaults) {
  const CompletionRequest c = completion(R"({"model": "m", "prompt": "hello"})");
  EXPECT_EQ(c.gen.model, "m");
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(*c.prompts[0].text, "hello");
  EXPECT_FALSE(c.gen.max_tokens.has_value());
  EXPECT_EQ(c.gen.temperature, 1.0f);
  EXPECT_EQ(c.gen.top_p, 1.0f);
  EXPECT_EQ(c.gen.n, 1);
  EXPECT_FALSE(c.gen.seed.has_value());
  EXPECT_FALSE(c.gen.stream);
  EXPECT_EQ(c.gen.logprobs, -1);
  EXPECT_FALSE(c.echo);
  EXPECT_FALSE(c.gen.deterministic.has_value());
  EXPECT_FALSE(c.gen.determinism_mode.has_value());
  EXPECT_EQ(completion(R"({"prompt": "x", "determinism_mode": "bi-naive"})").gen.determinism_mode,
            DeterminismMode::kBiNaive);
}

TEST(OpenAiSchema, CompletionAllFields) {
  const CompletionRequest c = completion(R"({
    "model": "m", "prompt": [1, 2, 3], "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "seed": 18446744073709551615, "n": 3, "stop": ["a", "bc"],
    "stream": true, "stream_options": {"include_usage": true}, "logprobs": 5, "echo": true,
    "user": "u", "deterministic": false, "ignore_eos": true, "stop_token_ids": [9],
    "frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}, "best_of": 3,
    "suffix": null, "speculative": false})");
  EXPECT_EQ(c.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*c.gen.max_tokens, 7);
  EXPECT_EQ(c.gen.temperature, 0.5f);
  EXPECT_EQ(c.gen.top_p, 0.9f);
  EXPECT_EQ(c.gen.top_k, 40);
  EXPECT_EQ(c.gen.min_p, 0.05f);
  EXPECT_EQ(*c.gen.seed, 18446744073709551615ull);
  EXPECT_EQ(c.gen.n, 3);
  EXPECT_EQ(c.gen.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(c.gen.stream);
  EXPECT_TRUE(c.gen.include_usage);
  EXPECT_EQ(c.gen.logprobs, 5);
  EXPECT_TRUE(c.echo);
  EXPECT_EQ(c.gen.deterministic, false);
  EXPECT_TRUE(c.gen.ignore_eos);
  EXPECT_EQ(c.gen.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_FALSE(c.gen.speculative);
  EXPECT_TRUE(completion(R"({"prompt": "x"})").gen.speculative);
}

TEST(OpenAiSchema, PromptForms) {
  EXPECT_EQ(completion(R"({"prompt": ["a", "b"]})").prompts.size(), 2u);
  const auto ids = completion(R"({"prompt": [[1, 2], [3]]})").prompts;
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1].ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(completion(R"({"prompt": "x", "stop": "s"})").gen.stop,
            (std::vector<std::string>{"s"}));
  EXPECT_EQ(completion(R"({"prompt": "x", "top_k": -1})").gen.top_k, 0);
  EXPECT_EQ(completion(R"({"prompt": "x", "max_tokens": null})").gen.max_tokens, std::nullopt);
}

TEST(OpenAiSchema, MalformedBodies) {
  EXPECT_BAD(parse_json_body(""), "", "empty");
  // A NUL ends the text for the JSON parser: what follows it must not be silently dropped.
  EXPECT_BAD(parse_json_body(std::string("{\"prompt\": \"x\"}\0garbage", 23)), "", "NUL byte");
  EXPECT_BAD(completion(R"({"prompt": "x", "user": 5})"), "user", "string");
  EXPECT_BAD(completion(json{{"prompt", "x"}, {"user", std::string((1 << 20) + 1, 'u')}}.dump()),
             "user", "at most");
  EXPECT_BAD(completion(R"({"prompt": "x", "determinism_mode": "bitwise"})"), "determinism_mode",
             "valid: fast, invariant");
  EXPECT_BAD(completion(R"({"prompt": "x", "determinism_mode": 1})"), "determinism_mode", "");
  EXPECT_BAD(completion(R"({"prompt": "x", "determinism_mode": "invariant",
                            "deterministic": false})"),
             "determinism_mode", "drop one of the two");
  EXPECT_BAD(parse_json_body(R"({"prompt": "x")"), "", "not valid JSON");
  EXPECT_BAD(parse_json_body(R"({"prompt": "x"} trailing)"), "", "not valid JSON");
  EXPECT_BAD(parse_json_body("{\"prompt\": \"\xC3\x28\"}"), "", "not valid JSON");
  EXPECT_BAD(parse_json_body(R"({"max_tokens": 1e999})"), "", "not valid JSON");
  EXPECT_BAD(completion("[1, 2]"), "the request body", "must be a JSON object");
  EXPECT_BAD(completion("\"text\""), "the request body", "must be a JSON object");
}

TEST(OpenAiSchema, WrongTypesNameTheField) {
  EXPECT_BAD(completion(R"({"prompt": 5})"), "prompt", "must be a string");
  EXPECT_BAD(completion(R"({"prompt": {}})"), "prompt", "got object");
  EXPECT_BAD(completion(R"({"prompt": ["a", 3]})"), "prompt[1]", "string or a list");
  EXPECT_BAD(completion(R"({"prompt": [1, "a"]})"), "prompt", "prompt[1]");
  EXPECT_BAD(completion(R"({"prompt": [1.5]})"), "prompt", "token id");
  EXPECT_BAD(completion(R"({"prompt": [-1]})"), "prompt", "not a valid token id");
  EXPECT_BAD(completion(R"({"prompt": [4294967296]})"), "prompt", "not a valid token id");
  EXPECT_BAD(completion(R"({"prompt": "x", "max_tokens": "5"})"), "max_tokens", "an integer");
  EXPECT_BAD(completion(R"({"prompt": "x", "max_tokens": 5.0})"), "max_tokens", "an integer");
  EXPECT_BAD(completion(R"({"prompt": "x", "temperature": "hot"})"), "temperature", "a number");
  EXPECT_BAD(completion(R"({"prompt": "x", "stream": 1})"), "stream", "a boolean");
  EXPECT_BAD(completion(R"({"prompt": "x", "stop": 3})"), "stop", "string or a list");
  EXPECT_BAD(completion(R"({"prompt": "x", "stop": [""]})"), "stop[0]", "empty");
  EXPECT_BAD(completion(R"({"prompt": "x", "seed": -1})"), "seed", "non-negative");
  EXPECT_BAD(completion(R"({"prompt": "x", "seed": 1.5})"), "seed", "non-negative integer");
  EXPECT_BAD(completion(R"({"prompt": "x", "model": 7})"), "model", "a string");
}

TEST(OpenAiSchema, OutOfRangeValues) {
  EXPECT_BAD(completion(R"({"prompt": "x", "temperature": 2.5})"), "temperature", "[0, 2]");
  EXPECT_BAD(completion(R"({"prompt": "x", "temperature": -0.1})"), "temperature", "[0, 2]");
  EXPECT_BAD(completion(R"({"prompt": "x", "top_p": 0})"), "top_p", "(0, 1]");
  EXPECT_BAD(completion(R"({"prompt": "x", "top_p": 1.5})"), "top_p", "(0, 1]");
  // Checked as the sampler's 32-bit float: 1e-320 narrows to 0, and the 400 names the field.
  EXPECT_BAD(completion(R"({"prompt": "x", "top_p": 1e-320})"), "top_p", "32-bit float");
  EXPECT_BAD(completion(R"({"prompt": "x", "repetition_penalty": 1e-320})"),
             "repetition_penalty", "(0, 100]");
  EXPECT_BAD(completion(R"({"prompt": "x", "temperature": 2.000001})"), "temperature", "[0, 2]");
  EXPECT_BAD(completion(R"({"prompt": "x", "min_p": 2})"), "min_p", "[0, 1]");
  EXPECT_BAD(completion(R"({"prompt": "x", "n": 0})"), "n", "1…16");
  EXPECT_BAD(completion(R"({"prompt": "x", "n": 17})"), "n", "1…16");
  EXPECT_BAD(completion(R"({"prompt": "x", "logprobs": 21})"), "logprobs", "0…20");
  EXPECT_BAD(completion(R"({"prompt": "x", "max_tokens": -1})"), "max_tokens", "-1");
  EXPECT_BAD(completion(R"({"prompt": "x", "max_tokens": 4097})"), "max_tokens",
             "--max-tokens-limit");
  EXPECT_BAD(completion(R"({"prompt": "x", "max_tokens": 99999999999999999999999})"), "max_tokens",
             "an integer");
  EXPECT_BAD(completion(R"({"prompt": "x", "max_tokens": 18446744073709551615})"), "max_tokens",
             "18446744073709551615");
  EXPECT_BAD(completion(R"({"prompt": "x", "top_k": -2})"), "top_k", "-2");
  EXPECT_BAD(completion(R"({"prompt": [], "max_tokens": 1})"), "prompt", "empty list");
  EXPECT_BAD(completion(R"({"prompt": [[]]})"), "prompt[0]", "empty token list");
}

TEST(OpenAiSchema, UnknownAndUnsupportedFields) {
  EXPECT_BAD(completion(R"({"prompt": "x", "temprature": 0})"), "temprature", "unrecognized");
  EXPECT_BAD(completion(R"({"prompt": "x", "best_of": 2})"), "best_of", "not supported");
  EXPECT_BAD(completion(R"({"prompt": "x", "suffix": "s"})"), "suffix", "not supported");
  EXPECT_BAD(completion(R"({"prompt": "x", "stream_options": {"include_usage": true}})"),
             "stream_options", "only allowed when 'stream' is true");
  EXPECT_BAD(completion(R"({"prompt": "x", "stream": true, "stream_options": {"x": 1}})"),
             "stream_options.x", "unrecognized");
  EXPECT_BAD(completion(R"({"max_tokens": 3})"), "prompt", "required");
}

TEST(OpenAiSchema, Penalties) {
  const CompletionRequest c = completion(R"({"prompt": "x", "presence_penalty": -1.5,
    "frequency_penalty": 2, "repetition_penalty": 1.2,
    "logit_bias": {"10": -100, "2": 100, "0": 0.5, "0003": 1}})");
  EXPECT_EQ(c.gen.presence_penalty, -1.5f);
  EXPECT_EQ(c.gen.frequency_penalty, 2.0f);
  EXPECT_EQ(c.gen.repetition_penalty, 1.2f);
  // Sorted by token id (JSON keys sort as strings: "10" < "2").
  EXPECT_EQ(c.gen.logit_bias,
            (std::vector<LogitBias>{{0, 0.5f}, {2, 100.0f}, {3, 1.0f}, {10, -100.0f}}));
  const ChatRequest chat = parse_chat_request(
      json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "presence_penalty": 1,
        "logit_bias": {"5": 1}, "repetition_penalty": null})"),
      RequestLimits{});
  EXPECT_EQ(chat.gen.presence_penalty, 1.0f);
  EXPECT_EQ(chat.gen.repetition_penalty, 1.0f);
  EXPECT_EQ(chat.gen.logit_bias, (std::vector<LogitBias>{{5, 1.0f}}));
}

TEST(OpenAiSchema, MalformedPenalties) {
  EXPECT_BAD(completion(R"({"prompt": "x", "presence_penalty": 2.5})"), "presence_penalty", "2.5");
  EXPECT_BAD(completion(R"({"prompt": "x", "frequency_penalty": -3})"), "frequency_penalty", "-3");
  EXPECT_BAD(completion(R"({"prompt": "x", "frequency_penalty": "1"})"), "frequency_penalty",
             "number");
  EXPECT_BAD(completion(R"({"prompt": "x", "repetition_penalty": 0})"), "repetition_penalty",
             "(0, 100]");
  EXPECT_BAD(completion(R"({"prompt": "x", "repetition_penalty": -1})"), "repetition_penalty",
             "-1");
  EXPECT_BAD(completion(R"({"prompt": "x", "repetition_penalty": 1e300})"), "repetition_penalty",
             "");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": [1, 2]})"), "logit_bias", "object");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"a": 1}})"), "logit_bias",
             "not a token id");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"-1": 1}})"), "logit_bias",
             "not a token id");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"1.5": 1}})"), "logit_bias",
             "not a token id");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"": 1}})"), "logit_bias",
             "not a token id");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"99999999999": 1}})"), "logit_bias",
             "not a token id");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"1": 101}})"), "logit_bias",
             "[-100, 100]");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"1": "5"}})"), "logit_bias", "a number");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"1": null}})"), "logit_bias", "a number");
  EXPECT_BAD(completion(R"({"prompt": "x", "logit_bias": {"1": 1, "01": 2}})"), "logit_bias",
             "twice");
  std::string many = R"({"prompt": "x", "logit_bias": {)";
  for (int i = 0; i <= SamplingParams::kMaxLogitBias; ++i) {
    if (i > 0) many += ", ";
    many += fmt::format("\"{}\": 1", i);
  }
  many += "}}";
  EXPECT_BAD(completion(many), "logit_bias", "at most 1024");
}

TEST(OpenAiSchema, ScoringNeedsEchoAndLogprobs) {
  EXPECT_BAD(completion(R"({"prompt": "x", "max_tokens": 0})"), "max_tokens", "score");
  EXPECT_EQ(*completion(R"({"prompt": "x", "max_tokens": 0, "echo": true, "logprobs": 0})")
                 .gen.max_tokens,
            0);
  EXPECT_BAD(completion(R"({"prompt": "x", "max_tokens": 0, "echo": true, "logprobs": 0,
                            "n": 2})"),
             "n", "n = 1");
}

TEST(OpenAiSchema, Limits) {
  RequestLimits l;
  l.max_prompts = 2;
  l.max_stop = 1;
  l.max_string_bytes = 4;
  auto parse = [&](const std::string& b) {
    return parse_completion_request(parse_json_body(b), l);
  };
  EXPECT_BAD(parse(R"({"prompt": ["a", "b", "c"]})"), "prompt", "at most 2");
  EXPECT_BAD(parse(R"({"prompt": "a", "stop": ["a", "b"]})"), "stop", "at most 1");
  EXPECT_BAD(parse(R"({"prompt": "abcde"})"), "prompt", "longer than 4 bytes");
}

TEST(OpenAiSchema, ChatMessages) {
  const ChatRequest c = chat(R"({"model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "user", "content": "again", "name": "bob"}],
      "max_completion_tokens": 9, "max_tokens": 3, "logprobs": true, "top_logprobs": 2})");
  ASSERT_EQ(c.messages.size(), 4u);
  EXPECT_EQ(c.messages[1].content, "hi there");
  EXPECT_EQ(c.messages[2].content, "");
  EXPECT_EQ(c.messages[3].name, "bob");
  EXPECT_EQ(*c.gen.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_EQ(c.gen.logprobs, 2);
  EXPECT_TRUE(c.add_generation_prompt);
  EXPECT_EQ(
      chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").gen.logprobs,
      0);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}]})").gen.logprobs, -1);
}

TEST(OpenAiSchema, ChatErrors) {
  EXPECT_BAD(chat(R"({"messages": []})"), "messages", "empty");
  EXPECT_BAD(chat(R"({"messages": "hi"})"), "messages", "list of messages");
  EXPECT_BAD(chat(R"({"prompt": "hi"})"), "messages", "required");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user", "content": "x"}], "prompt": "hi"})"), "prompt",
             "unrecognized");
  EXPECT_BAD(chat(R"({"messages": [{"content": "x"}]})"), "messages[0].role", "required");
  EXPECT_BAD(chat(R"({"messages": [{"role": "wizard", "content": "x"}]})"), "messages[0].role",
             "expected system");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user"}]})"), "messages[0].content", "required");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content",
             "string or a list");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
             "messages[0].content[0].type", "text content only");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user", "content": "x", "mood": "happy"}]})"),
             "messages[0].mood", "unrecognized");
  EXPECT_BAD(chat(R"({"messages": [5]})"), "messages[0]", "must be a JSON object");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"),
             "top_logprobs", "needs 'logprobs'");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})"),
             "max_tokens", "1…");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user", "content": "x"}],
                      "tools": [{"type": "function"}]})"),
             "tools[0].function", "required");
  EXPECT_BAD(chat(R"({"messages": [{"role": "user", "content": "x"}],
                      "response_format": {"type": "yaml"}})"),
             "response_format.type", "'yaml'");
}

TEST(OpenAiSchema, TokenizeAndDetokenize) {
  const RequestLimits l;
  const TokenizeRequest t = parse_tokenize_request(
      parse_json_body(R"({"prompt": "hi", "add_special_tokens": false})"), l);
  EXPECT_EQ(*t.prompt, "hi");
  EXPECT_FALSE(t.add_special_tokens);
  EXPECT_BAD(parse_tokenize_request(parse_json_body(R"({})"), l), "prompt", "exactly one");
  EXPECT_BAD(
      parse_tokenize_request(
          parse_json_body(R"({"prompt": "a", "messages": [{"role": "user", "content": "b"}]})"), l),
      "prompt", "exactly one");
  EXPECT_EQ(parse_detokenize_request(parse_json_body(R"({"tokens": [1, 2]})"), l).tokens,
            (std::vector<int32_t>{1, 2}));
  EXPECT_BAD(parse_detokenize_request(parse_json_body(R"({"tokens": "12"})"), l), "tokens",
             "required");
  EXPECT_BAD(parse_detokenize_request(parse_json_body(R"({"tokens": [1, -2]})"), l), "tokens",
             "tokens[1]");
}

TEST(ApiErrorBody, HasOpenAiShape) {
  const json j = json::parse(error_body(
      ApiError(404, "no such model", "invalid_request_error", "model", "model_not_found")));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  const json k = json::parse(error_body(ApiError(400, "bad")));
  EXPECT_TRUE(k["error"]["param"].is_null());
  EXPECT_TRUE(k["error"]["code"].is_null());
}

}  // namespace
}  // namespace detllm::server
