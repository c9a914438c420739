#!/usr/bin/env python3
"""Static check of the warpgroup attention's machine code (attention_wg.cu), no GPU needed.

ptxas (CUDA 13.0) was seen compiling two attention_wg_kernel instantiations (head_dim 64,
Q in registers, the fast path) so that the registers holding Q's fragments, the A operand
of the QK wgmma (HGMMA ... Rn, gdesc, ...), were reused for other values inside the KV-tile
loop: from the second tile on, S was computed from garbage. The GPU tests caught it
(docs/cuda.md, "The warpgroup schedule"); this check catches it from the SASS, so CI does too.

For every attention_wg_kernel in the object file: the QK HGMMAs are the ones without .tnspB;
Q's fragments live in their A registers (4 each) from before the loop to the kernel's end, so
no instruction after the first HGMMA may write any of them; and no register A operand of any
HGMMA (P of the PV ones too) may be written before the WARPGROUP.DEPBAR that completes it.
Kernels with Q in shared memory (the SS form) must have no register-A QK HGMMA at all.
Every kernel is also followed along its control flow: no other instruction may name an
in-flight HGMMA group's accumulators or write its register-A operands before the
WARPGROUP.DEPBAR that completes the group (checked against a planted read, so the check is
known to see one).
Prints one line per kernel, and exits 1 if one is written (with the offending instructions),
2 if the tools or kernels are missing. Needs cuobjdump and nvdisasm: $CUDA_BIN_DIR, the PyPI
wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm in this Python (scripts/requirements.txt:
scripts/bootstrap.sh puts them in .venv), or PATH.

A write is flagged even if it were a legitimate restore (a spill of Q reloaded before the next
QK): the check is conservative, and then the SASS must be read.

Usage: scripts/check_wgmma_sass.py BUILD_DIR_OR_OBJECT [--allow-refused]
  (CTest cuda_static.wgmma_sass runs it on the CUDA build with --allow-refused)
  --allow-refused: a clobbered kernel of a head dim attention_wg_supported refuses (64) is
  reported but does not fail the check.
"""
import os
import re
import shutil
import subprocess
import sys

KERNEL = re.compile(r"Function : (\S*attention_wg_kernelILi(\d+)ELi(\d+)ELb(\d)E(?:Lb(\d)E)?\S*)")
INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
HGMMA_QK = re.compile(r"HGMMA\.\S+ R\d+, R(\d+), gdesc\[[^\]]+\](?!\.tnspB)")
# The SS form (Q from shared memory): A is a descriptor too, nothing to keep in registers.
HGMMA_QK_SS = re.compile(r"HGMMA\.\S+ R\d+, gdesc\[[^\]]+\](?!\.tnspB)")
# The destination of an instruction: its first operand after the opcode (and predicate).
DEST = re.compile(r"^(?:@!?U?P\w+\s+)?[A-Z][A-Z0-9_.]*\s+R(\d+)\b")
WIDTH = re.compile(r"\.(64|128)\b")
REFUSED_HEAD_DIMS = {64}  # attention_wg_supported: head_dim 128 only


def wheel_bin_dirs():
    """bin/ folders of the nvidia-cuda-* wheels in this Python's site-packages."""
    import glob
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [d for loc in spec.submodule_search_locations
            for d in glob.glob(os.path.join(loc, "*", "bin"))]


def tool(name):
    dirs = [os.environ.get("CUDA_BIN_DIR"), *wheel_bin_dirs(), os.path.dirname(sys.executable)]
    for d in filter(None, dirs):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            if not os.access(p, os.X_OK):
                os.chmod(p, 0o755)  # wheels may unpack without the execute bit
            return p
    return shutil.which(name)


def find_object(arg):
    if os.path.isfile(arg):
        return arg
    for root, _, files in os.walk(arg):
        for f in files:
            if f == "attention_wg.cu.o":
                return os.path.join(root, f)
    return None


def written_regs(insn):
    m = DEST.match(insn)
    if not m:
        return set()
    first = int(m.group(1))
    opcode = insn.split()[1] if insn.startswith("@") else insn.split()[0]
    w = WIDTH.search(opcode)
    n = {"64": 2, "128": 4}.get(w.group(1), 1) if w else 1
    if opcode.startswith("HGMMA"):
        return set()  # writes its accumulator block, checked below as an accumulator
    return set(range(first, first + n))


HGMMA_RS = re.compile(r"HGMMA\.\S+ R\d+, R(\d+), gdesc")


