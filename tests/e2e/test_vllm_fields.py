"""vLLM's request fields through the real binary and the real `openai` client (docs/server.md,
"vLLM request fields"): each one's semantics, as vLLM defines it, on the default model."""
import pytest

openai = pytest.importorskip("openai")

PROMPT = "List the days of the week: Monday, Tuesday,"


def ids_of(choice):
    return choice.logprobs.model_extra["token_ids"]


def complete(client, **kw):
    kw.setdefault("model", "default")
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("temperature", 0)
    kw.setdefault("logprobs", 0)
    return client.completions.create(**kw).choices[0]


def say_hi(client, **extra):
    """A greedy chat reply to "Hi" (the default model answers in a few tokens and stops):
    (text, token ids, finish_reason)."""
    r = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=64,
        temperature=0, logprobs=True, extra_body=extra or None).choices[0]
    return r.message.content, [e.token_id for e in r.logprobs.content], r.finish_reason


def test_min_tokens_masks_eos_until_reached(client):
    _, plain, finish = say_hi(client)
    assert finish == "stop"
    eos = plain[-1]
    _, longer, _ = say_hi(client, min_tokens=len(plain) + 5)
    assert len(longer) >= len(plain) + 5
    assert eos not in longer[:len(plain) + 5]
    # Up to where greedy took the end-of-text id, the mask changed nothing.
    assert longer[:len(plain) - 1] == plain[:-1]


def test_min_tokens_above_max_tokens_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, max_tokens=4, extra_body={"min_tokens": 5})
    assert e.value.body["param"] == "min_tokens"


def test_allowed_token_ids_restricts_every_token(client):
    base = ids_of(complete(client, max_tokens=8))
    allowed = sorted(set(base[1:4])) + [base[0] + 1]
    got = ids_of(complete(client, max_tokens=8, extra_body={"allowed_token_ids": allowed}))
    assert got and all(t in allowed for t in got), (got, allowed)
    assert got[0] != base[0]  # greedy's own first token was not allowed


def test_allowed_token_ids_outside_the_vocabulary_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, max_tokens=4, extra_body={"allowed_token_ids": [10 ** 7]})
    assert e.value.body["param"] == "allowed_token_ids"


def test_bad_words_are_never_completed(client, server):
    plain = complete(client, max_tokens=12)
    assert "Wednesday" in plain.text, plain.text
    banned = complete(client, max_tokens=12, extra_body={"bad_words": ["Wednesday"]})
    assert "Wednesday" not in banned.text, banned.text
    # The text before the banned word is the same as without the rule.
    assert banned.text.startswith(plain.text.split("Wednesday")[0])


def test_skip_special_tokens_false_keeps_the_end_of_text_token(client, server):
    skipped, ids, _ = say_hi(client)
    eos_text = server.post("/detokenize", {"tokens": [ids[-1]]}).json()["prompt"]
    assert eos_text and eos_text not in skipped
    kept, _, _ = say_hi(client, skip_special_tokens=False)
    assert kept == skipped + eos_text
    # spaces_between_special_tokens: accepted (no effect with this detokenizer).
    same, _, _ = say_hi(client, skip_special_tokens=False, spaces_between_special_tokens=False)
    assert same == kept


def test_include_stop_str_in_output(client):
    cut = complete(client, max_tokens=16, stop=["Thursday"])
    kept = complete(client, max_tokens=16, stop=["Thursday"],
                    extra_body={"include_stop_str_in_output": True})
    assert cut.finish_reason == kept.finish_reason == "stop"
    assert kept.text == cut.text + "Thursday"


def test_return_tokens_as_token_ids(client):
    c = complete(client, max_tokens=4, logprobs=2,
                 extra_body={"return_tokens_as_token_ids": True})
    assert c.logprobs.tokens == [f"token_id:{t}" for t in ids_of(c)]
    for top in c.logprobs.top_logprobs:
        assert all(k.startswith("token_id:") for k in top)
    chat = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
        temperature=0, logprobs=True, top_logprobs=1,
        extra_body={"return_tokens_as_token_ids": True})
    for entry in chat.choices[0].logprobs.content:
        assert entry.token.startswith("token_id:")


