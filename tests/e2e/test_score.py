"""`detllm score` (teacher forcing from the command line, no server) on the default model: its
logprobs are the server's bits (echo + logprobs on the same token ids, and the logprobs a
greedy generation reported), its greedy continuation is the server's, its raw logits file has
one row per position, and bad input is a clear error."""
import json
import os
import subprocess

import numpy as np

from conftest import find_binary

VOCAB = 49152  # SmolLM2-135M


def run_score(tmp_path, seqs, *extra):
    inp = tmp_path / "seqs.json"
    inp.write_text(json.dumps(seqs))
    out = tmp_path / "scores.json"
    r = subprocess.run([find_binary(), "score", "--input", str(inp), "--output", str(out),
                        "--threads", "2", *extra], capture_output=True, text=True, timeout=300)
    return r, (json.loads(out.read_text()) if r.returncode == 0 else None)


def test_score_equals_server_echo_and_generation(server, client, tmp_path):
    prompt_ids = server.post("/tokenize", {"prompt": "The capital of France is"}).json()["tokens"]
    gen = client.completions.create(model="default", prompt=prompt_ids, max_tokens=6,
                                    temperature=0, logprobs=0, extra_body={"ignore_eos": True})
    gen_ids = gen.choices[0].logprobs.model_extra["token_ids"]
    seq = prompt_ids + gen_ids
    echo = client.completions.create(model="default", prompt=seq, max_tokens=0, echo=True,
                                     logprobs=0)
    r, scores = run_score(tmp_path, [seq, prompt_ids], "--greedy", "6",
                          "--logits-dir", str(tmp_path / "logits"))
    assert r.returncode == 0, r.stderr
    assert "model loaded in" in r.stderr
    assert scores[0]["tokens"] == seq
    assert scores[0]["logprobs"][0] is None
    # Bits: the same float32 values through the same JSON path.
    assert scores[0]["logprobs"][1:] == echo.choices[0].logprobs.token_logprobs[1:]
    assert scores[0]["logprobs"][len(prompt_ids):] == gen.choices[0].logprobs.token_logprobs
    assert scores[1]["greedy"] == gen_ids
    logits = np.fromfile(tmp_path / "logits" / "seq0.f32", dtype="<f4")
    assert logits.shape == (len(seq) * VOCAB,)
    rows = logits.reshape(len(seq), VOCAB)
    assert [int(x) for x in rows[len(prompt_ids) - 1:-1].argmax(axis=1)] == gen_ids


def test_score_refuses_bad_input(tmp_path):
    for seqs, fragment in [([[1, VOCAB]], "outside the vocabulary"), ([], "JSON array"),
                           ([[1, "x"]], "outside the vocabulary"), ([[]], "non-empty")]:
        r, _ = run_score(tmp_path, seqs)
        assert r.returncode != 0
        assert fragment in r.stderr, r.stderr
    missing = subprocess.run([find_binary(), "score", "--input", str(tmp_path / "none.json")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "cannot read" in missing.stderr
    assert os.path.exists(tmp_path)