def in_flight_writes(insns):
    """Writes to a register-A HGMMA's operand before the WARPGROUP.DEPBAR that completes it."""
    bad = []
    for i, (_, s) in enumerate(insns):
        m = HGMMA_RS.search(s)
        if not m:
            continue
        regs = set(range(int(m.group(1)), int(m.group(1)) + 4))
        for addr, t in insns[i + 1:]:
            if "WARPGROUP.DEPBAR" in t:
                break
            if written_regs(t) & regs:
                bad.append((addr, t + "   <- while the HGMMA reading it is in flight"))
    return bad


HGMMA_SHAPE = re.compile(r"HGMMA\.64x(\d+)x16\.F32\S* R(\d+),")
HGMMA_A = re.compile(r"HGMMA\.\S+ R\d+, R(\d+), gdesc")
DEPBAR = re.compile(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)")
BRANCH = re.compile(r"^(@!?U?P\w+\s+)?(BRA(?:\.\S+)?)\s+(?:[^,]*,\s*)?(0x[0-9a-f]+)")
REG = re.compile(r"\bR(\d+)\b")


def hgmma_regs(insn):
    """(accumulator registers, register-A operands) of an HGMMA with fp32 accumulators."""
    m = HGMMA_SHAPE.search(insn)
    if not m:
        return set(), set()
    n, base = int(m.group(1)), int(m.group(2))
    acc = set(range(base, base + n // 2))  # 64 × n fp32 over 128 threads
    a = HGMMA_A.search(insn)
    return acc, set(range(int(a.group(1)), int(a.group(1)) + 4)) if a else set()


def operand_regs(insn):
    """Every register an instruction names after its opcode (destination included)."""
    body = insn.split(None, 2 if insn.startswith("@") else 1)[-1]
    return {int(r) for r in REG.findall(body)}


def in_flight_hazards(insns, limit=400000):
    """Follows the control flow from the kernel's entry, tracking the committed HGMMA groups
    still in flight (a group ends at its gsb0 HGMMA; WARPGROUP.DEPBAR.LE gsb0, N leaves the N
    newest), and flags any other instruction that names a register of an in-flight group's
    accumulators, or writes one of its register-A operands (P, or Q) — on any path. This is
    what a schedule that keeps MMAs in flight across other work relies on (one that waits at
    once passes trivially; the check is there for the day one does not)."""
    index = {int(addr, 16): i for i, (addr, _) in enumerate(insns)}
    bad = {}
    seen = set()
    stack = [(0, (), frozenset(), frozenset())]
    steps = 0
    while stack:
        i, pending, open_acc, open_a = stack.pop()
        while i < len(insns):
            key = (i, pending, open_acc, open_a)
            if key in seen:
                break
            seen.add(key)
            steps += 1
            if steps > limit:
                return [("-", f"control flow too large to follow ({limit} states)")]
            addr, s = insns[i]
            body = s.split(None, 1)[1] if s.startswith("@") else s
            if body.startswith("HGMMA"):
                acc, a = hgmma_regs(s)
                live_a = set().union(*(g[1] for g in pending)) if pending else set()
                if acc & live_a:
                    bad.setdefault(addr, s + "   <- accumulates into an in-flight HGMMA's A registers")
                open_acc, open_a = open_acc | acc, open_a | a
                if "gsb0" in s:
                    pending = pending + ((open_acc, open_a),)
                    open_acc, open_a = frozenset(), frozenset()
                i += 1
                continue
            d = DEPBAR.search(s)
            if d:
                n = int(d.group(1), 16)
                pending = pending[len(pending) - n:] if n else ()
                i += 1
                continue
            if pending:
                acc = set().union(*(g[0] for g in pending))
                a = set().union(*(g[1] for g in pending))
                if operand_regs(s) & acc:
                    bad.setdefault(addr, s + "   <- names an in-flight HGMMA's accumulators")
                elif written_regs(s) & a:
                    bad.setdefault(addr, s + "   <- writes an in-flight HGMMA's A registers")
            if body.startswith("EXIT") and not s.startswith("@"):
                break
            b = BRANCH.match(s)
            if b:
                target = index.get(int(b.group(3), 16))
                if target is not None:
                    stack.append((target, pending, open_acc, open_a))
                if not b.group(1) and b.group(2) == "BRA":
                    break  # unconditional
            i += 1
    return sorted(bad.items())


def check(sass):
    kernels = []
    cur = None
    for line in sass.splitlines():
        k = KERNEL.search(line)
        if k:
            cur = {"name": k.group(1), "hd": int(k.group(2)), "st": int(k.group(3)),
                   "fast": k.group(4) == "1", "q_smem": k.group(5) == "1", "insns": []}
            kernels.append(cur)
            continue
        if line.lstrip().startswith("Function :"):
            cur = None
            continue
        if cur is None:
            continue
        m = INSN.search(line)
        if m:
            cur["insns"].append((m.group(1), m.group(2).strip()))
    return kernels


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    allow_refused = "--allow-refused" in sys.argv
    if len(args) != 1:
        print(__doc__)
        return 2
    obj = find_object(args[0])
    if obj is None:
        print(f"check_wgmma_sass: no attention_wg.cu.o under {args[0]} (a CUDA build?)")
        return 2
    cuobjdump, nvdisasm = tool("cuobjdump"), tool("nvdisasm")
    if not cuobjdump or not nvdisasm:
        print("check_wgmma_sass: cuobjdump and nvdisasm are needed (pip install "
              "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or the CUDA toolkit's)")
        return 2
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    out = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(f"check_wgmma_sass: cuobjdump failed: {out.stderr.strip()}")
        return 2
    kernels = check(out.stdout)
    if not kernels:
        print(f"check_wgmma_sass: no attention_wg_kernel in {obj}")
        return 2
    failed = False
    for k in kernels:
        insns = k["insns"]
        qk = [i for i, (_, s) in enumerate(insns) if HGMMA_QK.search(s)]
        label = (f"head_dim {k['hd']}, ring {k['st']}, fast path {'on' if k['fast'] else 'off'}"
                 f"{', Q from shared memory' if k['q_smem'] else ''}")
        hazards = in_flight_hazards(insns)
        # The check's own control: the same code with an FADD on the first P·V HGMMA's
        # accumulators right after it is issued must be caught.
        pv = next((j for j, (_, t) in enumerate(insns) if ".tnspB" in t and "gsb0" in t), None)
        if pv is not None:
            acc0 = min(hgmma_regs(insns[pv][1])[0])
            probe_at = "fffffff0"  # an address no kernel reaches: only the probe has it
            probe = insns[:pv + 1] + [(probe_at, f"FADD R{acc0}, R{acc0}, R0")] + insns[pv + 1:]
            if not any(addr == probe_at for addr, _ in in_flight_hazards(probe)):
                print(f"FAIL {label}: the in-flight check misses a read of the accumulators")
                failed = True
                continue
        if hazards:
            print(f"FAIL {label}: {len(hazards)} instructions touch the registers of an HGMMA "
                  f"in flight, e.g.")
            for addr, s in hazards[:3]:
                print(f"    /*{addr}*/ {s}")
            failed = True
            continue
        if k["q_smem"]:
            ss = [i for i, (_, s) in enumerate(insns) if HGMMA_QK_SS.search(s)]
            in_flight = in_flight_writes(insns)
            if qk or not ss:
                print(f"FAIL {label}: expected only SS-form QK HGMMAs, found {len(qk)} with a "
                      f"register A operand and {len(ss)} SS")
                failed = True
            elif in_flight:
                print(f"FAIL {label}: {len(in_flight)} writes to an HGMMA's A registers while it "
                      f"is in flight, e.g. /*{in_flight[0][0]}*/ {in_flight[0][1]}")
                failed = True
            else:
                print(f"ok   {label}: {len(ss)} QK HGMMAs read Q from shared memory")
            continue
        if not qk:
            print(f"FAIL {label}: no QK HGMMA with a register A operand found")
            failed = True
            continue
        a_regs = set()
        for i in qk:
            base = int(HGMMA_QK.search(insns[i][1]).group(1))
            a_regs |= set(range(base, base + 4))
        clobbers = [(addr, s) for addr, s in insns[qk[0] + 1:] if written_regs(s) & a_regs]
        clobbers += in_flight_writes(insns)
        if clobbers:
            refused = k["hd"] in REFUSED_HEAD_DIMS
            verdict = "refused head dim, not run" if refused and allow_refused else "FAIL"
            print(f"{verdict} {label}: {len(clobbers)} writes to Q's registers "
                  f"(R{min(a_regs)}..R{max(a_regs)}) after the first QK HGMMA, e.g.")
            for addr, s in clobbers[:3]:
                print(f"    /*{addr}*/ {s}")
            if not (refused and allow_refused):
                failed = True
        else:
            print(f"ok   {label}: Q's registers R{min(a_regs)}..R{max(a_regs)} are not written "
                  f"after the first of {len(qk)} QK HGMMAs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
