"""detllm.LLM(speculative_config={...}) with vLLM's dict names (docs/speculative.md): the n-gram
drafter and the model as its own draft model give plain decoding's token ids and logprobs, bit
for bit, greedy and seeded, n = 2; unknown keys and methods are refused by name."""

import pytest

import detllm
from conftest import bits, make_llm

PROMPTS = ["Repeat after me: red green blue, red green blue, red green blue",
           "1, 2, 3, 1, 2, 3, 1, 2, 3,"]


def outputs(llm):
    params = [detllm.SamplingParams(max_tokens=12, temperature=0.0, logprobs=2, ignore_eos=True),
              detllm.SamplingParams(max_tokens=12, temperature=0.8, seed=5, n=2, logprobs=1,
                                    ignore_eos=True)]
    out = []
    for sp in params:
        for r in llm.generate(PROMPTS, sp, use_tqdm=False):
            for c in r.outputs:
                out.append((list(c.token_ids), bits(c.token_logprobs).tolist()))
    return out


@pytest.fixture(scope="module")
def plain():
    return outputs(make_llm())


@pytest.mark.parametrize("config", [
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
     "prompt_lookup_max": 3},
    {"method": "ngram", "num_speculative_tokens": 2},
])
def test_speculation_changes_no_bit(plain, config):
    assert outputs(make_llm(speculative_config=config)) == plain


def test_draft_model_changes_no_bit(plain):
    model = detllm.llm.default_model_path()
    config = {"method": "draft_model", "model": model, "num_speculative_tokens": 3}
    assert outputs(make_llm(speculative_config=config)) == plain


def test_bad_speculative_config_is_refused_by_name():
    with pytest.raises(ValueError, match="draft_tensor_parallel_size"):
        make_llm(speculative_config={"method": "ngram", "num_speculative_tokens": 2,
                                     "draft_tensor_parallel_size": 1})
    with pytest.raises(ValueError, match="eagle"):
        make_llm(speculative_config={"method": "eagle", "num_speculative_tokens": 2})