def test_prompt_logprobs_equal_echo_scoring(client, server):
    r = server.post("/v1/completions", {"model": "default", "prompt": PROMPT, "max_tokens": 2,
                                        "temperature": 0, "prompt_logprobs": 2}).json()
    plp = r["choices"][0]["prompt_logprobs"]
    scored = complete(client, max_tokens=0, echo=True, logprobs=0)
    ids = ids_of(scored)
    assert len(plp) == len(ids) and plp[0] is None
    for i in range(1, len(ids)):
        entry = plp[i][str(ids[i])]
        assert entry["logprob"] == scored.logprobs.token_logprobs[i]
        assert entry["rank"] >= 1
        ranks = sorted(v["rank"] for k, v in plp[i].items() if k != str(ids[i]))
        assert ranks[:2] == [1, 2] or entry["rank"] in (1, 2)
    streamed = server.post("/v1/completions", {"model": "default", "prompt": PROMPT,
                                               "max_tokens": 2, "prompt_logprobs": 1,
                                               "stream": True})
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "prompt_logprobs"
    chat = server.post("/v1/chat/completions", {
        "model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
        "prompt_logprobs": 0}).json()
    assert chat["prompt_logprobs"][0] is None and len(chat["prompt_logprobs"]) > 3


def test_truncate_prompt_tokens_keeps_the_last_tokens(client, server):
    ids = server.post("/tokenize", {"prompt": PROMPT}).json()["tokens"]
    r = server.post("/v1/completions", {"model": "default", "prompt": PROMPT, "max_tokens": 4,
                                        "temperature": 0, "logprobs": 0,
                                        "truncate_prompt_tokens": 5}).json()
    assert r["usage"]["prompt_tokens"] == 5
    tail = complete(client, prompt=ids[-5:], max_tokens=4)
    assert r["choices"][0]["logprobs"]["token_ids"] == ids_of(tail)
    with pytest.raises(openai.BadRequestError):
        complete(client, max_tokens=4, extra_body={"truncate_prompt_tokens": 0})


def test_priority_other_than_zero_is_a_400(client):
    complete(client, max_tokens=2, extra_body={"priority": 0})
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, max_tokens=2, extra_body={"priority": 3})
    assert e.value.body["param"] == "priority"


def test_an_unknown_field_is_still_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, max_tokens=2, extra_body={"min_tokenz": 1})
    assert "min_tokenz" in e.value.body["message"]


def test_continue_final_message_continues_the_assistant_message(client, server):
    messages = [{"role": "user", "content": "Count to ten."},
                {"role": "assistant", "content": "One, two, three,"}]
    r = server.post("/v1/chat/completions", {
        "model": "default", "messages": messages, "max_tokens": 8, "temperature": 0,
        "logprobs": True, "add_generation_prompt": False,
        "continue_final_message": True}).json()
    ids = [e["token_id"] for e in r["choices"][0]["logprobs"]["content"]]
    # The same as completing the rendered conversation cut right after the message's content.
    rendered = server.post("/detokenize", {"tokens": server.post("/tokenize", {
        "messages": messages, "add_generation_prompt": False}).json()["tokens"]}).json()["prompt"]
    prompt = rendered[:rendered.rindex("One, two, three,") + len("One, two, three,")]
    assert r["usage"]["prompt_tokens"] == len(server.post("/tokenize", {
        "prompt": prompt, "add_special_tokens": False}).json()["tokens"])
    plain = complete(client, prompt=prompt, max_tokens=8)
    assert ids_of(plain) == ids
    for bad in ({"continue_final_message": True},  # add_generation_prompt defaults to true
                {"continue_final_message": True, "add_generation_prompt": False,
                 "messages": messages[:1]}):
        body = {"model": "default", "messages": messages, "max_tokens": 2, **bad}
        resp = server.post("/v1/chat/completions", body)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == \
            "continue_final_message", resp.text


def test_use_beam_search_is_a_clear_400(client):
    complete(client, max_tokens=2, extra_body={"use_beam_search": False})
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, max_tokens=2, extra_body={"use_beam_search": True})
    assert e.value.body["param"] == "use_beam_search"
    assert "beam search" in e.value.body["message"]
