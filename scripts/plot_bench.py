#!/usr/bin/env python3
"""Plots `detllm bench --json FILE` results (docs/perf.md, "detllm bench").

    .venv/bin/python scripts/plot_bench.py RESULT.json [MORE.json ...] [--out DIR]
        [--share auto|all|PERCENT] [--prefix STR]

Several files are merged (e.g. one offline run and one online run, or a run of extra modes):
every result carries its own conditions. Writes into DIR (default docs/img), printing each path:

  throughput_vs_share.png   offline output tokens/s against the deterministic share (symlog
                            axis: 0 and 2 % stay apart), one line per mode -- any label, e.g.
                            verified(g=128), is a series -- and, when a `fast` run of the same
                            conditions exists, a second panel: the ratio to fast at each share.
  latency_vs_rate.png       online TTFT, TPOT and end-to-end latency (p50 solid, p99 dashed)
                            against the Poisson arrival rate, one line per mode, one row for the
                            deterministic and one for the other requests (a class without
                            requests is left out), at one deterministic share: --share PERCENT,
                            or by default (auto) the largest share where both classes have
                            requests, else the largest share.
  latency_vs_rate_det<S>.png  with --share all: one such figure per share S present.

Every figure carries, under the plots, the conditions its data were measured under, as the JSON
records them: device (GPU or CPU backend, host), model, workload, sampling, engine settings,
version and git commit. Results of different conditions (backend, device, model, workload) are
separate series, tagged with what differs; the same mode from several files of the same conditions
is one series (a sweep split over runs), tagged with the file name only where two files measured
the same point. A section the input lacks (no offline or no online results) is skipped
with a note on stderr.

Exit status: 0 when at least one figure was written; 2 for unusable input (a file that cannot be
read, is not JSON, is not a detllm bench --json file, or lacks a field the plots need -- the
message names the file and the field), for bad arguments, and when there is nothing to plot;
1 for anything else (e.g. matplotlib missing: pip install -r scripts/requirements.txt).
"""
import argparse
import json
import math
import os
import re
import sys
import textwrap

EXIT_INPUT = 2
PROG = "plot_bench.py"

# The modes of docs/modes.md, in the order the bench lists them; they keep their colour in every
# figure. Any other label (e.g. "verified(g=128)") is a series too, drawn after these.
KNOWN_MODES = ["fast", "invariant", "bi-naive", "padded", "verified"]
CLASSES = [("deterministic", "deterministic requests"),
           ("other", "other (non-deterministic) requests")]
METRICS = [("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "end-to-end latency")]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p"]


class InputError(Exception):
    """Unusable input: the message says which file and what is wrong (exit status 2)."""


# ---------------------------------------------------------------------------------------------
# Reading and checking the JSON (src/bench/report.cpp, report_json)


class Run:
    """One result of one file: what the figures need, checked."""

    def __init__(self, file, index, mode, kind, rate, share, out_tps, latency, cond):
        self.file, self.index, self.mode, self.kind = file, index, mode, kind
        self.rate, self.share, self.out_tps = rate, share, out_tps
        self.latency = latency  # {class: {metric: {"n", "p50", "p99"}}} (online runs)
        self.cond = cond  # the file's conditions updated by the result's own
        base = cond.get("determinism_mode")  # "verified" for "verified(g=128)"
        self.base_mode = base if isinstance(base, str) and base else mode
        self.tps_range = None  # (slowest, fastest) out tok/s of --repeat runs, or None
        self.group = None  # index of its conditions group (set by assign_series)
        self.series = None  # its series label (set by assign_series)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _describe(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _number(obj, key, where, allow_null=False):
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"{where}: missing '{key}'")
    v = obj[key]
    if v is None and allow_null:  # nlohmann writes NaN and infinities as null
        return math.nan
    if not _is_num(v):
        raise InputError(f"{where}: '{key}' must be a number, not {_describe(v)}")
    v = float(v)
    return v if math.isfinite(v) or not allow_null else math.nan  # a gap in the line


def _object(obj, key, where):
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"{where}: missing '{key}'")
    v = obj[key]
    if not isinstance(v, dict):
        raise InputError(f"{where}: '{key}' must be an object, not {_describe(v)}")
    return v


