"""Writes tests/data/fp8/e4m3_golden.json: PyTorch's float8_e4m3fn conversions, the reference for
core/fp8.h (tests/core/fp8_test.cpp).

  decode: the float value of each of the 256 codes (NaN as null)
  encode: [float32 bits, code] for every code's value, each midpoint between neighbouring codes
          (the ties: round half to even), one float32 ulp either side of each midpoint, values
          past the largest finite (±448: PyTorch saturates), infinities, NaN, float32
          subnormals and a seeded random sample over the whole float32 exponent range.

Run with a Python that has torch (any recent version): python scripts/ref/fp8_golden.py
"""
import json
import math
import pathlib
import random
import struct

import torch

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/data/fp8/e4m3_golden.json"


def bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def main() -> None:
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist()
    decode = [None if math.isnan(v) else v for v in codes]
    finite = sorted({v for v in decode if v is not None})
    probes = set()
    for v in finite:
        probes.add(bits(v))
    for a, b in zip(finite, finite[1:]):
        mid = bits((a + b) / 2)  # exact in float32: the midpoint of two e4m3 values
        probes.update({mid, mid - 1, mid + 1})
    for v in (448.0, 449.0, 464.0, 479.9, 480.0, 500.0, 1e6, 3.0e38, math.inf, math.nan,
              1e-45, 1e-40, 2.0**-126, 2.0**-10, 2.0**-9, 2.0**-6):
        for s in (1.0, -1.0):
            probes.add(bits(s * v))
    rng = random.Random(7)
    for _ in range(4000):
        probes.add(rng.getrandbits(32))
    probes = sorted(probes)
    # From the bit patterns themselves (NaN payloads and signs kept): int64 → int32 wraps.
    xs = torch.tensor(probes, dtype=torch.int64).to(torch.int32).view(torch.float32)
    enc = xs.to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"torch": torch.__version__, "decode": decode,
                               "encode": [[b, c] for b, c in zip(probes, enc)]}) + "\n")
    print(f"wrote {OUT}: {len(probes)} encodings")


if __name__ == "__main__":
    main()
