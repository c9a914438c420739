#!/usr/bin/env python3
"""The layer rule of src/ (docs/architecture.md, "Layers"): a file may include files of its own
folder and of folders on lower floors, never of a higher floor or of another folder on its own
floor. Fails, listing every offending #include, when one does. Run by CTest (`layers`) and by
hand: python3 scripts/check_layers.py [--graph]"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")

# Floors, bottom to top. determinism/ holds what every layer may include (the policy, the mode
# table, the fingerprint, the self-check verdict): it sits just above core/ and includes
# nothing else.
FLOORS = [
    ["core"],
    ["determinism"],
    ["formats", "jinja", "kernels"],
    ["tokenizer"],
    # structured/: grammars for constrained output (xgrammar); needs the tokenizer's vocabulary,
    # used by engine/.
    ["model", "structured"],
    ["engine", "backends"],
    ["verify"],
    ["server", "bench"],
    # The two front ends: the command line and the Python package's facade.
    ["cli", "api"],
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}

# Libraries of their own: outside its folder, a library's folder is included through its public
# header only (src/jinja: the detllm_jinja target, CMakeLists.txt).
PUBLIC_HEADERS = {"jinja": "jinja/jinja.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(path):
    rel = os.path.relpath(path, SRC)
    return rel.split(os.sep)[0]


def main():
    graph = "--graph" in sys.argv
    errors, edges = [], {}
    for dirpath, _, files in os.walk(SRC):
        for f in sorted(files):
            if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, f)
            room = room_of(path)
            if room not in FLOOR:
                errors.append(f"{os.path.relpath(path, ROOT)}: folder src/{room}/ has no floor "
                              f"in scripts/check_layers.py")
                continue
            text = open(path, encoding="utf-8").read()
            for m in INCLUDE.finditer(text):
                target = m.group(1)
                troom = target.split("/")[0]
                if troom not in FLOOR or troom == room:
                    continue  # same folder, or a file beside it ("decode_step.h")
                edges[(room, troom)] = edges.get((room, troom), 0) + 1
                if troom in PUBLIC_HEADERS and target != PUBLIC_HEADERS[troom]:
                    line = text[:m.start()].count("\n") + 1
                    errors.append(f"{os.path.relpath(path, ROOT)}:{line}: src/{room}/ includes "
                                  f"\"{target}\"; outside src/{troom}/ include its public header "
                                  f"\"{PUBLIC_HEADERS[troom]}\" only")
                if FLOOR[troom] >= FLOOR[room]:
                    line = text[:m.start()].count("\n") + 1
                    how = "a higher floor" if FLOOR[troom] > FLOOR[room] else "its own floor"
                    errors.append(f"{os.path.relpath(path, ROOT)}:{line}: src/{room}/ includes "
                                  f"\"{target}\" from {how} (src/{troom}/)")
    if graph:
        for (a, b), n in sorted(edges.items(), key=lambda e: (FLOOR[e[0][0]], e[0])):
            print(f"{a:12s} -> {b:12s} {n}")
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} include(s) break the layer rule; floors, bottom to "
              f"top: {' | '.join(','.join(f) for f in FLOORS)}")
        return 1
    print(f"check_layers: {sum(edges.values())} includes across {len(edges)} folder pairs, all "
          f"downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
