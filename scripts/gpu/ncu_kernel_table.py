#!/usr/bin/env python3
"""Per-kernel durations of a decode step, from Nsight Compute's CSV, as a markdown table.

Input: `ncu --csv --metrics gpu__time_duration.sum ...` output (stdin or a file; lines that
are not CSV rows, like the profiled program's own output, are skipped). Output: one row per
kernel name (template arguments and parameters dropped): launches, launches per step, mean /
min / max µs, and the total ms per step. Steps seen: --steps-seen, else the launches of
`embedding_kernel` (one per forward) when the filter kept it, else the per-step columns stay
empty. Used by scripts/gpu/step_kernels_ncu.sh (docs/cuda.md, "Between the GEMMs at small
batch").

  ncu_kernel_table.py [--steps-seen N] [FILE]
  ncu_kernel_table.py --self-test
"""
import argparse
import collections
import csv
import io
import sys


def short_name(name):
    """'void (anonymous namespace)::add_rmsnorm_kernel<true, 16>(float *, ...)' -> 'add_rmsnorm_kernel'.

    ncu spells the anonymous namespace '(anonymous namespace)', '<unnamed>' or 'unnamed>'."""
    n = name
    for anon in ("(anonymous namespace)", "<unnamed>", "unnamed>"):
        n = n.replace(anon, "anon")
    n = n.split("(")[0]
    kept, depth = [], 0
    for ch in n:  # drop template arguments, nested ones too
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(ch)
    n = "".join(kept).strip()
    if n.startswith("void "):
        n = n[5:]
    return n.split("::")[-1] or name


def parse(lines):
    rows = [r for r in csv.reader(l for l in lines if l.startswith('"'))]
    if not rows:
        return {}
    head = rows[0]
    try:
        ki, mi, vi, ui = (head.index(k) for k in ("Kernel Name", "Metric Name", "Metric Value",
                                                    "Metric Unit"))
    except ValueError as e:
        raise SystemExit(f"ncu_kernel_table: not an ncu --csv metrics table ({e})")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    out = collections.defaultdict(list)
    for r in rows[1:]:
        if len(r) <= max(ki, mi, vi, ui) or r[mi] != "gpu__time_duration.sum":
            continue
        out[short_name(r[ki])].append(float(r[vi].replace(",", "")) * scale.get(r[ui], 1e-3))
    return out


def table(durations, steps_seen):
    lines = ["| kernel | launches | a step | mean µs | min µs | max µs | ms a step |",
             "|---|---|---|---|---|---|---|"]
    for name, us in sorted(durations.items(), key=lambda kv: -sum(kv[1])):
        per = f"{len(us) / steps_seen:.0f}" if steps_seen else ""
        step_ms = f"{sum(us) / steps_seen / 1e3:.3f}" if steps_seen else ""
        lines.append(f"| `{name}` | {len(us)} | {per} | {sum(us) / len(us):.2f} | {min(us):.2f} | "
                     f"{max(us):.2f} | {step_ms} |")
    return "\n".join(lines)


def self_test():
    sample = io.StringIO(
        'device: NVIDIA H200\n'
        '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","void (anonymous namespace)::add_rmsnorm_kernel<true, 16>(float *, const float *)",'
        '"gpu__time_duration.sum","ns","3,000"\n'
        '"1","void (anonymous namespace)::add_rmsnorm_kernel<false, 16>(float *, const float *)",'
        '"gpu__time_duration.sum","ns","5,000"\n'
        '"2","<unnamed>::silu_mul_rows_x4_kernel(const float *, int, int, __nv_bfloat16 *)",'
        '"gpu__time_duration.sum","usecond","2.5"\n'
        '"3","void tc::unnamed>::attention_tc_decode_nq_kernel<128, 3, 4>(AttentionArgs)",'
        '"gpu__time_duration.sum","ns","3,300"\n')
    d = parse(sample.readlines())
    assert sorted(d) == ["add_rmsnorm_kernel", "attention_tc_decode_nq_kernel",
                         "silu_mul_rows_x4_kernel"], sorted(d)
    assert d["add_rmsnorm_kernel"] == [3.0, 5.0], d
    assert d["silu_mul_rows_x4_kernel"] == [2.5], d
    assert short_name("void f<(int)1, g<2>>(int)") == "f"
    t = table(d, 1)
    assert t.splitlines()[2].startswith("| `add_rmsnorm_kernel` | 2 | 2 | 4.00 | 3.00 | 5.00 | 0.008 |"), t
    try:
        parse(['"ID","Name"\n', '"0","x"\n'])
    except SystemExit as e:
        assert "not an ncu" in str(e)
    else:
        raise AssertionError("a table without ncu's columns must be refused")
    print("ncu_kernel_table: self-test passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", help="ncu --csv output (default: stdin)")
    ap.add_argument("--steps-seen", type=int, default=0,
                    help="forwards ncu profiled (default: embedding_kernel's launches)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    lines = open(a.file, encoding="utf-8").readlines() if a.file else sys.stdin.readlines()
    d = parse(lines)
    if not d:
        raise SystemExit("ncu_kernel_table: no gpu__time_duration.sum rows in the input")
    print(table(d, a.steps_seen or len(d.get("embedding_kernel", []))))


if __name__ == "__main__":
    main()
