#!/usr/bin/env python3
"""Every CUDA copy, fill and launch in src/ goes on an explicit stream (docs/cuda.md, "Memory and
streams"). The backend's streams are non-blocking, so the legacy default stream does not order
them: a plain cudaMemcpy from pageable host memory may return before its DMA lands, and a kernel
on the Ops' stream can then read the old bytes. That race gave wrong RoPE tables when a second
process shared the GPU (2026-12-03). Fails, listing each offending line, on a synchronous
cudaMemcpy*/cudaMemset* or a <<<grid, block>>> launch without a stream. Run by CTest
(`cuda_streams`, which also runs --self-test: the checker must flag planted offenders) and by
hand: python3 scripts/check_cuda_streams.py [--self-test]"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
EXTS = (".cu", ".cuh", ".cpp", ".h")

# cudaMemcpy, cudaMemcpy2D, cudaMemcpyToSymbol, cudaMemset, cudaMemset2D ... but not *Async.
SYNC_CALL = re.compile(r"\b(cudaMemcpy(?:2D|3D|ToSymbol|FromSymbol|Peer)?|cudaMemset(?:2D|3D)?)\s*\(")
LAUNCH = re.compile(r"<<<(.*?)>>>", re.S)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def launch_args(inner):
    depth, args, cur = 0, [], ""
    for ch in inner:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
        else:
            cur += ch
    args.append(cur)
    return [a.strip() for a in args]


def offences(text):
    """(line, what) for each offending call in one file's text."""
    text = strip_comments(text)
    found = []
    for m in SYNC_CALL.finditer(text):
        found.append((text.count("\n", 0, m.start()) + 1, f"{m.group(1)}(...) on the legacy stream"))
    for m in LAUNCH.finditer(text):
        args = launch_args(m.group(1))
        if len(args) < 4 or args[3] in ("0", "nullptr", "NULL", "cudaStreamLegacy"):
            found.append((text.count("\n", 0, m.start()) + 1, f"launch <<<{m.group(1)}>>> without a stream"))
    return found


def self_test():
    bad = [
        "cudaMemcpy(d, h, 4, cudaMemcpyHostToDevice);",
        "err = cudaMemset(p, 0, n);",
        "k<<<g, b>>>(x);",
        "k<<<g, b, 0>>>(x);",
        "k<<<g, b, smem, 0>>>(x);",
    ]
    good = [
        "cudaMemcpyAsync(d, h, 4, cudaMemcpyHostToDevice, s);",
        "cudaMemsetAsync(p, 0, n, s);",
        "k<<<dim3(a, b), 128, f(x, y), stream>>>(x);",
        "// cudaMemcpy(d, h, 4, cudaMemcpyHostToDevice); in a comment",
    ]
    ok = True
    for line in bad:
        if not offences(line):
            print(f"self-test: not flagged: {line}")
            ok = False
    for line in good:
        if offences(line):
            print(f"self-test: flagged wrongly: {line}")
            ok = False
    return ok


def main():
    if "--self-test" in sys.argv and not self_test():
        return 1
    errors = []
    for folder, _, files in os.walk(SRC):
        for name in sorted(files):
            if not name.endswith(EXTS):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                for line, what in offences(f.read()):
                    errors.append(f"{os.path.relpath(path, ROOT)}:{line}: {what}")
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} CUDA call(s) off an explicit stream: use the *Async form on the Ops' stream")
        return 1
    print("every CUDA copy, fill and launch in src/ names its stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
