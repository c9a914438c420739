"""presence_penalty, frequency_penalty, repetition_penalty and logit_bias through the real
binary and the real `openai` client (docs/server.md, "Penalties"): they take effect, they are
replayable bit for bit (alone, streamed, and with other requests in the same batch), and bad
values are 400s that name the field. The same flags of `detllm generate` sample the tokens of
the same request over HTTP, and bad values are refused by name."""
import concurrent.futures
import json
import subprocess

import pytest

from conftest import find_binary

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


# ---- `detllm generate` flags: the same request as over HTTP, the same tokens ----------------

def cli_generate(prompt, *flags):
    """Runs `detllm generate` (the real binary), returns (prompt ids, generated ids, stdout)."""
    proc = subprocess.run([find_binary(), "generate", prompt, "--threads", "2",
                           "--print-token-ids", *flags],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr

    def ids(label):
        line = next(l for l in proc.stderr.splitlines() if l.startswith(f"[detllm] {label}:"))
        return [int(t) for t in line.split(":", 1)[1].split()]

    return ids("prompt token ids"), ids("generated token ids"), proc.stdout


@pytest.mark.parametrize("flags,body", [
    (["--temperature", "0.9", "--seed", "77", "--presence-penalty", "0.7",
      "--frequency-penalty", "0.4", "--repetition-penalty", "1.3", "--logit-bias", "28:2.5,1000:-1"],
     {"temperature": 0.9, "seed": 77, "presence_penalty": 0.7, "frequency_penalty": 0.4,
      "repetition_penalty": 1.3, "logit_bias": {"28": 2.5, "1000": -1}}),
    (["--temperature", "0", "--repetition-penalty", "1.5", "--frequency-penalty", "-0.3"],
     {"temperature": 0, "repetition_penalty": 1.5, "frequency_penalty": -0.3}),
    (["--temperature", "0", "--logit-bias", "1000:100"], {"temperature": 0, "logit_bias": {"1000": 100}}),
])
def test_cli_penalty_flags_sample_the_tokens_of_the_http_request(server, flags, body):
    """The flags are the server's fields: one request through `detllm generate` and through
    /v1/completions (the same prompt ids) samples the same token ids."""
    prompt_ids, cli_ids, _ = cli_generate(PROMPT, "-n", "20", *flags)
    r = server.post("/v1/completions", {"prompt": prompt_ids, "max_tokens": 20, "logprobs": 0,
                                        **body})
    assert r.status_code == 200, r.text
    http_ids = r.json()["choices"][0]["logprobs"]["token_ids"]
    assert len(http_ids) == len(cli_ids) > 0
    assert cli_ids == http_ids
    if "logit_bias" in body and body["logit_bias"] == {"1000": 100}:
        assert cli_ids == [1000] * 20
    # Without the penalties the sampled tokens differ (the flags took effect).
    plain = {k: v for k, v in body.items() if k in ("temperature", "seed")}
    r = server.post("/v1/completions", {"prompt": prompt_ids, "max_tokens": 20, "logprobs": 0,
                                        **plain})
    assert r.json()["choices"][0]["logprobs"]["token_ids"] != cli_ids


def test_cli_penalty_flags_are_explained_in_help():
    out = subprocess.run([find_binary(), "generate", "--help"], capture_output=True, text=True,
                         timeout=60).stdout
    for flag in ("--presence-penalty", "--frequency-penalty", "--repetition-penalty",
                 "--logit-bias ID:BIAS,..."):
        assert flag in out, out
    assert "OpenAI's" in out and "-100 bans a token" in out


@pytest.mark.parametrize("flags,needle", [
    (["--presence-penalty", "2.5"], "--presence-penalty"),
    (["--frequency-penalty", "-3"], "--frequency-penalty"),
    (["--repetition-penalty", "0"], "(0, 100]"),
    (["--repetition-penalty", "abc"], "(0, 100]"),
    (["--logit-bias", "5"], "not ID:BIAS"),
    (["--logit-bias", "x:1"], "not a token id"),
    (["--logit-bias", "-1:1"], "not a token id"),
    (["--logit-bias", "99999999999:1"], "not a token id"),
    (["--logit-bias", "5:150"], "[-100, 100]"),
    (["--logit-bias", "5:nan"], "not a number"),
    (["--logit-bias", "5:1x"], "not a number"),
    (["--logit-bias", "5:1,5:2"], "listed twice"),
    (["--logit-bias", "5:1,"], "not ID:BIAS"),
    (["--logit-bias", ""], "ID:BIAS pairs"),
    (["--logit-bias", ",".join(f"{i}:1" for i in range(1025))], "more than 1024"),
    (["--logit-bias", "99999999:1", "--no-self-check", "-n", "1"], "outside the vocabulary"),
])
def test_cli_bad_penalty_flags_are_refused_by_name(flags, needle):
    proc = subprocess.run([find_binary(), "generate", "hi", *flags], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert needle in proc.stderr, proc.stderr
