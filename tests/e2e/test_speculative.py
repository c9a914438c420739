"""Speculative decoding through the real binary on the default model (docs/speculative.md):
`generate` with the n-gram drafter, with the model as its own draft model (`--speculative-model`,
and the same through `--speculative-config` JSON) prints the token ids of
plain decoding; a bad `--speculative-config` key and a draft model for the n-gram method are
refused by name; `detllm serve` with the n-gram drafter reports its acceptance in `/metrics`
under vLLM's names, and a request with `"speculative": false` gets the same token ids and
logprobs. Token ids are compared, not text."""
import os
import re
import subprocess

import pytest

from conftest import find_binary, start_server

PROMPT = "Repeat after me: red green blue, red green blue, red green blue"
N_TOKENS = 12


def run(*args, timeout=300):
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)


def model_path():
    path = os.environ.get("DETLLM_DEFAULT_MODEL")
    if not path or not os.path.exists(path):
        pytest.skip("the default model is not installed (set DETLLM_DEFAULT_MODEL)")
    return path


def generate(*extra):
    r = run("generate", PROMPT, "-n", str(N_TOKENS), "--ignore-eos", "--threads", "2",
            "--print-token-ids", *extra)
    assert r.returncode == 0, r.stderr
    ids = re.search(r"generated token ids: ([\d ]+)", r.stderr).group(1).split()
    return [int(t) for t in ids], r.stderr


def test_every_drafter_gives_plain_decodings_ids():
    draft = model_path()
    plain, _ = generate()
    for extra in (["--speculative-method", "ngram", "--prompt-lookup-min", "1"],
                  ["--speculative-model", draft, "--num-speculative-tokens", "3"],
                  ["--speculative-config",
                   '{"method": "draft_model", "model": "%s", "num_speculative_tokens": 4}' % draft]):
        ids, log = generate(*extra)
        assert ids == plain, (extra, log)
        assert re.search(r"speculative \w+: \d+ of [1-9]\d* drafts accepted", log), (extra, log)


def test_bad_speculative_settings_are_refused_by_name():
    draft = model_path()
    r = run("generate", PROMPT, "-n", "1", "--speculative-config", '{"draft_tensor_parallel_size": 1}')
    assert r.returncode != 0 and "draft_tensor_parallel_size" in r.stderr, r.stderr
    r = run("generate", PROMPT, "-n", "1", "--speculative-method", "ngram",
            "--speculative-model", draft)
    assert r.returncode != 0 and "draft_model" in r.stderr, r.stderr


def test_serve_reports_acceptance_in_metrics_under_vllms_names():
    model_path()
    server = start_server("--speculative-method", "ngram", "--num-speculative-tokens", "4",
                          "--prompt-lookup-min", "1", "--prompt-lookup-max", "3",
                          "--no-speculative-adaptive")
    try:
        def complete(speculative):
            body = {"prompt": PROMPT, "max_tokens": N_TOKENS, "temperature": 0,
                    "ignore_eos": True, "logprobs": 1, "return_tokens_as_token_ids": True,
                    "speculative": speculative}
            r = server.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            lp = choice["logprobs"]
            return lp["tokens"], lp["token_logprobs"]

        before = server.metrics()
        plain = complete(False)
        after_plain = server.metrics()
        drafted = complete(True)
        after = server.metrics()
        assert drafted == plain  # token ids and logprobs, bit for bit through JSON
        delta = {k: after[k] - after_plain.get(k, 0.0) for k in after
                 if k.startswith("vllm:spec_decode")}
        # the request without speculation proposed nothing
        drafts_key = "vllm:spec_decode_num_drafts_total"
        assert after_plain[drafts_key] == before[drafts_key]
        drafts = delta["vllm:spec_decode_num_drafts_total"]
        proposed = delta["vllm:spec_decode_num_draft_tokens_total"]
        accepted = delta["vllm:spec_decode_num_accepted_tokens_total"]
        assert drafts >= 1 and proposed >= drafts and 1 <= accepted <= proposed, delta
        per_pos = [delta['vllm:spec_decode_num_accepted_tokens_per_pos_total{position="%d"}' % i]
                   for i in range(4)]
        assert sum(per_pos) == accepted, delta
        assert all(a >= b for a, b in zip(per_pos, per_pos[1:])), per_pos  # a prefix each
        assert per_pos[0] <= drafts, delta
    finally:
        server.stop()
