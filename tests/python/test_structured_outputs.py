"""Structured output and vLLM's token rules from Python (detllm.SamplingParams,
detllm.StructuredOutputsParams; docs/python.md): each constrains what is generated, bad values
are ValueErrors or engine errors naming the problem, a constrained batch gives each request's
bits alone, and a request from Python samples the same tokens with the same fp32 logprobs as
the same request through `detllm serve` over HTTP (the real binary, $DETLLM_BIN)."""

import json
import re

import numpy as np
import pytest

import detllm
from conftest import bits

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
PROMPT = "A person, as JSON:"


def gen(llm, prompt=PROMPT, **kw):
    kw.setdefault("max_tokens", 64)
    return llm.generate(prompt, detllm.SamplingParams(**kw), use_tqdm=False)[0].outputs[0]


@pytest.mark.parametrize("so,check", [
    (dict(json=SCHEMA), lambda t: set(json.loads(t)) == {"name", "age"}),
    (dict(json=json.dumps(SCHEMA)), lambda t: set(json.loads(t)) == {"name", "age"}),
    (dict(regex="(red|green|blue)!"), lambda t: re.fullmatch("(red|green|blue)!", t)),
    (dict(choice=["alpha", "beta"]), lambda t: t in ("alpha", "beta")),
    (dict(grammar='root ::= "a" ("b" | "c")* "."'), lambda t: re.fullmatch(r"a[bc]*\.", t)),
])
def test_structured_outputs_constrain_the_text(llm, so, check):
    out = gen(llm, temperature=0.8, seed=3,
              structured_outputs=detllm.StructuredOutputsParams(**so))
    assert out.finish_reason == "stop", out
    assert check(out.text), out.text


def test_json_object_is_an_object_as_far_as_it_goes(llm):
    # json_object does not bound the document: a long one is cut by max_tokens.
    out = gen(llm, temperature=0, max_tokens=200,
              structured_outputs=detllm.StructuredOutputsParams(json_object=True))
    if out.finish_reason == "stop":
        assert isinstance(json.loads(out.text), dict)
    else:
        assert out.text.lstrip().startswith("{")


def test_guided_decoding_is_the_same_field(llm):
    a = gen(llm, temperature=0.8, seed=4,
            structured_outputs=detllm.StructuredOutputsParams(choice=["x y", "z"]))
    b = gen(llm, temperature=0.8, seed=4,
            guided_decoding=detllm.GuidedDecodingParams(choice=["x y", "z"]))
    assert a.token_ids == b.token_ids


@pytest.mark.parametrize("kw,needle", [
    (dict(), "exactly one"),
    (dict(json=SCHEMA, regex="a"), "exactly one"),
    (dict(choice="ab"), "list of strings"),
    (dict(choice=[]), "list of strings"),
])
def test_bad_structured_params_are_value_errors(kw, needle):
    with pytest.raises(ValueError, match=needle):
        detllm.StructuredOutputsParams(**kw)


@pytest.mark.parametrize("kw,needle", [
    (dict(min_tokens=20, max_tokens=10), "min_tokens"),
    (dict(allowed_token_ids=[]), "allowed_token_ids"),
    (dict(bad_words="word"), "bad_words"),
    (dict(structured_outputs={"json": {}}), "StructuredOutputsParams"),
])
def test_bad_token_rules_are_value_errors(kw, needle):
    with pytest.raises(ValueError, match=needle):
        detllm.SamplingParams(**kw)


def test_an_invalid_grammar_is_an_engine_error_naming_it(llm):
    with pytest.raises(detllm.Error, match="regex"):
        gen(llm, structured_outputs=detllm.StructuredOutputsParams(regex="([a-z"))


def test_token_rules(llm, http_server):
    plain = gen(llm, "List the days of the week: Monday, Tuesday,", temperature=0, max_tokens=12)
    assert "Wednesday" in plain.text
    banned = gen(llm, "List the days of the week: Monday, Tuesday,", temperature=0,
                 max_tokens=12, bad_words=["Wednesday"])
    assert "Wednesday" not in banned.text
    allowed = sorted(set(plain.token_ids[:3]))
    only = gen(llm, "List the days of the week: Monday, Tuesday,", temperature=0, max_tokens=6,
               allowed_token_ids=allowed)
    assert set(only.token_ids) <= set(allowed)
    # A chat turn (the model's template, rendered by the server), which the model ends with its
    # end-of-turn id.
    hi = http_server.post("/tokenize", {"messages": [{"role": "user", "content": "Hi"}]}).json()[
        "tokens"]
    short = gen(llm, hi, temperature=0, max_tokens=40)
    assert short.finish_reason == "stop"
    longer = gen(llm, hi, temperature=0, max_tokens=40, min_tokens=len(short.token_ids) + 4)
    assert len(longer.token_ids) >= len(short.token_ids) + 4
    assert short.token_ids[-1] not in longer.token_ids[:len(short.token_ids) + 4]


def test_constrained_batch_gives_each_requests_bits_alone(llm):
    sps = [detllm.SamplingParams(max_tokens=40, temperature=0.9, seed=s, logprobs=2,
                                 structured_outputs=detllm.StructuredOutputsParams(json=SCHEMA))
           for s in range(6)]
    prompts = [f"Person number {s}, as JSON:" for s in range(6)]
    together = llm.generate(prompts, sps, use_tqdm=False)
    for p, sp, t in zip(prompts, sps, together):
        alone = llm.generate(p, sp, use_tqdm=False)[0].outputs[0]
        assert alone.token_ids == t.outputs[0].token_ids
        np.testing.assert_array_equal(bits(alone.token_logprobs), bits(t.outputs[0].token_logprobs))


def test_same_tokens_and_logprob_bits_as_over_http(llm, http_server):
    ids = llm.get_tokenizer().encode(PROMPT)
    out = gen(llm, ids, temperature=0.9, seed=11, logprobs=0, max_tokens=48,
              structured_outputs=detllm.StructuredOutputsParams(json=SCHEMA))
    r = http_server.post("/v1/completions", {
        "prompt": ids, "max_tokens": 48, "temperature": 0.9, "seed": 11, "logprobs": 0,
        "structured_outputs": {"json": SCHEMA}})
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    assert out.token_ids == lp["token_ids"]
    np.testing.assert_array_equal(bits(out.token_logprobs), bits(lp["token_logprobs"]))
