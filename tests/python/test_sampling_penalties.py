"""presence_penalty, frequency_penalty, repetition_penalty and logit_bias in
detllm.SamplingParams (docs/python.md): range checks as ValueErrors naming the field, the
vocabulary checked by the engine, the penalties take effect, and a request from Python samples
the same tokens with the same fp32 logprobs as the same request through `detllm serve` over
HTTP (the real binary, $DETLLM_BIN: tests/CMakeLists.txt sets it)."""


import numpy as np
import pytest

import detllm
from conftest import bits

PROMPT = "List the days of the week: Monday, Tuesday,"
REPETITIVE = "Say it again and again: yes yes yes yes yes"


@pytest.mark.parametrize("kw,needle", [
    (dict(presence_penalty=2.5), "presence_penalty"),
    (dict(presence_penalty=float("nan")), "presence_penalty"),
    (dict(frequency_penalty=-2.01), "frequency_penalty"),
    (dict(repetition_penalty=0.0), "repetition_penalty"),
    (dict(repetition_penalty=101.0), "repetition_penalty"),
    (dict(logit_bias=[(5, 1.0)]), "dict"),
    (dict(logit_bias={"x": 1.0}), "not a token id"),
    (dict(logit_bias={-1: 1.0}), "outside"),
    (dict(logit_bias={True: 1.0}), "not a token id"),
    (dict(logit_bias={5: 150.0}), "[-100, 100]"),
    (dict(logit_bias={5: float("inf")}), "[-100, 100]"),
    (dict(logit_bias={5: "1"}), "number"),
    (dict(logit_bias={5: 1.0, "5": 2.0}), "twice"),
    (dict(logit_bias={i: 1.0 for i in range(1025)}), "at most 1024"),
])
def test_bad_values_are_value_errors_naming_the_field(kw, needle):
    with pytest.raises(ValueError) as e:
        detllm.SamplingParams(**kw)
    assert needle in str(e.value)


def test_vocabulary_is_checked_by_the_engine(llm):
    with pytest.raises(detllm.Error, match="outside the vocabulary"):
        llm.generate("hi", detllm.SamplingParams(max_tokens=2, logit_bias={10**7: 1.0}),
                     use_tqdm=False)


def test_logit_bias_forces_and_bans_tokens(llm):
    forced = llm.generate(PROMPT, detllm.SamplingParams(max_tokens=6, temperature=0,
                                                        logit_bias={1000: 100}), use_tqdm=False)
    assert forced[0].outputs[0].token_ids == [1000] * 6
    # OpenAI's JSON keys are decimal strings: accepted too, the same request.
    as_str = llm.generate(PROMPT, detllm.SamplingParams(max_tokens=6, temperature=0,
                                                        logit_bias={"1000": 100}), use_tqdm=False)
    assert as_str[0].outputs[0].token_ids == [1000] * 6
    plain = llm.generate(PROMPT, detllm.SamplingParams(max_tokens=6, temperature=0),
                         use_tqdm=False)[0].outputs[0].token_ids
    banned = llm.generate(PROMPT, detllm.SamplingParams(max_tokens=6, temperature=0,
                                                        logit_bias={plain[0]: -100}),
                          use_tqdm=False)[0].outputs[0].token_ids
    assert banned[0] != plain[0]


def test_penalties_make_a_repetitive_greedy_output_repeat_less(llm):
    def run(**kw):
        sp = detllm.SamplingParams(max_tokens=24, temperature=0, **kw)
        return llm.generate(REPETITIVE, sp, use_tqdm=False)[0].outputs[0].token_ids

    plain = run()
    penalised = run(frequency_penalty=2.0, presence_penalty=2.0)
    assert len(set(penalised)) > len(set(plain)), (plain, penalised)
    assert run(repetition_penalty=1.5) != plain


CASES = [
    dict(temperature=0.9, seed=77, presence_penalty=0.7, frequency_penalty=0.4,
         repetition_penalty=1.3, logit_bias={28: 2.5, 1000: -1}),
    dict(temperature=0.0, seed=0, repetition_penalty=1.5, frequency_penalty=-0.3),
    dict(temperature=1.0, seed=5, top_p=0.9, presence_penalty=-1.1, logit_bias={13: 7.25}),
]


@pytest.mark.parametrize("case", CASES)
def test_same_tokens_and_logprob_bits_as_over_http(llm, http_server, case):
    """One request from Python and through /v1/completions (the same prompt ids): the same
    token ids and the same fp32 logprobs, bit for bit (the JSON numbers round-trip float32)."""
    ids = llm.get_tokenizer().encode(PROMPT)
    sp = detllm.SamplingParams(max_tokens=20, logprobs=0, **case)
    out = llm.generate([ids], sp, use_tqdm=False)[0].outputs[0]
    body = dict(case, logit_bias={str(k): v for k, v in case.get("logit_bias", {}).items()})
    r = http_server.post("/v1/completions", {"prompt": ids, "max_tokens": 20, "logprobs": 0,
                                             **body})
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    assert len(out.token_ids) == 20
    assert out.token_ids == lp["token_ids"]
    np.testing.assert_array_equal(bits(out.token_logprobs), bits(lp["token_logprobs"]))
    # The penalties took effect: without them the tokens differ.
    plain = {k: v for k, v in case.items() if k in ("temperature", "seed", "top_p")}
    again = llm.generate([ids], detllm.SamplingParams(max_tokens=20, **plain), use_tqdm=False)
    assert again[0].outputs[0].token_ids != out.token_ids
