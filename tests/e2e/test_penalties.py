"""presence_penalty, frequency_penalty, repetition_penalty and logit_bias through the real
binary and the real `openai` client (docs/server.md, "Penalties"): they take effect, they are
replayable bit for bit (alone, streamed, and with other requests in the same batch), and bad
values are 400s that name the field."""
import concurrent.futures
import json

import pytest

PROMPT = "List the days of the week: Monday, Tuesday,"


def ids_and_logprobs(choice):
    lp = choice.logprobs
    return lp.model_extra["token_ids"], lp.token_logprobs


def test_logit_bias_forces_and_bans_tokens(client):
    forced = client.completions.create(model="default", prompt=PROMPT, max_tokens=6,
                                       temperature=0, logprobs=0, logit_bias={"1000": 100})
    ids, _ = ids_and_logprobs(forced.choices[0])
    assert ids == [1000] * 6, ids
    plain = client.completions.create(model="default", prompt=PROMPT, max_tokens=6,
                                      temperature=0, logprobs=0)
    first = ids_and_logprobs(plain.choices[0])[0][0]
    banned = client.completions.create(model="default", prompt=PROMPT, max_tokens=6,
                                       temperature=0, logprobs=0,
                                       logit_bias={str(first): -100})
    assert ids_and_logprobs(banned.choices[0])[0][0] != first


def test_penalties_change_a_repetitive_greedy_output(client):
    kw = dict(model="default", prompt="Say it again and again: yes yes yes yes yes",
              max_tokens=24, temperature=0, logprobs=0)
    plain, _ = ids_and_logprobs(client.completions.create(**kw).choices[0])
    penalised, _ = ids_and_logprobs(client.completions.create(
        frequency_penalty=2.0, presence_penalty=2.0, **kw).choices[0])
    assert penalised != plain
    # Each generated token's count is penalised: the penalised output repeats less.
    assert len(set(penalised)) > len(set(plain)), (plain, penalised)
    repeated, _ = ids_and_logprobs(client.completions.create(
        extra_body={"repetition_penalty": 1.5}, **kw).choices[0])
    assert repeated != plain


def test_penalised_requests_replay_bit_for_bit(client, server):
    kw = dict(model="default", prompt=PROMPT, max_tokens=20, temperature=0.9, seed=77,
              logprobs=3, presence_penalty=0.7, frequency_penalty=0.4,
              logit_bias={"28": 2.5, "1000": -1},
              extra_body={"repetition_penalty": 1.3})
    alone = client.completions.create(**kw)
    again = client.completions.create(**kw)
    assert ids_and_logprobs(alone.choices[0]) == ids_and_logprobs(again.choices[0])
    assert alone.choices[0].logprobs.top_logprobs == again.choices[0].logprobs.top_logprobs
    # With other requests in the same steps (V1): the same bits.
    others = [dict(model="default", prompt=f"Story {i}: once upon a time", max_tokens=30,
                   temperature=1.0, seed=i, frequency_penalty=(i % 3) * 0.5)
              for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        futures = [pool.submit(client.completions.create, **o) for o in others]
        busy = pool.submit(client.completions.create, **kw).result()
        for f in futures:
            f.result()
    assert ids_and_logprobs(busy.choices[0]) == ids_and_logprobs(alone.choices[0])
    # Streamed: the same tokens.
    body = {k: v for k, v in kw.items() if k != "extra_body"}
    body.update(kw["extra_body"], stream=True)
    r = server.post("/v1/completions", body, stream=True)
    streamed = []
    for line in r.iter_lines():
        if line.startswith(b"data: {"):
            for c in json.loads(line[6:])["choices"]:
                streamed += c["logprobs"]["token_ids"]
    assert streamed == ids_and_logprobs(alone.choices[0])[0]


def test_chat_takes_penalties(client):
    kw = dict(model="default", messages=[{"role": "user", "content": "Count to ten."}],
              max_tokens=12, temperature=0, logprobs=True)
    plain = client.chat.completions.create(**kw)
    penalised = client.chat.completions.create(frequency_penalty=2.0, presence_penalty=2.0,
                                               **kw)
    tokens = [t.model_extra["token_id"] for t in penalised.choices[0].logprobs.content]
    assert tokens != [t.model_extra["token_id"] for t in plain.choices[0].logprobs.content]
    forced = client.chat.completions.create(logit_bias={"1000": 100}, **kw)
    assert [t.model_extra["token_id"] for t in forced.choices[0].logprobs.content] == [1000] * 12


@pytest.mark.parametrize("field,value,needle", [
    ("presence_penalty", 2.5, "presence_penalty"),
    ("frequency_penalty", -2.5, "frequency_penalty"),
    ("repetition_penalty", 0, "repetition_penalty"),
    ("repetition_penalty", "1.1", "repetition_penalty"),
    ("logit_bias", {"99999999": 1}, "outside the vocabulary"),
    ("logit_bias", {"x": 1}, "not a token id"),
    ("logit_bias", {"5": 150}, "[-100, 100]"),
    ("logit_bias", {str(i): 1 for i in range(1025)}, "at most 1024"),
    ("logit_bias", [1, 2], "object"),
])
def test_bad_penalties_are_400s_naming_the_field(client, field, value, needle):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="default", prompt="x", max_tokens=2,
                                  extra_body={field: value})
    err = e.value.body
    assert err["param"] == field.split(".")[0], err
    assert needle in err["message"], err
