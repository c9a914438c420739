#!/usr/bin/env python3
"""Fails when two CTest tests share a name (CTest keeps both, and properties set by name —
labels — then apply to both: a CPU test labelled `gpu` is dropped by `ctest -LE gpu`).

Usage: check_unique_test_names.py CTEST BUILD_DIR   (registered as the CTest test
unique_test_names, tests/CMakeLists.txt)."""
import collections
import json
import subprocess
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check_unique_test_names.py CTEST BUILD_DIR")
    ctest, build_dir = sys.argv[1:]
    out = subprocess.run([ctest, "--test-dir", build_dir, "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
    names = [t["name"] for t in json.loads(out)["tests"]]
    repeated = {n: c for n, c in collections.Counter(names).items() if c > 1}
    if repeated:
        for name, count in sorted(repeated.items()):
            print(f"{name}: defined {count} times", file=sys.stderr)
        sys.exit(f"{len(repeated)} CTest names are defined more than once: give the binaries "
                 "distinct test names or a TEST_PREFIX (gtest_discover_tests)")
    print(f"{len(names)} CTest names, all distinct")


if __name__ == "__main__":
    main()
