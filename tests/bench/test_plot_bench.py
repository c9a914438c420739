"""scripts/plot_bench.py on `detllm bench --json` documents: synthetic ones shaped exactly like
src/bench/report.cpp's report_json (every key it writes), and, when $DETLLM_BIN is set (CTest
sets it), one real tiny CPU bench run -- which also checks that the synthetic shape still
matches the bench's. Checks the PNGs (written, printed, non-trivial), what each figure draws
(series, panels, points, the conditions under the plots), the degenerate inputs (one share, one
rate, one request class, no fast, a missing section) and the unusable ones (exit status 2, a
message naming the file and the problem, no traceback). No GPU; a few seconds.

    .venv/bin/python -m pytest tests/bench/test_plot_bench.py -q
"""
import copy
import importlib.util
import json
import math
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "plot_bench.py")

H200 = "NVIDIA H200 (sm_90, 132 SMs, driver 13000, runtime 13000)"
CAVEAT = ("mixed traffic: deterministic requests run under the mode, the others on the fast "
          "numerics and unconstrained in every step that holds no deterministic row, so a step "
          "with one deterministic row runs as that row needs")
ALL_MODES = ["fast", "invariant", "bi-naive", "padded", "verified", "verified(g=128)"]
SPEED = {"fast": 1.0, "invariant": 1.02, "bi-naive": 0.42, "padded": 0.83, "verified": 0.74,
         "verified(g=128)": 0.8}


# --- synthetic documents: report_json of src/bench/report.cpp, key for key -------------------

def base_mode(label):
    return label.split("(")[0]  # "verified(g=128)" -> "verified" (src/bench/mode_runs.h)


def verify_json(label):
    if base_mode(label) != "verified":
        return None
    m = re.search(r"g=(\d+)", label)
    return {"window": 16, "group_tokens": int(m.group(1)) if m else 256,
            "group_min_requests": 4, "group_max_requests": 16, "max_wait_steps": 8}


def engine_json(label):
    padded = base_mode(label) == "padded"
    e = {"max_tokens_per_step": 8192, "max_seqs": 256, "chunk_size": 0,
         "det_isolated_prefill": padded, "kv_block_size": 16, "kv_blocks": 4096,
         "kv_cache_tokens": 65536, "prefix_cache": not padded, "max_model_len": 131072,
         "cuda_graphs": "auto", "decode_fixed_rows": 256 if padded else 0,
         "host_sampling": False}
    if verify_json(label):
        e["verify"] = verify_json(label)
    return e


def latency_json(n, base):
    return {"n": n, "mean": base * 1.1 if n else 0.0, "p50": base if n else 0.0,
            "p99": base * 2.5 if n else 0.0}


def class_json(n, scale):
    return {"ttft": latency_json(n, 40.0 * scale), "tpot": latency_json(n, 12.0 * scale),
            "e2e": latency_json(n, 900.0 * scale)}


