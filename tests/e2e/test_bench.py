"""`detllm bench` from the outside: on synthetic tiny-llama on the CPU it prints the offline
table (and the online one with --rate), writes JSON whose every result carries its
conditions, compares several modes in one run, runs verified (LLM-42),
and refuses what it cannot run (the 8B synthetic model on the CPU, a 4k prompt in a 2k
context) with a message. A few seconds in all.
"""
import json
import os

import pytest

from conftest import DEFAULT_MODEL
from test_check import run_detllm

TINY = ["bench", "--model", "synthetic:tiny-llama", "--backend", "cpu", "--threads", "2"]


def test_bench_fixed_prints_the_table():
    r = run_detllm(*TINY, "--workload", "fixed", "--n", "8", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "# detllm bench: synthetic:tiny-llama on cpu, workload fixed" in out, out
    assert "## Offline throughput" in out, out
    rows = [l for l in out.splitlines() if l.startswith("| invariant |")]
    assert len(rows) == 1, out  # one mode, one share (100 %)
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == "100" and cells[2] == "8", rows[0]
    assert float(cells[4]) > 0, rows[0]  # output tokens/s
    assert "mixed traffic" in out and "no deterministic row" in out, out
    assert "requests done" in r.stderr, r.stderr  # progress on stderr


def test_bench_modes_shares_rates_and_json(tmp_path):
    path = tmp_path / "bench.json"
    r = run_detllm(*TINY, "--workload", "fixed", "--n", "6", "--input-len", "24",
                   "--output-len", "6", "--modes", "invariant,fast", "--det-share", "0,50",
                   "--rate", "200", "--json", str(path), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "## Online latency" in r.stdout, r.stdout
    j = json.loads(path.read_text())
    assert [m["mode"] for m in j["modes"]] == ["invariant", "fast"]
    res = j["results"]
    assert len(res) == 2 * (2 + 2)  # per mode: 2 offline shares + 1 rate x 2 shares
    for x in res:
        assert x["output_tokens"] == 6 * 6 and x["prompt_tokens"] == 6 * 24, x
        assert x["n_deterministic"] == round(6 * x["det_share"] / 100), x
        c = x["conditions"]
        assert c["mode"] == x["mode"] and "mode=" + x["mode"] in c["policy"], c
        assert c["model"] == "synthetic:tiny-llama" and c["backend"] == "cpu", c
        assert c["workload"] == "fixed" and c["git_commit"], c
        assert "max_tokens_per_step" in c["engine"], c
    online = [x for x in res if x["kind"] == "online"]
    assert {x["rate"] for x in online} == {200.0}
    assert all(x["output_tps_vs_fast"] is not None for x in res)
    assert "warm-up of 6 requests at 100% deterministic" in r.stderr, r.stderr  # not under fast
    assert r.stderr.count("warm-up of 6 requests") == 3, r.stderr


def test_bench_repeat_reports_the_median_and_the_spread(tmp_path):
    path = tmp_path / "bench.json"
    r = run_detllm(*TINY, "--workload", "fixed", "--n", "4", "--input-len", "16",
                   "--output-len", "4", "--modes", "fast,invariant", "--det-share", "100",
                   "--repeat", "3", "--rate", "400", "--json", str(path), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| runs: duration s min–max |" in r.stdout, r.stdout
    assert r.stderr.count("(run 3/3): 4/4 requests done") == 2, r.stderr  # offline only
    j = json.loads(path.read_text())
    assert j["conditions"]["repeat"] == 3
    for x in j["results"]:
        d = x["repeat_durations_s"]
        if x["kind"] == "online":
            assert d == [], x  # online runs are made once
        else:
            assert len(d) == 3 and sorted(d)[1] == x["duration_s"], x


def test_bench_verified_and_refusals():
    r = run_detllm(*TINY, "--workload", "fixed", "--n", "2", "--mode", "verified", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "| verified |" in r.stdout, r.stdout
    r = run_detllm("bench", "--model", "synthetic:llama-3.1-8b", "--backend", "cpu",
                   "--workload", "fixed", "--n", "2", timeout=60)
    assert r.returncode == 1 and "--backend cuda" in r.stderr, r.stderr
    r = run_detllm(*TINY, "--workload", "long", "--n", "2", timeout=60)
    assert r.returncode == 1 and "context" in r.stderr, r.stderr


def test_bench_request_file_of_the_real_model(tmp_path):
    """--save-only reads the model's config and tokenizer, not its weights; the file then runs."""
    if not os.path.exists(DEFAULT_MODEL):
        pytest.skip("the default model is not installed (scripts/setup.sh)")
    path = tmp_path / "requests.jsonl"
    shape = ["--workload", "fixed", "--n", "3", "--input-len", "16", "--output-len", "4"]
    r = run_detllm("bench", *shape, "--save-requests", str(path), "--save-only", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "loading model" not in r.stderr, r.stderr  # no weights read
    assert "wrote 3 requests" in r.stderr, r.stderr
    path_json = tmp_path / "run.json"
    r = run_detllm("bench", "--threads", "2", "--workload", "file", "--requests", str(path),
                   "--json", str(path_json), timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(path_json.read_text())["results"]
    assert res and all(x["output_tokens"] == 3 * 4 and x["prompt_tokens"] == 3 * 16 for x in res)


def test_bench_step_trace_lists_every_step(tmp_path):
    trace, path = tmp_path / "steps.csv", tmp_path / "bench.json"
    r = run_detllm(*TINY, "--workload", "fixed", "--n", "5", "--input-len", "24",
                   "--output-len", "4", "--modes", "invariant,fast", "--step-trace", str(trace), "--json", str(path), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = trace.read_text().splitlines()
    assert lines[0] == ("mode,det_share,rate,step,ms,computed_tokens,generated_tokens,"
                        "padded,replayed,captured"), lines[0]
    rows = [l.split(",") for l in lines[1:]]
    res = json.loads(path.read_text())["results"]
    for mode in ("invariant", "fast"):
        mine = [x for x in rows if x[0] == mode]
        run = [x for x in res if x["mode"] == mode][0]
        assert len(mine) == run["n_steps"], (mode, len(mine), run["n_steps"])
        assert [int(x[3]) for x in mine] == list(range(len(mine)))
        assert sum(int(x[5]) for x in mine) == run["n_computed_tokens"] > 0
        assert sum(int(x[6]) for x in mine) == 5 * 4
        assert all(float(x[4]) > 0 for x in mine)
        assert sum(int(x[7]) for x in mine) == run["steps_by_kind"]["padded"]["n"]
        assert sum(int(x[8]) for x in mine) == run["steps_by_kind"]["padded"]["graph_replays"]


def test_bench_synthetic_moe_quantized_and_refusals():
    """A synthetic mixture of experts with every matrix Q8_0 runs on the CPU (host weights);
    an unknown block type is refused naming the ones that exist."""
    r = run_detllm("bench", "--model", "synthetic:tiny-qwen3-moe@q8_0", "--backend", "cpu",
                   "--threads", "2", "--workload", "fixed", "--n", "2", "--input-len", "16",
                   "--output-len", "4", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "16 experts of 32, top-4" in r.stdout and "every matrix q8_0" in r.stdout, r.stdout
    assert "| invariant |" in r.stdout, r.stdout
    r = run_detllm("bench", "--model", "synthetic:mini-olmoe@q5_k", "--backend", "cpu",
                   "--workload", "fixed", "--n", "2", timeout=60)
    assert r.returncode == 1 and "q8_0, q4_0 or q4_1" in r.stderr, r.stderr


def test_bench_fp8_synthetic_and_loaded_models_in_every_mode(tmp_path):
    """--quantization fp8 and --kv-dtype fp8 reach the model: a synthetic one is made on the
    host and its projections rounded to FP8 (the report says so), and a loaded checkpoint is
    quantized once and kept for the next mode (it was refused as 'FP8 already' before)."""
    path = tmp_path / "fp8.json"
    r = run_detllm(*TINY, "--quantization", "fp8", "--kv-dtype", "fp8", "--workload", "fixed",
                   "--n", "4", "--input-len", "16", "--output-len", "4",
                   "--modes", "invariant,fast", "--json", str(path), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "projections FP8 per channel (--quantization fp8)" in r.stdout, r.stdout
    assert r.stderr.count("kv=fp8") >= 2, r.stderr  # both modes' backends
    j = json.loads(path.read_text())
    assert [m["mode"] for m in j["modes"]] == ["invariant", "fast"]
    assert all(x["output_tokens"] == 16 for x in j["results"]), j["results"]
    r = run_detllm("bench", "--model", DEFAULT_MODEL, "--backend", "cpu", "--threads", "2",
                   "--quantization", "fp8", "--workload", "fixed", "--n", "2",
                   "--input-len", "8", "--output-len", "2", "--modes", "invariant,fast",
                   timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| invariant |" in r.stdout and "| fast |" in r.stdout, r.stdout
    r = run_detllm("bench", "--model", "synthetic:tiny-llama@q8_0", "--backend", "cpu",
                   "--quantization", "fp8", "--workload", "fixed", "--n", "2", timeout=60)
    assert r.returncode == 1 and "q8_0 already; drop one of them" in r.stderr, r.stderr


def test_bench_speculative_reports_acceptance(tmp_path):
    """serve's speculative flags: every mode drafts; each run reports vLLM's counters with the
    acceptance rate and the mean accepted length (1 + accepted / drafts)."""
    path = tmp_path / "bench.json"
    r = run_detllm(*TINY, "--workload", "fixed", "--n", "4", "--input-len", "24",
                   "--output-len", "24", "--max-seqs", "8", "--modes", "invariant,padded",
                   "--speculative-method", "ngram", "--num-speculative-tokens", "3",
                   "--prompt-lookup-min", "1", "--prompt-lookup-max", "2",
                   "--no-speculative-adaptive", "--json", str(path), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "## Speculative decoding" in r.stdout, r.stdout
    j = json.loads(path.read_text())
    assert len(j["results"]) == 2
    for x in j["results"]:
        s = x["speculative"]
        assert s["num_drafts"] >= 1 and s["num_draft_tokens"] >= s["num_drafts"], s
        assert 0 <= s["num_accepted_tokens"] <= s["num_draft_tokens"], s
        assert s["acceptance_rate"] == pytest.approx(
            s["num_accepted_tokens"] / s["num_draft_tokens"]), s
        assert s["mean_accepted_length"] == pytest.approx(
            1 + s["num_accepted_tokens"] / s["num_drafts"]), s
        spec = x["conditions"]["engine"]["speculative"]
        assert spec["method"] == "ngram" and spec["num_speculative_tokens"] == 3, spec
        assert x["output_tokens"] == 4 * 24, x  # drafts change no length
    rows = [l for l in r.stdout.split("## Speculative decoding")[1].splitlines()
            if l.startswith("| padded |")]
    assert len(rows) == 1, r.stdout


def test_bench_refuses_a_draft_model_for_a_synthetic_model():
    r = run_detllm(*TINY, "--workload", "fixed", "--n", "2", "--speculative-method",
                   "draft_model", "--speculative-model", "x.gguf", timeout=60)
    assert r.returncode != 0 and "synthetic" in r.stderr, r.stderr
