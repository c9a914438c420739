"""Structured output through the real binary and the real `openai` client (docs/server.md,
"Structured output"): response_format json_schema / json_object and vLLM's structured_outputs
and guided_* fields constrain what the default model writes; every json_schema output over 200
seeded requests parses and validates (jsonschema); constrained requests replay bit for bit under
16 concurrent requests; the reported logprobs are the model's (scoring the output with echo
gives the same bits); bad schemas, regexes and grammars are 400s naming the field."""
import concurrent.futures
import json
import re

import pytest

jsonschema = pytest.importorskip("jsonschema")
openai = pytest.importorskip("openai")

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 12},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "member": {"type": "boolean"}},
     "required": ["name", "age", "member"], "additionalProperties": False},
    {"type": "object",
     "properties": {"city": {"enum": ["Paris", "Rome", "Oslo", "Lima"]},
                    "population": {"type": "integer", "minimum": 1, "maximum": 99999999},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                             "maxItems": 3}},
     "required": ["city", "population", "tags"], "additionalProperties": False},
    {"type": "object",
     "properties": {"answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
     "required": ["answer"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50},
     "minItems": 1, "maxItems": 5},
]
PROMPTS = ["Describe a person as JSON.", "Tell me about a city.", "Is the sky blue?",
           "Give me a few numbers."]


def schema_format(i):
    return {"type": "json_schema",
            "json_schema": {"name": f"schema{i}", "schema": SCHEMAS[i], "strict": True}}


def chat(client, i, seed, **kw):
    return client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        response_format=schema_format(i % len(SCHEMAS)), max_tokens=256, temperature=1.0,
        seed=seed, **kw)


def test_200_seeded_json_schema_outputs_parse_and_validate(client):
    def one(k):
        r = chat(client, k, seed=1000 + k)
        c = r.choices[0]
        assert c.finish_reason == "stop", (k, c.finish_reason, c.message.content)
        doc = json.loads(c.message.content)
        jsonschema.validate(doc, SCHEMAS[k % len(SCHEMAS)])
        return doc

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        docs = list(pool.map(one, range(200)))
    # Seeded sampling at temperature 1 explores: the outputs are not one document repeated.
    assert len({json.dumps(d, sort_keys=True) for d in docs}) > 20


def test_unconstrained_output_is_not_json(client):
    # The control: the same requests without response_format are not valid documents of the
    # schema (so the constraint is what made them valid above).
    invalid = 0
    for k in range(8):
        r = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": PROMPTS[k % len(PROMPTS)]}],
            max_tokens=64, temperature=1.0, seed=1000 + k)
        try:
            jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMAS[k % 4])
        except (ValueError, jsonschema.ValidationError):
            invalid += 1
    assert invalid >= 7


def token_ids(choice):
    return choice.logprobs.model_extra["token_ids"]


def test_constrained_requests_replay_bit_for_bit_under_concurrency(client):
    kw = dict(model="default", prompt="A person, as JSON:", max_tokens=96, temperature=0.9,
              seed=4242, logprobs=3, extra_body={"response_format": {"type": "json_object"}})
    alone = client.completions.create(**kw).choices[0]
    json.loads(alone.text)
    others = [dict(model="default", prompt=f"Story {i}: once upon a time", max_tokens=48,
                   temperature=1.0, seed=i,
                   **({"extra_body": {"guided_regex": "[a-z ]{4,40}\\."}} if i % 2 else {}))
              for i in range(15)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(client.completions.create, **kw)]
        futures += [pool.submit(client.completions.create, **o) for o in others]
        together = futures[0].result().choices[0]
        for f in futures[1:]:
            f.result()
    assert token_ids(together) == token_ids(alone)
    assert together.logprobs.token_logprobs == alone.logprobs.token_logprobs
    assert together.logprobs.top_logprobs == alone.logprobs.top_logprobs


def test_streamed_constrained_output_equals_the_non_streamed(client):
    kw = dict(model="default", messages=[{"role": "user", "content": "A city, as JSON."}],
              response_format=schema_format(1), max_tokens=200, temperature=0.8, seed=99)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    parts = [c.choices[0].delta.content or "" for c in
             client.chat.completions.create(stream=True, **kw) if c.choices]
    assert "".join(parts) == whole
    jsonschema.validate(json.loads(whole), SCHEMAS[1])