def _repeat_range(r, where):
    """(slowest, fastest) output tokens/s over a --repeat run's durations; None when it was
    made once (or the file predates --repeat)."""
    d = r.get("repeat_durations_s")
    if d is None or d == []:
        return None
    if not isinstance(d, list) or not all(_is_num(x) and x > 0 for x in d):
        raise InputError(f"{where}: 'repeat_durations_s' must be an array of durations above "
                         f"0 s, not {json.dumps(d)[:60]}")
    out = _number(r, "output_tokens", where)
    if len(d) < 2 or not out > 0:
        return None
    return out / max(d), out / min(d)


def _check_latency(r, where):
    lat = _object(r, "latency_ms", where)
    out = {}
    for cls, _ in CLASSES:
        c = _object(lat, cls, where + ".latency_ms")
        out[cls] = {}
        for metric, _ in METRICS:
            w = f"{where}.latency_ms.{cls}"
            m = _object(c, metric, w)
            w += "." + metric
            n = _number(m, "n", w)
            out[cls][metric] = {"n": n, "p50": _number(m, "p50", w, allow_null=True),
                                "p99": _number(m, "p99", w, allow_null=True)}
    return out


def load_file(path):
    """The checked results of one `detllm bench --json` file, as Runs. Raises InputError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not a detllm bench --json file: not UTF-8 text "
                         f"(byte {e.start})") from None
    if not text.strip():
        raise InputError(f"{path}: not a detllm bench --json file: the file is empty")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not a detllm bench --json file: invalid JSON at line "
                         f"{e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise InputError(f"{path}: not a detllm bench --json file: JSON nested too "
                         "deeply") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a detllm bench --json file: the top level is "
                         f"{_describe(doc)}, not an object")
    tool = doc.get("tool")
    if tool != "detllm bench":
        got = "no 'tool' field" if "tool" not in doc else f"'tool' is {json.dumps(tool)[:60]}"
        raise InputError(f"{path}: not a detllm bench --json file ({got}; expected "
                         "\"detllm bench\")")
    results = doc.get("results")
    if not isinstance(results, list):
        raise InputError(f"{path}: 'results' must be an array, not "
                         f"{_describe(results) if 'results' in doc else 'missing'}")
    top = doc.get("conditions", {})
    if not isinstance(top, dict):
        raise InputError(f"{path}: 'conditions' must be an object, not {_describe(top)}")
    modes = doc.get("modes", [])
    mode_info = {m["mode"]: m for m in modes if isinstance(m, dict) and
                 isinstance(m.get("mode"), str)} if isinstance(modes, list) else {}
    if not results:
        raise InputError(f"{path}: no results: nothing to plot (a bench run that measured "
                         "nothing?)")
    runs = []
    for i, r in enumerate(results):
        where = f"{path}: results[{i}]"
        if not isinstance(r, dict):
            raise InputError(f"{where} must be an object, not {_describe(r)}")
        mode = r.get("mode")
        if not isinstance(mode, str) or not mode:
            raise InputError(f"{where}: 'mode' must be a non-empty string, not "
                             f"{_describe(mode) if 'mode' in r else 'missing'}")
        kind = r.get("kind")
        if kind not in ("offline", "online"):
            raise InputError(f"{where} ({mode}): 'kind' must be \"offline\" or \"online\", not "
                             f"{json.dumps(kind)[:40] if 'kind' in r else 'missing'}")
        where = f"{where} ({mode}, {kind})"
        share = _number(r, "det_share", where)
        if not 0.0 <= share <= 100.0:
            raise InputError(f"{where}: 'det_share' {share:g} is not a percentage (0 to 100)")
        rate = _number(r, "rate", where)
        if kind == "online" and not rate > 0.0:
            raise InputError(f"{where}: an online run needs a 'rate' above 0, not {rate:g}")
        out_tps = _number(r, "output_tokens_per_s", where, allow_null=True)
        latency = _check_latency(r, where) if kind == "online" else None
        cond = dict(top)
        # The mode's backend description (with the device) when the result lacks it.
        info = mode_info.get(mode, {})
        for key in ("backend_description", "engine", "self_check", "policy"):
            if key in info:
                cond.setdefault(key, info[key])
        own = r.get("conditions", {})
        if not isinstance(own, dict):
            raise InputError(f"{where}: 'conditions' must be an object, not {_describe(own)}")
        cond.update(own)
        cond.setdefault("caveat", doc.get("caveat"))
        run = Run(path, i, mode, kind, rate, share, out_tps, latency, cond)
        run.tps_range = _repeat_range(r, where) if kind == "offline" else None
        runs.append(run)
    return runs


def load(paths):
    runs = []
    for p in paths:
        runs += load_file(p)
    return runs


# ---------------------------------------------------------------------------------------------
# Conditions and series


def _text(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def device_of(cond):
    """The device a result ran on: the backend description without the per-mode numerics
    ("cuda; device 0: NVIDIA H200 (sm_90, ...)", "cpu; build=x86-64-v3"), else the backend."""
    desc = cond.get("backend_description")
    if isinstance(desc, str) and desc:
        parts = [p.strip() for p in desc.split(";")]
        parts = [p for p in parts if p and not re.match(r"(numerics|gemm)=", p)]
        if parts:
            return "; ".join(parts)
    return _text(cond.get("backend")) or "unknown backend"


# What makes results comparable: a different value of any of these is another conditions group.
GROUP_FIELDS = ["backend", "device", "host", "model", "model_description", "workload",
                "workload_description", "n_requests", "sampling"]
# What tags a group's series when there are several groups, most telling first.
TAG_FIELDS = ["backend", "device", "model", "workload", "n_requests", "sampling", "host"]


def group_key(cond):
    return tuple(device_of(cond) if f == "device" else _text(cond.get(f))
                 for f in GROUP_FIELDS)


def _short(s, n=40):
    return s if len(s) <= n else s[:n - 1] + "…"


def _mode_rank(mode, base=None):
    """Sort key: the known modes in their order, each followed by its variants ("verified",
    "verified(g=64)", "verified(g=128)"), then other labels; numbers in natural order."""
    base = base if base in KNOWN_MODES else mode.split("(")[0].strip()
    rank = KNOWN_MODES.index(base) if base in KNOWN_MODES else len(KNOWN_MODES)
    natural = [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", mode)]
    return (rank, mode != base, natural)


def assign_series(runs):
    """Sets run.group and run.series for the runs of one figure; returns the groups' keys and
    their tags (None for a single group)."""
    keys = []
    for r in runs:
        k = group_key(r.cond)
        if k not in keys:
            keys.append(k)
        r.group = keys.index(k)
    tags = [None] * len(keys)
    if len(keys) > 1:
        differing = [f for f in TAG_FIELDS
                     if len({k[GROUP_FIELDS.index(f)] for k in keys}) > 1]
        if "device" in differing and "backend" in differing:
            differing.remove("backend")  # the short device names the backend
        cond_of = {r.group: r.cond for r in runs}
        for gi, k in enumerate(keys):
            vals = []
            for f in differing[:2]:
                v = k[GROUP_FIELDS.index(f)]
                if f == "device":
                    v = short_device(cond_of[gi])
                vals.append(f"n={v}" if f == "n_requests" else _short(v, 48))
            if not vals:  # only the long descriptions differ: name the files
                files = sorted({os.path.basename(r.file) for r in runs if r.group == gi})
                vals = ["+".join(files)]
            tags[gi] = ", ".join(vals)
    # The same mode of one group from several files is one series (a sweep split over runs)
    # unless two files measured the same point: then tell the files apart.
    files_of, points_of = {}, {}
    for r in runs:
        files_of.setdefault((r.group, r.mode), set()).add(r.file)
        points_of.setdefault((r.group, r.mode, r.kind, r.share, r.rate), set()).add(r.file)
    clash = {(g, m) for (g, m, _k, _s, _r), files in points_of.items() if len(files) > 1}
    for r in runs:
        files = files_of[(r.group, r.mode)] if (r.group, r.mode) in clash else {r.file}
        label = r.mode
        if tags[r.group]:
            label += f" [{tags[r.group]}]"
        if len(files) > 1:
            base = os.path.basename(r.file)
            same = sum(os.path.basename(f) == base for f in files) > 1
            label += f" ({r.file if same else base})"
        r.series = label.replace("$", r"\$")  # literal text, not matplotlib's math
    return keys, tags


def series_order(runs):
    """Series labels in drawing order: by group, then the known modes in their order, then
    other labels in natural order (g=64 before g=128)."""
    first = {}
    for r in runs:
        first.setdefault(r.series, (r.group, _mode_rank(r.mode, r.base_mode), r.file))
    return sorted(first, key=lambda s: first[s])


def series_styles(runs, order):
    """(colour, marker) per series: a known mode keeps its colour when there is one group."""
    n_groups = len({r.group for r in runs})
    mode_of = {r.series: r.mode for r in runs}
    styles, next_extra = {}, len(KNOWN_MODES)
    for i, s in enumerate(order):
        mode = mode_of[s]
        if n_groups == 1 and mode in KNOWN_MODES:
            ci = KNOWN_MODES.index(mode)
        elif n_groups == 1:
            ci, next_extra = next_extra, next_extra + 1
        else:
            ci = i
        colour = f"C{ci}" if ci < 10 else _tab20(ci - 10)
        styles[s] = (colour, MARKERS[i % len(MARKERS)])
    return styles


def _tab20(i):
    import matplotlib
    return matplotlib.colormaps["tab20"](i % 20)


def _distinct(values):
    out = []
    for v in values:
        v = _text(v)
        if v and v not in out:
            out.append(v)
    return out


def _engine_text(runs):
    """Engine settings common to every mode, then those that differ, per mode."""
    def flat(d, prefix=""):  # {"verify": {"window": 16}} -> {"verify.window": 16}
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[prefix + str(k)] = v
        return out

    per_mode, base_of = {}, {}
    for r in runs:
        e = r.cond.get("engine")
        if isinstance(e, dict):
            per_mode.setdefault(r.mode, flat(e))
            base_of.setdefault(r.mode, r.base_mode)
    if not per_mode:
        return ""
    missing = object()
    usual = {}  # per key: the value most modes have (missing counts as a value)
    for k in sorted({k for e in per_mode.values() for k in e}):
        vals = [e.get(k, missing) for e in per_mode.values()]
        usual[k] = max(vals, key=lambda v: (sum(x == v for x in vals), v is not missing))
    parts = [f"{k}={_text(v)}" for k, v in usual.items() if v is not missing]
    text = "engine: " + ", ".join(parts)
    for mode in sorted(per_mode, key=lambda m: _mode_rank(m, base_of[m])):
        e = per_mode[mode]
        d = [f"{k}={_text(v)}" for k, v in e.items() if v != usual.get(k, missing)]
        if d:
            text += f"; {mode}: " + ", ".join(sorted(d))
    return text


def subtitle(runs, keys):
    """One line under the title: model, device, workload and commit, or how many conditions
    were merged (the footnote lists them)."""
    if len(keys) > 1:
        return f"{len(keys)} sets of conditions merged, tagged [..] in the legend (listed below)"
    c = runs[0].cond
    commits = _distinct(r.cond.get("git_commit") for r in runs) or ["unknown"]
    wl = _text(c.get("workload")) or "?"
    if _text(c.get("n_requests")):
        wl += f" x{_text(c.get('n_requests'))}"
    return (f"{_text(c.get('model')) or '?'} on {short_device(c)}, workload {wl}, "
            f"commit {', '.join(commits)}")


def short_device(cond):
    """"NVIDIA H200 (cuda)", "Intel(R) Xeon(R) Processor (cpu)": the footnote has the rest."""
    backend = _text(cond.get("backend")) or "?"
    m = re.search(r"device \d+: ([^(;]+)", _text(cond.get("backend_description")))
    if m:
        return f"{m.group(1).strip()} ({backend})"
    host = _text(cond.get("host")).split(",")[0].strip()
    return f"{_short(host, 50)} ({backend})" if host else backend


def conditions_lines(runs, keys, tags):
    """The footnote: what the data were measured under, per conditions group."""
    lines = []
    for gi in range(len(keys)):
        rs = [r for r in runs if r.group == gi]
        c = rs[0].cond
        head = ""
        if tags[gi]:
            lines.append(f"[{tags[gi]}]")
            head = "  "
        device = device_of(c)
        host = _text(c.get("host"))
        lines.append(head + f"device: {device}" + (f"; host: {host}" if host else ""))
        model = _text(c.get("model")) or "?"
        md = _text(c.get("model_description"))
        lines.append(head + f"model: {model}" + (f" -- {md}" if md and md != model else ""))
        wl = _text(c.get("workload_description")) or _text(c.get("workload")) or "?"
        extra = []
        tok = [_text(c.get(k)) for k in ("n_requests", "prompt_tokens", "output_tokens")]
        if all(tok):
            extra.append(f"{tok[0]} requests, {tok[1]} prompt + {tok[2]} output tokens")
        if _text(c.get("sampling")):
            extra.append("sampling " + _text(c.get("sampling")))
        if _text(c.get("seed")):
            extra.append("seed " + _text(c.get("seed")))
        if "warmup" in c:
            extra.append((_text(c.get("warmup_description")) or "warm-up run per mode")
                         if c.get("warmup") else "no warm-up")
        if _is_num(c.get("repeat")) and c.get("repeat") > 1:
            extra.append(f"offline runs made {c.get('repeat')} times, median shown")
        lines.append(head + f"workload: {wl}" + ("; " + "; ".join(extra) if extra else ""))
        eng = _engine_text(rs)
        if eng:
            lines.append(head + eng)
        failed = sorted({f"{r.mode}: {_text(r.cond.get('self_check'))}" for r in rs
                         if _text(r.cond.get("self_check")) not in ("", "passed", "disabled")})
        if failed:
            lines.append(head + "self-check: " + "; ".join(failed))
        commits = _distinct(r.cond.get("git_commit") for r in rs) or ["unknown"]
        versions = _distinct(r.cond.get("version") for r in rs)
        started = _distinct(r.cond.get("started_at") for r in rs)
        files = _distinct(os.path.basename(r.file) for r in rs)
        lines.append(head + "commit " + ", ".join(commits) +
                     (f"; detllm {', '.join(versions)}" if versions else "") +
                     (f"; started {', '.join(started)}" if started else "") +
                     f"; from {', '.join(files)}")
    caveats = _distinct(r.cond.get("caveat") for r in runs)
    for cav in caveats:
        short = cav.split(", so ")[0]
        lines.append("note: " + (short + " (the JSON's caveat says more)" if short != cav
                                 else cav))
    return lines


# ---------------------------------------------------------------------------------------------
# Figures


def _finish(fig, title, foot_lines, legend=None):
    """Title on top, the conditions under the plots, the legend on the right: the figure grows
    by what they need, so that none of them overlaps the axes."""
    w, h = fig.get_size_inches()
    legend_in = 0.0
    if legend is not None:
        longest = max((len(lb) for lb in legend[1]), default=10)
        legend_in = min(0.068 * longest + 0.7, 6.0)
    w_total = max(w + legend_in, 9.0)
    chars = int(w_total * 17.5)
    wrapped = []
    for line in foot_lines:
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        wrapped += textwrap.wrap(line.replace("$", r"\$"), chars, subsequent_indent=indent,
                                 break_on_hyphens=False, drop_whitespace=True) or [""]
    title_lines = []
    for line in title.replace("$", r"\$").split("\n"):
        title_lines += textwrap.wrap(line, int(w_total * 11), break_on_hyphens=False) or [""]
    foot_in = 0.12 * len(wrapped) + 0.1
    title_in = 0.17 * len(title_lines)
    h_total = h + foot_in + title_in
    fig.set_size_inches(w_total, h_total)
    fig.suptitle("\n".join(title_lines), fontsize=10, y=1 - 0.04 / h_total, va="top")
    fig.text(0.01, 0.06 / h_total, "\n".join(wrapped), fontsize=7, color="0.3", va="bottom",
             ha="left")
    right = 1.0 - legend_in / w_total
    if legend is not None:
        fig.legend(legend[0], legend[1], loc="center left", bbox_to_anchor=(right, 0.5),
                   fontsize=8, frameon=False)
    # tight_layout leaves room for the suptitle itself
    fig.tight_layout(rect=(0, (foot_in + 0.05) / h_total, right, 1))


def _share_axis(ax, shares):
    ax.set_xscale("symlog", linthresh=1.0, linscale=0.6)
    ax.set_xticks(shares)
    ax.set_xticklabels([f"{s:g}" for s in shares])
    import matplotlib.ticker as mticker
    ax.xaxis.set_minor_locator(mticker.NullLocator())
    _pad_x(ax, shares)
    ax.set_xlabel("deterministic requests (%; symlog axis)")


def _rate_axis(ax, rates):
    import matplotlib.ticker as mticker
    if len(rates) >= 3 and rates[0] > 0 and rates[-1] / rates[0] >= 10:
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(mticker.NullLocator())
        label = "arrival rate (requests/s, Poisson; log axis)"
    else:
        label = "arrival rate (requests/s, Poisson)"
    ax.set_xticks(rates)
    ax.set_xticklabels([f"{x:g}" for x in rates])
    _pad_x(ax, rates)
    ax.set_xlabel(label)


def _pad_x(ax, xs):
    """x limits with room around the first and last point, in the axis' own scale; a single
    point is centred."""
    t = ax.xaxis.get_transform()
    a, b = (float(v) for v in t.transform([[min(xs)], [max(xs)]])[:, 0])
    pad = 0.07 * (b - a) if b > a else max(0.5, 0.3 * abs(a))
    lo, hi = (float(v) for v in t.inverted().transform([[a - pad], [b + pad]])[:, 0])
    ax.set_xlim(lo, hi)


def _points(pairs, what, notes):
    """Sorted by x; a repeated x keeps its first value (with a note)."""
    seen, out = set(), []
    for x, y in sorted(pairs, key=lambda p: p[0]):
        if x in seen:
            notes.append(f"{what}: more than one result at {x:g}; the first is drawn")
            continue
        seen.add(x)
        out.append((x, y))
    return out


def throughput_figure(runs, notes):
    """Offline output tokens/s and ratio to fast vs the deterministic share; None without
    offline results."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    off = [r for r in runs if r.kind == "offline"]
    if not off:
        notes.append("no offline results: throughput_vs_share.png skipped (run the bench "
                     "without --no-offline)")
        return None
    keys, tags = assign_series(off)
    order = series_order(off)
    styles = series_styles(off, order)
    shares = sorted({r.share for r in off})

    def fast_ref(r):
        cands = [x for x in off if x.mode == "fast" and x.group == r.group and
                 x.share == r.share and x.out_tps > 0]
        same_file = [x for x in cands if x.file == r.file]
        return (same_file or cands or [None])[0]

    ratios = {}
    for r in off:
        ref = fast_ref(r)
        if ref is not None and not math.isnan(r.out_tps):
            ratios[id(r)] = r.out_tps / ref.out_tps
    has_ratio = bool(ratios)
    if not has_ratio:
        notes.append("throughput_vs_share.png: no `fast` run at the same conditions and share: "
                     "the ratio panel is left out")
    ncols = 2 if has_ratio else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.2 * ncols, 4.4), squeeze=False)
    axes = axes[0]
    handles = []
    for s in order:
        colour, marker = styles[s]
        rs = [r for r in off if r.series == s]
        pts = _points([(r.share, r.out_tps) for r in rs], f"throughput_vs_share.png: {s}",
                      notes)
        axes[0].plot([p[0] for p in pts], [p[1] for p in pts], color=colour, marker=marker,
                     markersize=6, linewidth=1.6, label=s)
        for r in rs:  # --repeat: the fastest and slowest of the runs behind the median point
            if r.tps_range and not math.isnan(r.out_tps):
                lo, hi = r.tps_range
                axes[0].errorbar([r.share], [r.out_tps], yerr=[[max(r.out_tps - lo, 0.0)],
                                                               [max(hi - r.out_tps, 0.0)]],
                                 fmt="none", ecolor=colour, elinewidth=1.0, capsize=3)
        if has_ratio:
            rp = _points([(r.share, ratios[id(r)]) for r in rs if id(r) in ratios],
                         f"ratio {s}", [])
            if rp:
                axes[1].plot([p[0] for p in rp], [p[1] for p in rp], color=colour,
                             marker=marker, markersize=6, linewidth=1.6)
        handles.append(Line2D([], [], color=colour, marker=marker, linewidth=1.6))
    axes[0].set_ylabel("output tokens/s (all requests queued at t = 0)")
    axes[0].set_ylim(bottom=0)
    axes[0].set_title("throughput", fontsize=9)
    for ax in axes:
        _share_axis(ax, shares)
        ax.grid(alpha=0.3)
    if has_ratio:
        ax = axes[1]
        ax.axhline(1.0, color="0.4", linewidth=0.8)
        ax.axhline(0.97, color="0.6", linewidth=0.8, linestyle=":")
        ax.annotate("0.97: issue 6 target", xy=(0.01, 0.97), xycoords=("axes fraction", "data"),
                    fontsize=7, color="0.4", va="top")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(0.0, lo), max(1.1, hi))
        ax.set_ylabel("output tokens/s ÷ fast's at the same share")
        ax.set_title("ratio to fast", fontsize=9)
    title = "Offline throughput vs deterministic-traffic share\n" + subtitle(off, keys)
    foot = conditions_lines(off, keys, tags)
    if any(r.tps_range for r in off):
        foot.append("bars: the fastest and slowest of repeated runs (--repeat); the point is "
                    "the run of median duration")
    _finish(fig, title, foot, legend=(handles, order))
    return fig