def make_report(modes=("fast", "invariant"), shares=(100,), rates=(), offline=True,
                backend="cuda", model="synthetic:llama-3.1-8b", n=64, commit="4633eda0c1de",
                workload="fixed"):
    """A detllm bench --json document with every field report_json writes."""
    device = H200 if backend == "cuda" else "Intel(R) Xeon(R) Processor"
    shared = {"version": "0.1.0", "git_commit": commit, "started_at": "2026-11-29T20:00:00Z",
              "backend": backend,
              "host": "Intel(R) Xeon(R) Platinum 8480C, 16 hardware threads, 2 engine threads",
              "model": model,
              "model_description": f"{model}: llama, 32 layers, dim 4096, vocab 128256, "
                                   "bf16 weights generated in backend memory (seed 42)",
              "workload": workload,
              "workload_description": f"{workload}: {n} requests, 512 prompt tokens (random "
                                      "ids, seed 0), 128 output tokens each",
              "n_requests": n, "prompt_tokens": 512 * n, "output_tokens": 128 * n,
              "sampling": "greedy", "seed": 0, "warmup": True,
              "warmup_description": "untimed warm-up per mode: the first 64 requests, outputs "
                                    "capped at 16 tokens, at 0% and (except fast) 100% "
                                    "deterministic",
              "repeat": 1}

    def backend_description(mode):
        if backend == "cpu":
            return "cpu; build=x86-64-v3"
        numerics = "fast" if mode in ("fast", "padded") else "invariant"
        return (f"cuda; device 0: {device}; numerics={numerics}"
                + ("; gemm=fixed-tile" if mode == "bi-naive" else ""))

    def tps(mode, rate, share):
        return 2600.0 * SPEED.get(mode, 0.9) * (1 - 0.002 * share) / (1 + 0.01 * rate)

    runs = {m: [(0.0, s) for s in shares] if offline else [] for m in modes}
    for m in modes:
        runs[m] += [(float(r), s) for r in rates for s in shares]
    out_modes, results = [], []
    for m in modes:
        policy = f"det=invariant;other=fast;default=det;self_check=on;mode={base_mode(m)}"
        cond = dict(shared, mode=m, determinism_mode=base_mode(m), verify=verify_json(m),
                    policy=policy, backend_description=backend_description(m),
                    self_check="passed", engine=engine_json(m))
        out_modes.append({"mode": m, "determinism_mode": base_mode(m), "verify": verify_json(m),
                          "policy": policy, "backend_description": backend_description(m),
                          "self_check": "passed", "engine": engine_json(m), "setup_s": 15.2})
        for rate, share in runs[m]:
            n_det = round(n * share / 100)
            out = tps(m, rate, share)
            ref = tps("fast", rate, share) if "fast" in modes else None
            first = tps(modes[0], rate, share)
            scale = (1 + rate / 8) / SPEED.get(m, 0.9)
            results.append({
                "mode": m, "determinism_mode": base_mode(m),
                "kind": "online" if rate > 0 else "offline", "rate": rate,
                "det_share": float(share), "n_requests": n, "n_deterministic": n_det,
                "duration_s": 128 * n / out, "repeat_durations_s": [],
                "prompt_tokens": 512 * n,
                "output_tokens": 128 * n, "requests_per_s": out / 128,
                "output_tokens_per_s": out, "total_tokens_per_s": out * 5,
                "output_tps_vs_first_mode": out / first,
                "output_tps_vs_fast": out / ref if ref else None,
                "n_steps": 144, "n_computed_tokens": 640 * n, "n_cached_tokens": 0,
                "n_preemptions": 0,
                "verified": {"windows": 0, "verify_tokens": 0, "rollbacks": 0,
                             "rolled_back_tokens": 0, "verify_share": 0.0},
                "prefix_cache": {"hit_tokens": 0, "query_tokens": 512 * n, "hit_rate": 0.0},
                "step_ms": latency_json(144, 20.0),
                "latency_ms": {"deterministic": class_json(n_det, scale),
                               "other": class_json(n - n_det, scale * 0.9),
                               "all": class_json(n, scale)},
                "conditions": cond})
    return {"tool": "detllm bench", "conditions": shared, "caveat": CAVEAT, "modes": out_modes,
            "results": results}


# --- helpers ----------------------------------------------------------------------------------

def write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


