"""Speculative decoding through the real binary on the default model (docs/speculative.md):
`generate` with the n-gram drafter, with the model as its own draft model (`--speculative-model`,
and the same through `--speculative-config` JSON) prints the token ids of
plain decoding; a bad `--speculative-config` key and a draft model for the n-gram method are
refused by name. Token ids are compared, not text."""
import os
import re
import subprocess

import pytest

from conftest import find_binary

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
