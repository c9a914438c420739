#!/usr/bin/env python3
"""Golden prompts for chat requests with tools, from jinja2 with transformers' settings (the
reference), as vLLM builds the template's inputs from an OpenAI request.

Writes tests/data/chat/tool_prompts.json: for each template x request, the OpenAI request body
(as the client sends it: key order is part of the test) and the exact prompt text. The C++
test (tests/server/tool_prompt_test.cpp) parses the same body with the server's schema and
renders it with the server's ChatPrompt.

How a request becomes the template's inputs (vLLM's chat_utils):
  messages  role and content (text parts joined; null content -> ""), name, an assistant's
            tool_calls with each function.arguments parsed from its JSON text into a value
            (vLLM's _postprocess_messages: templates print them with tojson), a tool
            message's tool_call_id
  tools     [{"type": "function", "function": <the client's function object>}], none when
            absent (vLLM's model_dump would add null description/parameters for absent
            fields; the requests here give all three, in that order)
  chat_template_kwargs  each key a template variable

Templates: qwen3 ($DETLLM_TOKENIZER_DATA/qwen3/tokenizer_config.json, the hermes format),
llama31_like (the Llama 3.1 tool pattern of scripts/ref/chat_template_golden.py: tojson of the
arguments) and smollm2 (the default model's template, which ignores tools).

Needs: jinja2 (the .venv has it)
Usage: DETLLM_TOKENIZER_DATA=/path/to/tokenizers .venv/bin/python scripts/ref/tool_prompt_golden.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from chat_template_golden import DATA, LLAMA31_LIKE, make_compiler  # noqa: E402
from external_data import TOKENIZER_DATA, tokenizer_path  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object",
                   "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                  "city": {"type": "string", "description": "City, e.g. Zürich"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time now.", "parameters": {"type": "object",
                                                                        "properties": {}}}}

HISTORY = [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": "Weather in Paris and Zürich, and the time?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"unit\": \"celsius\", \"city\": \"Paris\"}"}},
        {"id": "call_b2", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"Zürich\"}"}}]},
    {"role": "tool", "tool_call_id": "call_a1", "content": "{\"temp\": 21}"},
    {"role": "tool", "tool_call_id": "call_b2", "content": "18 °C"},
    {"role": "assistant", "content": "Paris: 21 °C; Zürich: 18 °C."},
    {"role": "user", "content": "Thanks!"},
]

REQUESTS = {
    "tools_first_turn": {"messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Weather in Paris?"}],
                         "tools": [WEATHER, TIME]},
    "tools_user_only": {"messages": [{"role": "user", "content": "What time is it?"}],
                        "tools": [TIME], "tool_choice": "required"},
    "tool_history": {"messages": HISTORY, "tools": [WEATHER, TIME]},
    "tool_history_without_tools": {"messages": HISTORY},
    "thinking_disabled": {"messages": [{"role": "user", "content": "2+2?"}],
                          "chat_template_kwargs": {"enable_thinking": False}},
}


def template_inputs(request):
    messages = []
    for m in request["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p["text"] for p in content)
        out = {"role": m["role"], "content": content or ""}
        if m.get("name"):
            out["name"] = m["name"]
        if m.get("tool_calls"):
            out["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["function"]["name"],
                "arguments": json.loads(c["function"]["arguments"])}}
                for c in m["tool_calls"]]
        if "tool_call_id" in m:
            out["tool_call_id"] = m["tool_call_id"]
        messages.append(out)
    extra = dict(request.get("chat_template_kwargs", {}))
    if request.get("tools"):
        extra["tools"] = [{"type": "function", "function": t["function"]} for t in request["tools"]]
    return messages, extra


def main():
    _, render_chat, reference = make_compiler()
    with open(tokenizer_path(TOKENIZER_DATA, "qwen3", "tokenizer_config.json"), encoding="utf-8") as f:
        qwen3 = json.load(f)
    with open(os.path.join(DATA, "smollm2_template.jinja"), encoding="utf-8", newline="") as f:
        smollm2 = f.read()
    # bos/eos as the C++ test's tokenizers give them: qwen3's own; the others are rendered
    # through the server tests' byte tokenizer, whose EOS is <|end|>.
    templates = {
        "qwen3": {"source": None, "from": "qwen3/tokenizer_config.json",
                  "special": {"eos_token": qwen3["eos_token"]}, "text": qwen3["chat_template"]},
        "llama31_like": {"source": LLAMA31_LIKE, "special": {"eos_token": "<|end|>"}},
        "smollm2": {"source": smollm2, "special": {"eos_token": "<|end|>"}},
    }
    cases = []
    for tname, t in templates.items():
        text = t["text"] if t["source"] is None else t["source"]
        for rname, request in REQUESTS.items():
            messages, extra = template_inputs(request)
            entry = {"template": tname, "request": rname}
            try:
                entry["output"] = render_chat(text, messages, True, t["special"], extra)
            except Exception as e:  # the server must refuse it too (400)
                entry["error"] = f"{type(e).__name__}: {e}"
            cases.append(entry)
    golden = {
        "generator": "scripts/ref/tool_prompt_golden.py",
        "reference": reference,
        "templates": {k: ({"from": v["from"]} if v["source"] is None else {"source": v["source"]})
                      for k, v in templates.items()},
        "requests": REQUESTS,
        "cases": cases,
    }
    out = os.path.join(DATA, "tool_prompts.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{out}: {len(cases)} cases with {reference}", file=sys.stderr)


if __name__ == "__main__":
    main()
