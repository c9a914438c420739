"""Writes a randomly initialised Llama-family model as a Hugging Face directory (config.json,
model.safetensors, tokenizer.json) with numpy only, for machines the default model does not
travel to (the H200 runs of scripts/gpu/python_gpu.sh). The shapes are a named preset; the
weights are drawn from a seed (normal, std --init-std, as transformers' initializer_range; norm
weights 1). The tokenizer is byte-level BPE without merges: ids 0-255 are the 256 bytes (GPT-2's
byte-to-unicode map), the ids above them are filler entries no text encodes to, and the last id
is "<|endoftext|>" (EOS); so any text encodes (one token a byte) and any id decodes.

  python python/bench/random_model.py DIR [--preset smollm2-135m] [--seed 0] [--dtype float32]

Presets: smollm2-135m (the default model's shapes: 30 layers, dim 576, 9 / 3 heads, ffn 1536,
vocab 49152, tied embeddings), tiny (2 layers, dim 64, vocab 512: seconds on a CPU).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np

PRESETS = {
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         head_dim=64, rope_theta=100000.0, rms_norm_eps=1e-5,
                         max_position_embeddings=8192, tie_word_embeddings=True),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
                 rms_norm_eps=1e-5, max_position_embeddings=1024, tie_word_embeddings=True),
}


def bytes_to_unicode():
    """GPT-2's reversible map of the 256 bytes to printable characters (ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def tokenizer_json(vocab_size: int) -> dict:
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    for i in range(256, vocab_size - 1):
        vocab[f"<filler{i}>"] = i  # "<" is a byte-level character: reachable only by merges
    eos = "<|endoftext|>"
    vocab[eos] = vocab_size - 1
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab_size - 1, "content": eos, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def write_safetensors(path: Path, tensors: dict, dtype: str) -> None:
    """safetensors by hand: an 8-byte header length, the JSON header, then the raw tensors."""
    st_dtype = {"float32": "F32", "bfloat16": "BF16"}[dtype]
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "bfloat16":  # round to nearest even, as torch's .to(torch.bfloat16)
            u = a.view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            raw = u.tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


def write_model(out_dir, preset: str = "smollm2-135m", seed: int = 0, dtype: str = "float32",
                init_std: float = 0.02) -> Path:
    c = dict(PRESETS[preset])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    V, D, F, L = c["vocab_size"], c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    H, KV, HD = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(init_std))

    t = {"model.embed_tokens.weight": mat(V, D)}
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = np.ones(D, np.float32)
        t[p + "self_attn.q_proj.weight"] = mat(H * HD, D)
        t[p + "self_attn.k_proj.weight"] = mat(KV * HD, D)
        t[p + "self_attn.v_proj.weight"] = mat(KV * HD, D)
        t[p + "self_attn.o_proj.weight"] = mat(D, H * HD)
        t[p + "post_attention_layernorm.weight"] = np.ones(D, np.float32)
        t[p + "mlp.gate_proj.weight"] = mat(F, D)
        t[p + "mlp.up_proj.weight"] = mat(F, D)
        t[p + "mlp.down_proj.weight"] = mat(D, F)
    t["model.norm.weight"] = np.ones(D, np.float32)
    if not c["tie_word_embeddings"]:
        t["lm_head.weight"] = mat(V, D)
    write_safetensors(out / "model.safetensors", t, dtype)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
              "bos_token_id": V - 1, "eos_token_id": V - 1, "dtype": dtype,
              "initializer_range": init_std, **c}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(V)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--preset", default="smollm2-135m", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--init-std", type=float, default=0.02)
    a = ap.parse_args()
    out = write_model(a.out_dir, a.preset, a.seed, a.dtype, a.init_std)
    print(f"wrote {out} ({a.preset}, seed {a.seed}, {a.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