def test_logprobs_are_the_models_and_echo_scoring_gives_the_same_bits(client, server):
    gen = client.completions.create(model="default", prompt="Colors:", max_tokens=24,
                                    temperature=0.7, seed=5, logprobs=0,
                                    extra_body={"guided_choice": ["red and blue",
                                                                  "green", "a yellow sun"]})
    c = gen.choices[0]
    assert c.text in ("red and blue", "green", "a yellow sun")
    ids = token_ids(c)
    prompt_ids = server.post("/tokenize", {"prompt": "Colors:"}).json()["tokens"]
    scored = client.completions.create(model="default", prompt=prompt_ids + ids, max_tokens=0,
                                       echo=True, logprobs=0,
                                       extra_body={"guided_choice": ["red and blue", "green",
                                                                     "a yellow sun"]})
    score_lp = scored.choices[0].logprobs.token_logprobs[len(prompt_ids):]
    assert score_lp == c.logprobs.token_logprobs
    # Not the masked distribution: a choice's later tokens are forced (probability 1 under the
    # mask), yet their reported logprobs are the model's, below 0.
    assert min(c.logprobs.token_logprobs) < 0


@pytest.mark.parametrize("extra,expect", [
    ({"guided_regex": "(yes|no)!"}, re.compile(r"^(yes|no)!$")),
    ({"guided_choice": ["alpha", "beta"]}, re.compile(r"^(alpha|beta)$")),
    ({"guided_json": {"type": "object", "properties": {"x": {"type": "integer"}},
                      "required": ["x"], "additionalProperties": False}},
     re.compile(r'^\s*\{\s*"x"\s*:\s*-?\d+\s*\}\s*$')),
    ({"guided_grammar": 'root ::= "a" ("b" | "c")* "."'}, re.compile(r"^a[bc]*\.$")),
    ({"structured_outputs": {"regex": "[0-9]{3}"}}, re.compile(r"^[0-9]{3}$")),
    ({"structured_outputs": {"choice": ["left", "right"]}}, re.compile(r"^(left|right)$")),
])
def test_vllm_fields_constrain_the_output(client, extra, expect):
    r = client.completions.create(model="default", prompt="Answer:", max_tokens=48,
                                  temperature=1.0, seed=3, extra_body=extra)
    assert r.choices[0].finish_reason == "stop", r.choices[0]
    assert expect.match(r.choices[0].text), r.choices[0].text


def test_a_complete_grammar_ends_the_request_even_with_ignore_eos(client, server):
    # The grammar is complete after its choice: only the end-of-text id is allowed, which
    # ignore_eos does not stop on; after it nothing is allowed, and the request ends ("stop").
    # (A grammar with no way on, finish_reason "grammar", cannot happen with a byte-level
    # vocabulary like this model's: tests/structured/constrained_conformance_test.cpp has one.)
    r = client.completions.create(model="default", prompt="Say ok:", max_tokens=16,
                                  temperature=0, extra_body={"guided_choice": ["ok"],
                                                             "ignore_eos": True})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == "ok"
    # The choice's tokens, then the end-of-text token (not in the text), then nothing.
    ids = token_ids(client.completions.create(
        model="default", prompt="Say ok:", max_tokens=16, temperature=0, logprobs=0,
        extra_body={"guided_choice": ["ok"], "ignore_eos": True}).choices[0])
    assert r.usage.completion_tokens == len(ids)
    text_ids = ids[:-1]
    assert server.post("/detokenize", {"tokens": text_ids}).json()["prompt"] == "ok"


@pytest.mark.parametrize("body,param,words", [
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "s", "schema": {"type": "nonsense"}}}},
     "response_format.json_schema.schema", "nonsense"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
     "response_format.json_schema.name", "required"),
    ({"response_format": {"type": "yaml"}}, "response_format.type", "yaml"),
    ({"guided_regex": "([a-z"}, "guided_regex", "regex"),
    ({"guided_grammar": "root ::= undefined_rule"}, "guided_grammar", "undefined_rule"),
    ({"guided_choice": []}, "guided_choice", "non-empty"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice", "both"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
    ({"guided_decoding_backend": "outlines", "guided_regex": "a"}, "guided_decoding_backend",
     "xgrammar"),
])
def test_bad_grammars_are_400s_naming_the_field(client, body, param, words):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="default", prompt="x", max_tokens=4, extra_body=body)
    err = e.value.body
    assert err["param"] == param, err
    assert words in err["message"], err


def test_the_server_keeps_serving_after_bad_grammars(client):
    for _ in range(3):
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="default", prompt="x", max_tokens=4,
                                      extra_body={"guided_json": "{not json"})
    r = client.completions.create(model="default", prompt="Hello", max_tokens=4)
    assert r.choices[0].text is not None
