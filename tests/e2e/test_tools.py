"""Tool calling and reasoning through the real `openai` client against the real `detllm serve`
(docs/server.md, "Tool calling and reasoning").

The default model (SmolLM2-135M-Instruct) has a chat template without tool syntax, so on the
default server tools are rendered (and ignored by its template) and no parser runs (auto finds
none). The tool calls and the reasoning below are real model output: a server started with
`--tool-call-parser hermes --reasoning-parser qwen3`, and few-shot prompts whose examples the
model copies greedily (a <tool_call> block; a <think> block then the answer). Whole and
streamed responses of the same seeded request are compared, the stream reassembled both by the
client's own helper (client.chat.completions.stream) and by hand from the raw deltas.
"""
import json

import pytest

from conftest import API_KEY, start_server

openai = pytest.importorskip("openai")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def few_shot(answer, question, system):
    msgs = [{"role": "system", "content": system}]
    for _ in range(3):
        msgs += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return msgs + [{"role": "user", "content": question}]


CALL_MESSAGES = few_shot(CALL, "Weather in Paris?", "Reply with a tool call exactly like the examples.")
THINK_MESSAGES = few_shot("<think>\nThe capital of France is Paris.\n</think>\n\nParis.",
                          "What is the capital of France?",
                          "Think first, then answer, exactly like the examples.")


@pytest.fixture(scope="module")
def parsing_client():
    s = start_server("--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
    try:
        assert any("tool-call parser hermes, reasoning parser qwen3" in line for line in s.log)
        yield openai.OpenAI(base_url=s.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
    finally:
        assert s.stop() == 0, "".join(s.log)


def reassemble(chunks):
    """content, reasoning, tool calls and finish_reason of choice 0 from raw stream chunks."""
    content, reasoning, calls, finish = "", "", {}, None
    for ch in chunks:
        if not ch.choices:
            continue
        c = ch.choices[0]
        d = c.delta
        content += d.content or ""
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
        for tc in d.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = tc.id or call["id"]
            if tc.function:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
        finish = c.finish_reason or finish
    return content, reasoning, [calls[k] for k in sorted(calls)], finish


def test_tools_render_on_a_template_without_tool_syntax(server, client):
    r = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER], tool_choice="auto", parallel_tool_calls=False, max_tokens=8,
        temperature=0)
    assert any("tool-call parser none (auto: from the chat template)" in line
               for line in server.log)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str) and choice.message.tool_calls is None


def test_required_and_named_tool_choice_always_give_a_valid_call(client):
    # The default server has no tool-call parser (SmolLM2's template has no tool format), yet
    # "required" and a named function are enforced by a grammar: every seeded reply is a call
    # whose arguments validate against the tool's parameters.
    jsonschema = pytest.importorskip("jsonschema")
    stock = {"type": "function", "function": {
        "name": "get_stock", "parameters": {
            "type": "object", "properties": {"ticker": {"type": "string", "maxLength": 6},
                                             "days": {"type": "integer", "minimum": 1,
                                                      "maximum": 30}},
            "required": ["ticker", "days"], "additionalProperties": False}}}
    # Bounded arguments, so that every call ends within max_tokens.
    weather = {"type": "function", "function": {
        "name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"]}}}
    params = {t["function"]["name"]: t["function"]["parameters"] for t in (weather, stock)}
    for seed in range(12):
        for choice in ("required", {"type": "function", "function": {"name": "get_stock"}}):
            r = client.chat.completions.create(
                model="default", messages=[{"role": "user", "content": "Weather or stocks?"}],
                tools=[weather, stock], tool_choice=choice, max_tokens=300, temperature=1.0,
                seed=seed)
            c = r.choices[0]
            assert c.finish_reason == "tool_calls", c
            assert c.message.tool_calls, c
            for call in c.message.tool_calls:
                if choice != "required":
                    assert call.function.name == "get_stock"
                jsonschema.validate(json.loads(call.function.arguments), params[call.function.name])


def test_constrained_call_stream_reassembles_to_the_whole_call(client):
    args = dict(model="default", messages=[{"role": "user", "content": "Weather?"}],
                tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                max_tokens=120, temperature=0.7, seed=5)
    whole = client.chat.completions.create(**args).choices[0]
    assert whole.finish_reason == "tool_calls" and len(whole.message.tool_calls) == 1
    content, reasoning, calls, finish = reassemble(
        list(client.chat.completions.create(stream=True, **args)))
    assert finish == "tool_calls" and content == ""
    call = whole.message.tool_calls[0]
    assert calls == [{"id": call.id, "name": call.function.name,
                      "arguments": call.function.arguments}]


def test_tool_choice_required_with_response_format_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "x"}], tools=[WEATHER],
            tool_choice="required", response_format={"type": "json_object"}, max_tokens=4)
    assert e.value.body["param"] == "tool_choice"