def run_script(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def pb():
    """The script as a module (its figures are checked in-process: faster than PNG pixels)."""
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("plot_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import matplotlib
    matplotlib.use("Agg")
    return mod


def runs_of(pb, tmp_path, *docs):
    return pb.load([write(tmp_path, f"r{i}.json", d) for i, d in enumerate(docs)])


def data_axes(fig):
    return [ax for ax in fig.axes if ax.lines]


def series_lines(ax):
    """(x, y) of every drawn line except the reference lines (axhline)."""
    out = []
    for line in ax.lines:
        xs = list(line.get_xdata())
        if len(xs) == 2 and xs == [0, 1] and line.get_transform() != ax.transData:
            continue
        out.append(([float(x) for x in xs], [float(y) for y in line.get_ydata()]))
    return out


def footnote(fig):
    """The title and the conditions under the plots, whitespace (line wrapping) collapsed."""
    return " ".join((fig.get_suptitle() + " " + " ".join(t.get_text() for t in fig.texts))
                    .split())


def legend_labels(fig):
    return [t.get_text() for lg in fig.legends for t in lg.get_texts()]


def assert_png(path, min_kb=20):
    assert os.path.isfile(path), path
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > min_kb * 1024, (path, len(data))
    import matplotlib.image as mpimg
    img = mpimg.imread(path)
    h, w = img.shape[:2]
    assert w >= 500 and h >= 250, (path, img.shape)
    ink = (img[..., :3].min(axis=2) < 0.9).mean()  # share of non-white pixels
    assert ink > 0.02, (path, ink)
    coloured = (img[..., :3].max(axis=2) - img[..., :3].min(axis=2) > 0.3).mean()
    assert coloured > 0.0002, (path, coloured)  # the series (a point at least), not just text


def assert_clean_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("plot_bench.py: error: "), r.stderr  # one line, last
    assert all(x.startswith("plot_bench.py: note: ") for x in lines[:-1]), r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)
    assert r.stdout == "", r.stdout


# --- the command line -------------------------------------------------------------------------

def test_cli_writes_both_figures_and_prints_their_paths(tmp_path):
    pytest.importorskip("matplotlib")
    doc = make_report(modes=ALL_MODES, shares=(0, 2, 10, 50, 100), rates=(1, 4, 16, 64))
    out = tmp_path / "plots"
    r = run_script(write(tmp_path, "bench.json", doc), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    paths = r.stdout.split()
    assert paths == [str(out / "throughput_vs_share.png"), str(out / "latency_vs_rate.png")]
    for p in paths:
        assert_png(p)
    assert "at 50% deterministic" in r.stderr, r.stderr  # the default share, said


def test_cli_merges_an_offline_and_an_online_file_with_share_all(tmp_path):
    pytest.importorskip("matplotlib")
    off = make_report(modes=["fast", "invariant", "padded"], shares=(0, 50, 100),
                      commit="aaaaaaaaaaaa")
    on = make_report(modes=["fast", "invariant"], shares=(0, 50, 100), rates=(2, 8),
                     offline=False, commit="bbbbbbbbbbbb")
    r = run_script(write(tmp_path, "off.json", off), write(tmp_path, "on.json", on), "--out",
                   str(tmp_path), "--share", "all", "--prefix", "h200_", "--dpi", "60")
    assert r.returncode == 0, r.stderr
    names = [os.path.basename(p) for p in r.stdout.split()]
    assert names == ["h200_throughput_vs_share.png", "h200_latency_vs_rate_det0.png",
                     "h200_latency_vs_rate_det50.png", "h200_latency_vs_rate_det100.png"]
    for p in r.stdout.split():
        assert_png(p, min_kb=8)
    assert "no deterministic requests at 0%" in r.stderr, r.stderr
    assert "no other (non-deterministic) requests at 100%" in r.stderr, r.stderr


def test_cli_single_section_is_skipped_with_a_note(tmp_path):
    pytest.importorskip("matplotlib")
    doc = make_report(modes=["invariant"], shares=(100,))
    r = run_script(write(tmp_path, "one.json", doc), "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert [os.path.basename(p) for p in r.stdout.split()] == ["throughput_vs_share.png"]
    assert "no online results: latency_vs_rate.png skipped" in r.stderr, r.stderr
    assert "ratio panel is left out" in r.stderr, r.stderr
    assert_png(r.stdout.split()[0], min_kb=10)


def test_help_explains_the_outputs():
    r = run_script("--help")
    assert r.returncode == 0, r.stderr
    for s in ("--out", "--share", "throughput_vs_share.png", "latency_vs_rate.png",
              "Exit status", "verified(g=128)"):
        assert s in r.stdout, s


# --- unusable input: exit status 2, one line saying what is wrong, no traceback ---------------

def _result_without(key):
    d = make_report()
    del d["results"][0][key]
    return d


def _bad_latency():
    d = make_report(rates=(4,))
    d["results"][-1]["latency_ms"]["other"]["tpot"]["p99"] = "slow"
    return d


def _bad_share():
    d = make_report()
    d["results"][1]["det_share"] = 250
    return d


def _bad_kind():
    d = make_report()
    d["results"][0]["kind"] = "batch"
    return d


def _online_rate_zero():
    d = make_report(rates=(4,), offline=False)
    d["results"][0]["rate"] = 0
    return d


def _results_object():
    d = make_report()
    d["results"] = {"fast": 1}
    return d


@pytest.mark.parametrize("content,needles", [
    ("", ["is empty"]),
    ("{\"tool\": \"detllm bench\", \"results\": [", ["invalid JSON at line 1"]),
    ("not json at all", ["invalid JSON"]),
    (b"\xff\xfe\x00garbage", ["not UTF-8"]),
    ([1, 2, 3], ["top level is an array"]),
    ({"foo": 1}, ["no 'tool' field"]),
    ({"tool": "vllm benchmark", "results": []}, ["'tool' is \"vllm benchmark\""]),
    ({"tool": "detllm bench"}, ["'results' must be an array, not missing"]),
    (_results_object(), ["'results' must be an array, not an object"]),
    ({"tool": "detllm bench", "results": []}, ["no results: nothing to plot"]),
    ({"tool": "detllm bench", "results": [7]}, ["results[0] must be an object"]),
    (_result_without("mode"), ["results[0]", "'mode'"]),
    (_result_without("output_tokens_per_s"), ["results[0] (fast, offline)",
                                              "missing 'output_tokens_per_s'"]),
    (_bad_latency(), ["latency_ms.other.tpot", "'p99' must be a number, not a string"]),
    (_bad_share(), ["'det_share' 250 is not a percentage"]),
    (_bad_kind(), ["'kind' must be \"offline\" or \"online\""]),
    (_online_rate_zero(), ["online run needs a 'rate' above 0"]),
], ids=["empty", "truncated", "text", "binary", "array", "unrelated", "other-tool",
        "no-results", "results-object", "zero-results", "result-number", "no-mode",
        "no-throughput", "latency-type", "share-range", "kind", "rate-zero"])
def test_unusable_input_is_a_clean_error(tmp_path, content, needles):
    p = tmp_path / "bad.json"
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content if isinstance(content, str) else json.dumps(content))
    good = write(tmp_path, "good.json", make_report())
    r = run_script(good, str(p), "--out", str(tmp_path / "o"))
    assert_clean_error(r, *needles)
    assert str(p) in r.stderr, r.stderr  # the message names the file
    assert not (tmp_path / "o").exists()


def test_bad_arguments_are_clean_errors(tmp_path):
    good = write(tmp_path, "good.json", make_report(rates=(4,), shares=(0, 100)))
    r = run_script(str(tmp_path / "missing.json"))
    assert_clean_error(r, "missing.json: cannot read")
    r = run_script(good, "--share", "37", "--out", str(tmp_path))
    assert_clean_error(r, "--share 37: no online result", "present: 0, 100")
    r = run_script(good, "--out", good)
    assert_clean_error(r, "exists and is not a folder")
    r = run_script(good, "--share", "most")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--share" in r.stderr
    r = run_script()
    assert r.returncode == 2 and "Traceback" not in r.stderr and "usage" in r.stderr


def test_only_online_at_a_share_without_requests_is_nothing_to_plot(tmp_path):
    d = make_report(rates=(4,), offline=False)
    for x in d["results"]:
        for c in x["latency_ms"].values():
            for m in c.values():
                m["n"] = 0
    r = run_script(write(tmp_path, "empty.json", d), "--out", str(tmp_path / "o"))
    assert_clean_error(r, "nothing to plot")


# --- what the figures draw (in-process) -------------------------------------------------------

def test_throughput_figure_every_mode_share_and_ratio(pb, tmp_path):
    shares = (0, 2, 10, 50, 100)
    runs = runs_of(pb, tmp_path, make_report(modes=ALL_MODES, shares=shares))
    fig = pb.throughput_figure(runs, [])
    tput, ratio = data_axes(fig)
    assert legend_labels(fig) == ALL_MODES  # known modes in order, then the variant
    lines = series_lines(tput)
    assert len(lines) == len(ALL_MODES)
    for (xs, ys), mode in zip(lines, ALL_MODES):
        assert xs == list(map(float, shares)), mode
        assert ys[0] == pytest.approx(2600.0 * SPEED[mode]), mode
    assert tput.get_xscale() == "symlog"
    lo, hi = tput.get_xlim()
    assert lo < 0 < 2 < 100 < hi  # 0 and 100 inside, not on the frame
    assert [t.get_text() for t in tput.get_xticklabels()] == ["0", "2", "10", "50", "100"]
    r_lines = series_lines(ratio)
    assert len(r_lines) == len(ALL_MODES)
    assert r_lines[0][1] == pytest.approx([1.0] * 5)  # fast / fast
    assert r_lines[2][1] == pytest.approx([0.42] * 5)  # bi-naive
    text = footnote(fig)
    for s in (H200, "synthetic:llama-3.1-8b", "fixed: 64 requests", "commit 4633eda0c1de",
              "sampling greedy", "max_seqs=256", "padded: ", "decode_fixed_rows=256",
              "synthetic:llama-3.1-8b on NVIDIA H200 (cuda), workload fixed x64",
              "mixed traffic"):
        assert s in text, (s, text)
    assert "numerics=" not in text  # the device, not a mode's numerics
    assert all(line.get_marker() not in (None, "None", "") for line in tput.lines)


def test_throughput_single_share_and_single_mode_shows_points(pb, tmp_path):
    runs = runs_of(pb, tmp_path, make_report(modes=["invariant"], shares=(100,)))
    notes = []
    fig = pb.throughput_figure(runs, notes)
    axes = data_axes(fig)
    assert len(axes) == 1 and any("ratio panel" in n for n in notes)
    (xs, ys), = series_lines(axes[0])
    assert xs == [100.0] and ys[0] > 0
    assert axes[0].lines[0].get_marker() == "o"
    lo, hi = axes[0].get_xlim()
    assert lo < 100 < hi and hi - 100 > 1 and 100 - lo > 1  # centred, visible


def test_latency_figure_rows_per_class_p50_p99_per_mode(pb, tmp_path):
    modes = ["fast", "invariant", "verified", "verified(g=128)"]
    runs = runs_of(pb, tmp_path, make_report(modes=modes, shares=(0, 50, 100),
                                             rates=(1, 4, 16), offline=False))
    assert pb.default_share(runs) == 50
    fig = pb.latency_figure(runs, 50.0, [])
    axes = data_axes(fig)
    assert len(axes) == 6  # 2 classes x TTFT, TPOT, E2E
    titles = [ax.get_title() for ax in axes]
    assert titles[0] == "TTFT: deterministic requests"
    assert titles[5] == "end-to-end latency: other (non-deterministic) requests"
    assert legend_labels(fig) == modes + ["p50", "p99"]
    for ax in axes:
        lines = series_lines(ax)
        assert len(lines) == 2 * len(modes)
        assert all(xs == [1.0, 4.0, 16.0] for xs, _ in lines)
        for p50, p99 in zip(lines[0::2], lines[1::2]):
            assert p99[1] == pytest.approx([2.5 * y for y in p50[1]])
    assert axes[0].get_xscale() == "log"  # 1..16: a decade and more
    assert "50% of requests deterministic" in fig.get_suptitle()
    # At 100 % there are no other requests: one row, and a note.
    notes = []
    fig = pb.latency_figure(runs, 100.0, notes)
    assert len(data_axes(fig)) == 3 and any("no other (non-deterministic)" in n for n in notes)
    fig = pb.latency_figure(runs, 0.0, notes)
    assert [ax.get_title() for ax in data_axes(fig)][0] == "TTFT: other (non-deterministic) " \
                                                           "requests"


def test_latency_single_rate_is_points(pb, tmp_path):
    runs = runs_of(pb, tmp_path, make_report(modes=["fast"], shares=(50,), rates=(8,),
                                             offline=False))
    fig = pb.latency_figure(runs, 50.0, [])
    for ax in data_axes(fig):
        assert ax.get_xscale() == "linear"
        lo, hi = ax.get_xlim()
        assert lo < 8 < hi
        for line in ax.lines:
            assert list(line.get_xdata()) == [8.0] and line.get_marker() == "o"


def test_merged_files_of_other_conditions_are_tagged_series(pb, tmp_path):
    gpu = make_report(modes=["fast", "invariant"], shares=(0, 100))
    cpu = make_report(modes=["fast", "invariant"], shares=(0, 100), backend="cpu",
                      model="synthetic:tiny-llama", commit="cccccccccccc")
    runs = runs_of(pb, tmp_path, gpu, cpu)
    fig = pb.throughput_figure(runs, [])
    labels = legend_labels(fig)
    assert len(labels) == 4 and all("[" in lb for lb in labels), labels
    assert any("cuda" in lb for lb in labels) and any("cpu" in lb for lb in labels), labels
    # Each group's ratio is against its own fast: fast is 1.0 in both.
    ratio_lines = series_lines(data_axes(fig)[1])
    assert sum(ys == pytest.approx([1.0, 1.0]) for _, ys in ratio_lines) == 2
    text = footnote(fig)
    assert H200 in text and "cpu; build=x86-64-v3" in text and "cccccccccccc" in text
    assert "2 sets of conditions merged" in text


def test_same_conditions_same_mode_in_two_files_are_told_apart(pb, tmp_path):
    a = make_report(modes=["fast", "invariant"], shares=(0, 100))
    b = make_report(modes=["invariant", "verified(g=128)"], shares=(0, 100))
    runs = pb.load([write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)])
    fig = pb.throughput_figure(runs, [])
    assert legend_labels(fig) == ["fast", "invariant (a.json)", "invariant (b.json)",
                                  "verified(g=128)"]
    # verified(g=128) from b.json is compared with a.json's fast (same conditions).
    ratio_lines = series_lines(data_axes(fig)[1])
    assert ratio_lines[3][1] == pytest.approx([0.8, 0.8])


def test_a_sweep_split_over_files_is_one_series_per_mode(pb, tmp_path):
    a = make_report(modes=["fast", "invariant"], shares=(0, 2))
    b = make_report(modes=["fast", "invariant"], shares=(10, 50))
    c = make_report(modes=["fast", "invariant"], shares=(100,))
    runs = pb.load([write(tmp_path, n, d) for n, d in
                    (("a.json", a), ("b.json", b), ("c.json", c))])
    fig = pb.throughput_figure(runs, [])
    assert legend_labels(fig) == ["fast", "invariant"]
    for xs, _ys in series_lines(data_axes(fig)[0]):
        assert list(xs) == [0, 2, 10, 50, 100]


def test_nulls_odd_labels_and_repeats_are_drawn_not_errors(pb, tmp_path):
    d = make_report(modes=["fast", "invariant", "$x$_{odd}"], shares=(0, 50, 100), rates=(2, 8))
    d["results"][1]["output_tokens_per_s"] = None  # NaN in nlohmann's JSON
    d["results"][2]["output_tokens_per_s"] = float("inf")  # Python's json reads Infinity
    d["results"][-1]["latency_ms"]["deterministic"]["ttft"]["p99"] = None
    d["results"].append(copy.deepcopy(d["results"][0]))  # the same run twice
    notes = []
    runs = runs_of(pb, tmp_path, d)
    fig = pb.throughput_figure(runs, notes)
    assert any("more than one result at 0" in n for n in notes), notes
    (xs, ys), = [l for l in series_lines(data_axes(fig)[0]) if l[0][0] == 0.0][:1]
    assert math.isnan(ys[1]) and math.isnan(ys[2])  # gaps
    assert legend_labels(fig)[2] == r"\$x\$_{odd}"  # shown literally, no mathtext
    fig.canvas.draw()  # renders (a mathtext error would raise here)
    fig = pb.latency_figure(runs, 100.0, [])
    fig.canvas.draw()


def test_repeated_runs_draw_their_spread(pb, tmp_path):
    d = make_report(modes=["fast", "invariant"], shares=(0, 100))
    for c in [d["conditions"]] + [x["conditions"] for x in d["results"]]:
        c["repeat"] = 3  # as report_json writes it: the shared conditions, and every result's
    r = d["results"][3]  # invariant at 100%
    r["repeat_durations_s"] = [r["duration_s"] * 1.02, r["duration_s"], r["duration_s"] * 0.97]
    runs = runs_of(pb, tmp_path, d)
    (inv,) = [x for x in runs if x.mode == "invariant" and x.share == 100]
    lo, hi = inv.tps_range
    assert lo == pytest.approx(inv.out_tps / 1.02) and hi == pytest.approx(inv.out_tps / 0.97)
    assert all(x.tps_range is None for x in runs if x is not inv)
    fig = pb.throughput_figure(runs, [])
    bars = [c for c in data_axes(fig)[0].collections if len(c.get_segments()) == 1]
    assert len(bars) == 1, bars  # one bar, at the repeated point
    (seg,) = bars[0].get_segments()
    assert seg[0][0] == 100 and sorted(seg[:, 1]) == pytest.approx([lo, hi])
    assert "bars: the fastest and slowest of repeated runs" in footnote(fig)
    assert "made 3 times, median shown" in footnote(fig)
    fig.canvas.draw()


@pytest.mark.parametrize("bad", ["3.0", [1.0, -2.0], [1.0, "x"], {"a": 1}])
def test_bad_repeat_durations_are_a_clean_error(tmp_path, bad):
    d = make_report()
    d["results"][0]["repeat_durations_s"] = bad
    r = run_script(write(tmp_path, "bad.json", d), "--out", str(tmp_path / "p"))
    assert_clean_error(r, "bad.json", "repeat_durations_s")


# --- a real run (the binary CTest names in DETLLM_BIN) ----------------------------------------

# Keys whose value may be null (nlohmann's NaN, a missing reference run, a mode without verify
# settings) and objects the script shows whole, whatever they hold.
NULLABLE = {"output_tps_vs_first_mode", "output_tps_vs_fast", "verify", "p50", "p99", "mean"}
OPAQUE = {"engine", "verify"}


def _shape_diff(real, synth, where="$"):
    """Where the synthetic document claims a key the real one lacks, or another value type
    (numbers are one type). Keys only the real one has are fine: the script does not read them.
    """
    kind = lambda v: ("number" if isinstance(v, (int, float)) and not isinstance(v, bool)
                      else type(v).__name__)
    key = where.rsplit(".", 1)[-1]
    if kind(real) != kind(synth):
        if key in NULLABLE and None in (real, synth):
            return []
        return [f"{where}: {kind(real)} in the real document, {kind(synth)} in the synthetic"]
    out = []
    if isinstance(synth, dict) and key not in OPAQUE:
        for k in sorted(synth):
            if k not in real:
                out.append(f"{where}.{k}: not in the real document")
            else:
                out += _shape_diff(real[k], synth[k], f"{where}.{k}")
    elif isinstance(synth, list) and real and synth:
        out += _shape_diff(real[0], synth[0], where + "[0]")
        out += _shape_diff(real[-1], synth[-1], where + "[-1]")
    return out


def test_real_tiny_cpu_bench_plots_and_matches_the_synthetic_shape(tmp_path):
    pytest.importorskip("matplotlib")
    binary = os.environ.get("DETLLM_BIN")
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip("DETLLM_BIN is not set (CTest sets it): no real bench run")
    path = tmp_path / "real.json"
    r = subprocess.run([binary, "bench", "--model", "synthetic:tiny-llama", "--backend", "cpu",
                        "--threads", "2", "--workload", "fixed", "--n", "4", "--input-len",
                        "16", "--output-len", "4", "--modes", "fast,invariant", "--det-share",
                        "0,50", "--rate", "500", "--no-warmup", "--json", str(path)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    real = json.loads(path.read_text())
    synth = make_report(modes=["fast", "invariant"], shares=(0, 50), rates=(500,),
                        backend="cpu")
    # The synthetic documents above have the bench's keys (a new key there: update them).
    assert _shape_diff(real, synth) == []
    r = run_script(str(path), "--out", str(tmp_path / "plots"))
    assert r.returncode == 0, r.stderr
    paths = r.stdout.split()
    assert [os.path.basename(p) for p in paths] == ["throughput_vs_share.png",
                                                    "latency_vs_rate.png"]
    for p in paths:
        assert_png(p, min_kb=10)