def online_shares(runs):
    return sorted({r.share for r in runs if r.kind == "online"})


def default_share(runs):
    """The largest share where both classes have requests, else the largest share."""
    on = [r for r in runs if r.kind == "online"]
    mixed = [r.share for r in on
             if r.latency["deterministic"]["e2e"]["n"] > 0 and r.latency["other"]["e2e"]["n"] > 0]
    return max(mixed) if mixed else max(r.share for r in on)


def latency_figure(runs, share, notes, name="latency_vs_rate.png"):
    """Online TTFT/TPOT/E2E p50 and p99 vs rate at one share, a row per request class; None
    without online results at that share."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    on = [r for r in runs if r.kind == "online" and r.share == share]
    if not on:
        return None
    keys, tags = assign_series(on)
    order = series_order(on)
    styles = series_styles(on, order)
    rates = sorted({r.rate for r in on})
    classes = []
    for cls, label in CLASSES:
        if any(r.latency[cls]["e2e"]["n"] > 0 for r in on):
            classes.append((cls, label))
        else:
            notes.append(f"{name}: no {label} at {share:g}% deterministic: that row is "
                         "left out")
    if not classes:  # a run without requests: nothing to draw
        notes.append(f"{name}: no requests with latencies at {share:g}% deterministic: skipped")
        return None
    fig, axes = plt.subplots(len(classes), len(METRICS), figsize=(4.3 * len(METRICS),
                                                                  3.3 * len(classes)),
                             squeeze=False)
    for row, (cls, label) in enumerate(classes):
        for col, (metric, mlabel) in enumerate(METRICS):
            ax = axes[row][col]
            for s in order:
                colour, marker = styles[s]
                rs = [r for r in on if r.series == s]
                for q, style, fill in (("p50", "-", colour), ("p99", "--", "none")):
                    pts = _points([(r.rate, r.latency[cls][metric][q]
                                    if r.latency[cls][metric]["n"] > 0 else math.nan)
                                   for r in rs], f"{name}: {s}", notes)
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour,
                            marker=marker, markersize=6, linestyle=style, linewidth=1.5,
                            markerfacecolor=fill)
            _rate_axis(ax, rates)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.set_ylabel(f"{mlabel} (ms)")
            ax.set_title(f"{mlabel}: {label}", fontsize=9)
    handles = [Line2D([], [], color=styles[s][0], marker=styles[s][1], linewidth=1.5)
               for s in order]
    handles += [Line2D([], [], color="0.3", linestyle="-", marker="o"),
                Line2D([], [], color="0.3", linestyle="--", marker="o", markerfacecolor="none")]
    labels = list(order) + ["p50", "p99"]
    title = (f"Online latency vs arrival rate, {share:g}% of requests deterministic "
             f"(TPOT over requests with > 1 output token)\n" + subtitle(on, keys))
    _finish(fig, title, conditions_lines(on, keys, tags), legend=(handles, labels))
    return fig


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n", 1)[0] + "\n\n" + __doc__.split("\n\n", 2)[2])
    ap.add_argument("json", nargs="+", metavar="RESULT.json",
                    help="files written by detllm bench --json (merged)")
    ap.add_argument("--out", "--out-dir", dest="out", metavar="DIR",
                    default=os.path.join(root, "docs", "img"),
                    help="folder for the PNGs, created if missing (default: docs/img)")
    ap.add_argument("--share", default="auto", metavar="auto|all|PERCENT",
                    help="deterministic share of the latency figure: auto (default), all (one "
                         "figure per share), or a percentage present in the online results")
    ap.add_argument("--prefix", default="", metavar="STR",
                    help="prepended to every file name (default: none)")
    ap.add_argument("--dpi", type=int, default=120, help="resolution (default 120)")
    a = ap.parse_args(argv)
    if a.share not in ("auto", "all"):
        try:
            a.share = float(a.share)
        except ValueError:
            ap.error(f"--share: '{a.share}' is not auto, all or a number")
    if a.dpi < 20 or a.dpi > 1000:
        ap.error("--dpi: between 20 and 1000")
    return a


def run(argv):
    a = parse_args(argv)
    runs = load(a.json)  # before matplotlib: bad input fails fast
    on_shares = online_shares(runs)
    if isinstance(a.share, float) and on_shares and a.share not in on_shares:
        raise InputError(f"--share {a.share:g}: no online result at that deterministic share "
                         f"(present: {', '.join(f'{s:g}' for s in on_shares)})")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        raise InputError(f"--out {a.out}: exists and is not a folder")
    try:
        import matplotlib
    except ImportError:
        print(f"{PROG}: error: needs matplotlib: .venv/bin/pip install -r "
              "scripts/requirements.txt", file=sys.stderr)
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    notes, figures = [], []
    fig = throughput_figure(runs, notes)
    if fig is not None:
        figures.append(("throughput_vs_share.png", fig))
    if not on_shares:
        notes.append("no online results: latency_vs_rate.png skipped (run the bench with "
                     "--rate R1,R2,...)")
    elif a.share == "all":
        for s in on_shares:
            name = f"latency_vs_rate_det{s:g}.png"
            fig = latency_figure(runs, s, notes, name)
            if fig is not None:
                figures.append((name, fig))
    else:
        share = default_share(runs) if a.share == "auto" else a.share
        if a.share == "auto" and len(on_shares) > 1:
            notes.append(f"latency_vs_rate.png: at {share:g}% deterministic (online shares: "
                         f"{', '.join(f'{s:g}' for s in on_shares)}; --share all draws each)")
        fig = latency_figure(runs, share, notes)
        if fig is not None:
            figures.append(("latency_vs_rate.png", fig))
    for n in dict.fromkeys(notes):  # in order, once each
        print(f"{PROG}: note: {n}", file=sys.stderr)
    if not figures:
        raise InputError("nothing to plot: no offline or online results with requests in " +
                         ", ".join(a.json))
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {a.out}: cannot create the folder: {e.strerror or e}") from None
    for name, fig in figures:
        path = os.path.join(a.out, a.prefix + name)
        try:
            fig.savefig(path, dpi=a.dpi)
        except OSError as e:
            print(f"{PROG}: error: cannot write {path}: {e.strerror or e}", file=sys.stderr)
            return 1
        finally:
            plt.close(fig)
        print(path)
    return 0


def main(argv=None):
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug here: one line, not a traceback (PLOT_BENCH_DEBUG=1 shows it)
        if os.environ.get("PLOT_BENCH_DEBUG"):
            raise
        print(f"{PROG}: internal error: {type(e).__name__}: {e} (PLOT_BENCH_DEBUG=1 shows the "
              "traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
