#!/usr/bin/env python3
"""Writes a Hugging Face mixture-of-experts checkpoint (Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE;
config.json + model.safetensors, e.g. the tiny ones of tests/data/loaders/hf_v5) as a GGUF file
in llama.cpp's layout, with llama.cpp's own `gguf` package: architecture and tensor names come
from gguf.constants (each name checked against the architecture's tensor list there), the
experts are stacked into 3-D tensors as llama.cpp's converter stacks them, and Mixtral's q/k
rows are permuted for llama.cpp's interleaved RoPE. This is the check of detllm's GGUF MoE
reading that does not depend on detllm's own idea of the layout (tests/e2e/test_moe_gguf.py).

    python scripts/ref/moe_gguf.py tests/data/loaders/hf_v5/qwen3_moe out.gguf [--experts q8_0]

Weights are written as fp32 (the bf16 values exactly), or with --experts q8_0 the routed experts
quantized by gguf.quants (llama.cpp's reference Q8_0). Needs numpy and gguf (pip install gguf).
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

# model_type -> (GGUF architecture, renormalise the k weights: llama.cpp's fixed rule)
ARCHS = {
    "qwen3_moe": (gguf.MODEL_ARCH.QWEN3MOE, True),
    "qwen2_moe": (gguf.MODEL_ARCH.QWEN2MOE, False),
    "mixtral": (gguf.MODEL_ARCH.LLAMA, True),
    "olmoe": (gguf.MODEL_ARCH.OLMOE, False),
}


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = data[a:b]
        if info["dtype"] == "BF16":
            x = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F32":
            x = np.frombuffer(buf, dtype="<f4")
        else:
            sys.exit(f"{path}: tensor {name} has dtype {info['dtype']} (this script reads BF16, F32)")
        out[name] = x.reshape(info["shape"]).astype(np.float32)
    return out


def permute(w, n_head):
    # llama.cpp's converter (LlamaModel.permute): rows of each head from HF's half-split RoPE
    # order to interleaved pairs.
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--experts", choices=["f32", "q8_0"], default="f32")
    args = ap.parse_args()
    cfg = json.loads((Path(args.hf_dir) / "config.json").read_text())
    mt = cfg["model_type"]
    if mt not in ARCHS:
        sys.exit(f"model_type {mt} is not a mixture of experts this script writes ({', '.join(ARCHS)})")
    arch, renorm = ARCHS[mt]
    if cfg.get("norm_topk_prob", renorm) != renorm:
        sys.exit(f"norm_topk_prob = {cfg['norm_topk_prob']}: llama.cpp's {gguf.MODEL_ARCH_NAMES[arch]} "
                 f"{'always' if renorm else 'never'} renormalises, so this checkpoint has no GGUF form")
    t = read_safetensors(Path(args.hf_dir) / "model.safetensors")
    n_layers = cfg["num_hidden_layers"]
    dim = cfg["hidden_size"]
    n_head = cfg["num_attention_heads"]
    n_kv = cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or dim // n_head
    n_exp = cfg.get("num_experts") or cfg["num_local_experts"]
    rope = cfg.get("rope_parameters") or {"rope_theta": cfg.get("rope_theta", 10000.0)}

    w = gguf.GGUFWriter(args.out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(Path(args.hf_dir).name)
    w.add_block_count(n_layers)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(dim)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(rope["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_expert_count(n_exp)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if "moe_intermediate_size" in cfg:
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if "shared_expert_intermediate_size" in cfg:
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])

    allowed = gguf.MODEL_TENSORS[arch]

    def put(kind, data, bid=None, suffix="weight", qtype=None):
        assert kind in allowed, f"{kind} is not a tensor of {gguf.MODEL_ARCH_NAMES[arch]} in gguf"
        name = gguf.TENSOR_NAMES[kind].format(bid=bid) + "." + suffix
        if qtype is None:
            w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)

    T = gguf.MODEL_TENSOR
    mixtral = mt == "mixtral"
    put(T.TOKEN_EMBD, t["model.embed_tokens.weight"])
    for i in range(n_layers):
        p = f"model.layers.{i}."
        put(T.ATTN_NORM, t[p + "input_layernorm.weight"], i)
        q, k = t[p + "self_attn.q_proj.weight"], t[p + "self_attn.k_proj.weight"]
        put(T.ATTN_Q, permute(q, n_head) if mixtral else q, i)
        put(T.ATTN_K, permute(k, n_kv) if mixtral else k, i)
        put(T.ATTN_V, t[p + "self_attn.v_proj.weight"], i)
        for kind, proj in ((T.ATTN_Q, "q"), (T.ATTN_K, "k"), (T.ATTN_V, "v")):
            if p + f"self_attn.{proj}_proj.bias" in t:
                put(kind, t[p + f"self_attn.{proj}_proj.bias"], i, "bias")
        put(T.ATTN_OUT, t[p + "self_attn.o_proj.weight"], i)
        if p + "self_attn.q_norm.weight" in t:
            put(T.ATTN_Q_NORM, t[p + "self_attn.q_norm.weight"], i)
            put(T.ATTN_K_NORM, t[p + "self_attn.k_norm.weight"], i)
        put(T.FFN_NORM, t[p + "post_attention_layernorm.weight"], i)
        block, names = ("block_sparse_moe", ("w1", "w3", "w2")) if mixtral else \
            ("mlp", ("gate_proj", "up_proj", "down_proj"))
        put(T.FFN_GATE_INP, t[p + f"{block}.gate.weight"], i)
        qtype = gguf.GGMLQuantizationType.Q8_0 if args.experts == "q8_0" else None
        for kind, proj in zip((T.FFN_GATE_EXP, T.FFN_UP_EXP, T.FFN_DOWN_EXP), names):
            stacked = np.stack([t[p + f"{block}.experts.{e}.{proj}.weight"] for e in range(n_exp)])
            put(kind, stacked, i, qtype=qtype)
        if p + "mlp.shared_expert_gate.weight" in t:
            for kind, proj in ((T.FFN_GATE_SHEXP, "gate_proj"), (T.FFN_UP_SHEXP, "up_proj"),
                               (T.FFN_DOWN_SHEXP, "down_proj")):
                put(kind, t[p + f"mlp.shared_expert.{proj}.weight"], i)
            put(T.FFN_GATE_INP_SHEXP, t[p + "mlp.shared_expert_gate.weight"].reshape(dim), i)
    put(T.OUTPUT_NORM, t["model.norm.weight"])
    if "lm_head.weight" in t:
        put(T.OUTPUT, t["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