def test_history_with_tool_calls_and_tool_messages_is_accepted(client):
    r = client.chat.completions.create(model="default", max_tokens=4, temperature=0, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 °C"}], tools=[WEATHER])
    assert r.choices[0].finish_reason in ("stop", "length")


def test_chat_template_kwargs_are_accepted(client):
    r = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("kwargs, param", [
    ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]},
     "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
     "tools[0].function.parameters"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]},
     "messages[1].tool_call_id"),
    ({"extra_body": {"chat_template_kwargs": ["x"]}}, "chat_template_kwargs"),
])
def test_bad_tool_fields_are_400s_naming_the_field(client, kwargs, param):
    kwargs = dict(kwargs)
    messages = kwargs.pop("messages", [{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="default", messages=messages, max_tokens=1, **kwargs)
    assert e.value.body["param"] == param, e.value.body


def test_a_tool_call_whole_and_streamed(parsing_client):
    c = parsing_client
    args = dict(model="default", messages=CALL_MESSAGES, tools=[WEATHER], max_tokens=40,
                temperature=0, seed=1234)
    whole = c.chat.completions.create(**args)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_") and len(call.id) == 29

    # A seeded replay gives the same response, call id included.
    again = c.chat.completions.create(**args)
    assert again.choices[0].message.tool_calls[0].model_dump() == call.model_dump()

    # Raw deltas, reassembled by hand: the same call, content never sent.
    chunks = list(c.chat.completions.create(stream=True, **args))
    content, reasoning, calls, finish = reassemble(chunks)
    assert (content, reasoning, finish) == ("", "", "tool_calls")
    assert calls == [{"id": call.id, "name": "get_weather", "arguments": call.function.arguments}]
    # The client's own stream helper reassembles it too.
    with c.chat.completions.stream(**args) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].finish_reason == "tool_calls"
    [helper_call] = final.choices[0].message.tool_calls
    assert (helper_call.id, helper_call.type, helper_call.function.name,
            helper_call.function.arguments) == (call.id, call.type, call.function.name,
                                                call.function.arguments)


def test_tool_choice_required_and_none(parsing_client):
    c = parsing_client
    args = dict(model="default", messages=CALL_MESSAGES, tools=[WEATHER], max_tokens=40,
                temperature=0, seed=1234)
    # Enforced by a grammar (the output is a JSON array of calls, not the hermes block).
    required = c.chat.completions.create(tool_choice="required", **args)
    assert required.choices[0].message.tool_calls[0].function.name == "get_weather"
    named = c.chat.completions.create(
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, **args)
    assert named.choices[0].finish_reason == "tool_calls"
    # none: the same text is content.
    none = c.chat.completions.create(tool_choice="none", **args)
    assert none.choices[0].finish_reason == "stop"
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content.startswith("<tool_call>")


def test_reasoning_whole_and_streamed(parsing_client):
    c = parsing_client
    args = dict(model="default", messages=THINK_MESSAGES, max_tokens=40, temperature=0, seed=7)
    whole = c.chat.completions.create(**args).choices[0]
    reasoning = whole.message.model_extra["reasoning_content"]
    assert "Paris" in reasoning and "<think>" not in reasoning
    assert "Paris" in whole.message.content and "</think>" not in whole.message.content
    content, streamed_reasoning, calls, finish = reassemble(
        c.chat.completions.create(stream=True, **args))
    assert (content, streamed_reasoning, calls, finish) == (
        whole.message.content, reasoning, [], whole.finish_reason)


@pytest.fixture(scope="module")
def r1_client():
    s = start_server("--reasoning-parser", "deepseek_r1")
    try:
        yield openai.OpenAI(base_url=s.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_structured_output_starts_after_the_reasoning(r1_client):
    # With a reasoning parser the grammar applies after </think> (as vLLM's): the model thinks
    # freely, then answers under the schema. Without the gate its first token would have to be
    # "{" and no reasoning could come out.
    schema = {"type": "object", "properties": {"capital": {"type": "string"}},
              "required": ["capital"], "additionalProperties": False}
    args = dict(model="default", messages=THINK_MESSAGES, max_tokens=60, temperature=0, seed=7,
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "answer", "schema": schema}})
    whole = r1_client.chat.completions.create(**args).choices[0]
    reasoning = whole.message.model_extra["reasoning_content"]
    assert "Paris" in reasoning, whole
    answer = json.loads(whole.message.content)
    assert set(answer) == {"capital"} and isinstance(answer["capital"], str)
    again = r1_client.chat.completions.create(**args).choices[0]
    assert again.message.model_dump() == whole.message.model_dump()


def test_qwen3_without_a_think_token_constrains_from_the_first_token(parsing_client):
    # SmolLM2 spells <think> with ordinary tokens, so under qwen3 the grammar holds at once: the
    # few-shot thinking model answers with JSON and no reasoning.
    args = dict(model="default", messages=THINK_MESSAGES, max_tokens=30, temperature=0, seed=7,
                response_format={"type": "json_object"})
    message = parsing_client.chat.completions.create(**args).choices[0].message
    assert message.model_extra.get("reasoning_content") is None
    assert message.content.lstrip().startswith("{")
