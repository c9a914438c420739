#!/usr/bin/env python3
"""Tiny FP8 checkpoints in the published layouts, with reference logits, and the FP8 linear
layer's golden values (docs/models.md, "FP8"; kernels/ref/fp8_linear.h).

Writes, under OUT (default tests/data/fp8):
  <case>/config.json, model.safetensors   a tiny random Llama saved by transformers, its
        projections then quantized here with torch.float8_e4m3fn and written as the FP8
        checkpoints are published (`quantization_config` + float8 `weight` + `weight_scale`
        [+ `input_scale`], lm_head and embeddings left bf16):
          ct_channel  compressed-tensors, per-channel weight scales (fp32), dynamic per-token
                      activations (llm-compressor's FP8_DYNAMIC)
          ct_static   compressed-tensors, per-tensor weight scales (bf16) and static per-tensor
                      input_scale (llm-compressor's FP8 scheme), calibrated on a fixed prompt
          ct_block    compressed-tensors, 128x128 block weight scales, dynamic per-token
                      activations (FP8_BLOCK)
          fbgemm      fbgemm_fp8: per-channel weight_scale, input_scale_ub per layer,
                      activation_scale_ub 2.0 (low enough that it caps many tokens)
          ct_kv       ct_channel's scheme plus an FP8 KV cache (`kv_cache_scheme`, strategy
                      tensor): `self_attn.k_scale` / `v_scale` (1) in bf16, calibrated as amax / 448
                      of the post-RoPE K and of V over a fixed prompt at HALF its amax, so
                      louder tokens of the test prompts saturate at ±448
          ct_kv_head  the same per KV head (strategy attn_head): scales (n_kv_heads, 1, 1), fp32
  <case>/golden.json, logits.f32   token ids and the fp32 logits of every position: transformers'
        forward in fp32 with every quantized nn.Linear replaced by the FP8 arithmetic in torch
        (activations rounded per token — or by the static scale — with torch's float8 cast,
        weights dequantized from their codes, products summed by torch's fp32 matmul; with a
        KV scheme, K and V rounded as the attention function receives them: dec(e4m3(x / s)) · s
        per KV head). The C++ test allows for the different summation order
        (tests/model/fp8_checkpoint_test.cpp).
  linear_golden.json   FP8 linear layers on random data: x, codes and scales, and y computed
        with torch's float8 casts and a sequential fp32 sum in numpy — the bits
        kernels/ref/fp8_linear.h must give (tests/kernels/fp8_linear_test.cpp).
  linear_g128_golden.json   the same for transformers' fp8 arithmetic (kF8E4M3G128):
        activations scaled per token and 128-column group, y = Σ_b (P_b · s_b) · s_w[b].
  Checkpoints of transformers' own quant_method "fp8" (FineGrainedFP8Config, the format of
  Qwen3-*-FP8 and DeepSeek-V3: `weight` F8_E4M3, `weight_scale_inv` per 128x128 block — a
  multiplier, despite the name), and a mixture of experts with FP8 experts in both formats:
          fp8_dense   Qwen3 (q/k norms), hidden 128 / intermediate 256 (K a multiple of 128, as
                      transformers' act_quant asserts), fp32 scales, no modules_to_not_convert
                      (transformers keeps lm_head unconverted by default, as Qwen3-8B-FP8 relies on)
          fp8_moe     Qwen3-MoE, 4 experts of 128, top 2, bf16 scales; the routers listed in
                      modules_to_not_convert as Qwen3-30B-A3B-FP8 lists them
          ct_moe      Qwen3-MoE, compressed-tensors per-channel / dynamic per token, 8 experts of
                      32, top 2, the routers in ignore
        Their references emulate transformers' integrations/finegrained_fp8.py in torch: per
        (token, 128 columns) act_quant (s = amax / 448), each 128-column block's product times
        the activation scale then the weight scale, added in fp32 (`acc += dot(a, b) * a_s *
        b_s`, the Triton kernel's order), the products of a block summed k ascending as detllm
        sums them (seq_matmul); for the MoE the experts module is replaced by one that
        runs each routed expert's gate, up and down through that layer, as transformers' experts
        loop does (FP8Expert), the router unquantized.

Deterministic (fixed seeds). Needs torch (with float8), transformers >= 5, safetensors, numpy:
    python3 scripts/ref/fp8_checkpoints.py [OUT] [CASE ...]   (no CASE: every file)
"""
import json
import os
import re
import struct
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file, load_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_checkpoints import randomize, stable_topk  # noqa: E402  (the bf16 fixtures' weights)

F8 = torch.float8_e4m3fn
MAX = 448.0
SEQ_LENS = [40, 17]
CALIB_LEN = 32
PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
# hidden 64 and intermediate 192: down_proj's rows span two 128-column blocks, the last partial,
# and gate/up two 128-row blocks.
MODEL = dict(model_type="llama", vocab_size=128, hidden_size=64, intermediate_size=192,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def e4m3(x):
    """torch's cast (round to nearest even, saturating at ±448 as FP8 checkpoints are made)."""
    return x.clamp(-MAX, MAX).to(F8)


def quantize_activation(x, input_scale=None, bound=None):
    """Per token (last dim): (codes as float32, scale (..., 1))."""
    if input_scale is not None:
        s = torch.full(x.shape[:-1] + (1,), float(input_scale), dtype=torch.float32)
    else:
        a = x.abs().amax(dim=-1, keepdim=True)
        if bound is not None:
            a = torch.minimum(a, torch.tensor(bound, dtype=torch.float32))
        s = a / MAX
        s = torch.where(s == 0, torch.ones_like(s), s)
    return e4m3(x / s).float(), s


class Fp8Linear(torch.nn.Module):
    """The FP8 arithmetic in torch: y = (dec(q) @ dec(w)ᵀ) · s_x · s_w (per block: blockwise)."""

    def __init__(self, codes, scale, strategy, input_scale=None, bound=None):
        super().__init__()
        self.codes = codes.float()  # exact decoded codes
        self.scale, self.strategy = scale.float(), strategy
        self.input_scale, self.bound = input_scale, bound

    def forward(self, x):
        q, s = quantize_activation(x.float(), self.input_scale, self.bound)
        if self.strategy == "block":
            n, k = self.codes.shape
            y = torch.zeros(q.shape[:-1] + (n,), dtype=torch.float32)
            for b in range(0, k, 128):
                part = seq_matmul(q[..., b:b + 128], self.codes[:, b:b + 128])
                sw = self.scale[:, b // 128].repeat_interleave(128)[:n]
                y = y + part * sw
            return y * s
        sw = self.scale.reshape(-1) if self.strategy != "tensor" else self.scale.reshape(())
        return (q @ self.codes.T) * s * sw


def quantize_weight(w, strategy):
    """(codes, scale) of a fp32 weight (n, k) — llm-compressor's min-max observer."""
    if strategy == "channel":
        s = w.abs().amax(dim=1, keepdim=True) / MAX
        return e4m3(w / s), s  # (n, 1)
    if strategy == "tensor":
        s = w.abs().amax().reshape(1) / MAX
        return e4m3(w / s), s
    n, k = w.shape
    nb, kb = (n + 127) // 128, (k + 127) // 128
    s = torch.zeros(nb, kb)
    codes = torch.empty(n, k, dtype=F8)
    for i in range(nb):
        for j in range(kb):
            blk = w[128 * i:128 * i + 128, 128 * j:128 * j + 128]
            s[i, j] = blk.abs().amax() / MAX
            codes[128 * i:128 * i + 128, 128 * j:128 * j + 128] = e4m3(blk / s[i, j])
    return codes, s


KV_CALIB_FRACTION = 0.5  # the KV scales cover half the calibration amax: some values saturate


def e4m3_kv(x, s):
    """The FP8 KV cache's rounding of K or V (b, n_kv, seq, head_dim), s per KV head (n_kv)."""
    s = s.reshape(1, -1, 1, 1)
    return e4m3(x / s).float() * s


def kv_attention(scales):
    """An attention function that rounds K and V as the FP8 KV cache stores them, then runs
    transformers' sdpa attention: scales[layer] = (k_scale (n_kv), v_scale (n_kv))."""
    sdpa = transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS["sdpa"]

    def attend(module, query, key, value, attention_mask, **kwargs):
        ks, vs = scales[module.layer_idx]
        return sdpa(module, query, e4m3_kv(key.float(), ks), e4m3_kv(value.float(), vs),
                    attention_mask, **kwargs)
    return attend


def kv_amax(model, ids):
    """Per layer, the amax of the post-RoPE K and of V of each KV head over `ids`."""
    seen = {}
    sdpa = transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS["sdpa"]

    def observe(module, query, key, value, attention_mask, **kwargs):
        k = key.abs().amax(dim=(0, 2, 3))
        v = value.abs().amax(dim=(0, 2, 3))
        seen[module.layer_idx] = (k, v)
        return sdpa(module, query, key, value, attention_mask, **kwargs)
    transformers.AttentionInterface.register("detllm_kv_observe", observe)
    model.set_attn_implementation("detllm_kv_observe")
    with torch.no_grad():
        model(torch.tensor([ids]))
    model.set_attn_implementation("sdpa")
    return seen


def ct_config(strategy, static):
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy,
               "dynamic": False, "group_size": None, "block_structure": None,
               "observer": "minmax", "observer_kwargs": {}, "actorder": None}
    if strategy == "block":
        weights["block_structure"] = [128, 128]
    acts = {"num_bits": 8, "type": "float", "symmetric": True,
            "strategy": "tensor" if static else "token", "dynamic": not static,
            "group_size": None, "block_structure": None, "actorder": None,
            "observer": "minmax" if static else None, "observer_kwargs": {}}
    return {"quant_method": "compressed-tensors", "format": "float-quantized",
            "quantization_status": "compressed", "global_compression_ratio": None,
            "version": "0.10.2", "ignore": ["lm_head"], "kv_cache_scheme": None,
            "sparsity_config": {},
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": acts,
                                          "output_activations": None,
                                          "format": "float-quantized"}}}


CASES = {
    "ct_channel": dict(strategy="channel", static=False, fbgemm=False),
    "ct_static": dict(strategy="tensor", static=True, fbgemm=False),
    "ct_block": dict(strategy="block", static=False, fbgemm=False),
    "fbgemm": dict(strategy="channel", static=False, fbgemm=True),
    "ct_kv": dict(strategy="channel", static=False, fbgemm=False, kv="tensor"),
    "ct_kv_head": dict(strategy="channel", static=False, fbgemm=False, kv="attn_head"),
}
FBGEMM_UB = 2.0


def write_case(out, name, case, seed):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    kw = dict(MODEL)
    config = AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed)
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    rng = np.random.default_rng(seed)
    # Static input scales: each projection input's amax over a fixed calibration prompt.
    amax = {}
    if case["static"]:
        hooks = []
        for i, layer in enumerate(ref.model.layers):
            for p in PROJ:
                mod = layer.get_submodule(p)
                key = f"model.layers.{i}.{p}"
                hooks.append(mod.register_forward_pre_hook(
                    lambda m, a, key=key: amax.__setitem__(
                        key, max(amax.get(key, 0.0), float(a[0].abs().max())))))
        with torch.no_grad():
            ref(torch.tensor([rng.integers(0, config.vocab_size, size=CALIB_LEN).tolist()]))
        for h in hooks:
            h.remove()
    tensors = load_file(os.path.join(d, "model.safetensors"))
    for i, layer in enumerate(ref.model.layers):
        for p in PROJ:
            key = f"model.layers.{i}.{p}"
            w = tensors[key + ".weight"].float()
            codes, s = quantize_weight(w, case["strategy"])
            tensors[key + ".weight"] = codes
            # ct_static keeps its scales in bf16 (as llm-compressor writes them in the model's
            # dtype); the test checks they load: the reference uses the bf16-rounded values.
            if name == "ct_static":
                s = s.to(torch.bfloat16)
            tensors[key + ".weight_scale"] = s.contiguous()
            input_scale, bound = None, None
            if case["static"]:
                input_scale = torch.tensor([amax[key] / MAX], dtype=torch.float32)
                if name == "ct_static":
                    input_scale = input_scale.to(torch.bfloat16)
                tensors[key + ".input_scale"] = input_scale
                input_scale = float(input_scale.float())
            if case["fbgemm"]:
                tensors[key + ".input_scale_ub"] = torch.tensor([FBGEMM_UB], dtype=torch.float32)
                bound = FBGEMM_UB
            parent = layer.get_submodule(p.split(".")[0])
            setattr(parent, p.split(".")[1],
                    Fp8Linear(codes, s, case["strategy"], input_scale, bound))
    kv = case.get("kv")
    if kv:
        # The KV scales: calibrated on the FP8 model itself (its K and V as served), once.
        seen = kv_amax(ref, rng.integers(0, config.vocab_size, size=CALIB_LEN).tolist())
        scales = {}
        for i in range(config.num_hidden_layers):
            pair = []
            for which, amax_h in zip("kv", seen[i]):
                a = amax_h * KV_CALIB_FRACTION / MAX
                if kv == "tensor":  # one scale, stored (1) in bf16 as llm-compressor writes it
                    t = a.amax().reshape(1).to(torch.bfloat16)
                    pair.append(t.float().expand(amax_h.numel()).clone())
                else:  # per KV head, (n_kv, 1, 1) fp32
                    t = a.reshape(-1, 1, 1).float()
                    pair.append(t.reshape(-1).clone())
                tensors[f"model.layers.{i}.self_attn.{which}_scale"] = t.contiguous()
            scales[i] = tuple(pair)
        transformers.AttentionInterface.register("detllm_fp8_kv", kv_attention(scales))
        ref.set_attn_implementation("detllm_fp8_kv")
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if case["fbgemm"]:
        cfg["quantization_config"] = {"quant_method": "fbgemm_fp8",
                                      "activation_scale_ub": FBGEMM_UB,
                                      "modules_to_not_convert": ["lm_head"]}
    else:
        cfg["quantization_config"] = ct_config(case["strategy"], case["static"])
        if kv:
            cfg["quantization_config"]["kv_cache_scheme"] = {
                "num_bits": 8, "type": "float", "symmetric": True, "strategy": kv,
                "dynamic": False, "group_size": None, "block_structure": None,
                "observer": "minmax", "observer_kwargs": {}, "actorder": None}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    seqs, blobs = [], []
    with torch.no_grad():
        for n in SEQ_LENS:
            ids = rng.integers(0, config.vocab_size, size=n).tolist()
            blobs.append(ref(torch.tensor([ids])).logits[0].float().numpy().astype("<f4"))
            seqs.append({"tokens": ids})
    np.concatenate(blobs).tofile(os.path.join(d, "logits.f32"))
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump({"transformers_version": transformers.__version__, "torch": torch.__version__,
                   "case": name, "vocab_size": config.vocab_size, "sequences": seqs}, f)
        f.write("\n")
    print(name, "written to", d)


def f32_bits(a):
    return [struct.unpack("<I", struct.pack("<f", float(v)))[0] for v in np.asarray(a, np.float32).reshape(-1)]


def seq_sum(prods):
    acc = np.float32(0)
    for p in prods:
        acc = np.float32(acc + np.float32(p))
    return acc


def linear_case(rng, m, n, k, blocks, input_scale, bound, zero_row):
    x = (rng.standard_normal((m, k)) * rng.choice([0.01, 1.0, 30.0], size=(m, 1))).astype(np.float32)
    if zero_row:
        x[0] = 0
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    nw = (k + 127) // 128 if blocks else 1
    ws = (rng.uniform(0.5, 2.0, size=(n, nw)) * 1e-3).astype(np.float32)
    codes = torch.from_numpy(w / np.repeat(ws, 128, axis=1)[:, :k] if blocks else w / ws)
    codes = e4m3(codes)
    wd = codes.float().numpy()
    xt = torch.from_numpy(x)
    q, s = quantize_activation(xt, input_scale, bound)
    q, s = q.numpy(), s.numpy().reshape(-1)
    y = np.zeros((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            prods = (q[i] * wd[j]).astype(np.float32)  # exact in fp32
            if blocks:
                acc = np.float32(0)
                for b in range(nw):
                    part = seq_sum(prods[128 * b:128 * b + 128])
                    acc = np.float32(acc + np.float32(part * ws[j, b]))
                y[i, j] = np.float32(acc * s[i])
            else:
                y[i, j] = np.float32(np.float32(seq_sum(prods) * s[i]) * ws[j, 0])
    return {"m": m, "n": n, "k": k, "blocks": blocks,
            "input_scale": 0.0 if input_scale is None else input_scale,
            "act_bound": 0.0 if bound is None else bound,
            "x": f32_bits(x), "codes": codes.view(torch.uint8).reshape(-1).tolist(),
            "weight_scales": f32_bits(ws), "y": f32_bits(y)}


def write_linear_golden(out):
    rng = np.random.default_rng(11)
    cases = [linear_case(rng, 3, 5, 64, False, None, None, True),
             linear_case(rng, 2, 4, 300, False, None, None, False),
             linear_case(rng, 2, 4, 300, True, None, None, False),
             linear_case(rng, 3, 3, 96, False, 0.05, None, False),
             linear_case(rng, 3, 3, 96, False, None, 2.0, False)]
    with open(os.path.join(out, "linear_golden.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
        f.write("\n")
    print("linear golden:", len(cases), "cases")


# ---- transformers' quant_method "fp8" and FP8 mixtures of experts -------------------------

QWEN3_128 = dict(model_type="qwen3", vocab_size=128, hidden_size=128, intermediate_size=256,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
QWEN3_MOE = dict(model_type="qwen3_moe", vocab_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                 rms_norm_eps=1e-6, tie_word_embeddings=False, norm_topk_prob=True,
                 num_experts_per_tok=2, rope_parameters={"rope_type": "default",
                                                         "rope_theta": 1000000.0})
HF_CASES = {
    "fp8_dense": dict(model=QWEN3_128, fmt="fp8", scale_dtype=torch.float32),
    "fp8_moe": dict(model=dict(QWEN3_MOE, hidden_size=128, head_dim=32, intermediate_size=256,
                               moe_intermediate_size=128, num_experts=4),
                    fmt="fp8", scale_dtype=torch.bfloat16),
    "ct_moe": dict(model=dict(QWEN3_MOE, hidden_size=64, head_dim=16, intermediate_size=96,
                              moe_intermediate_size=32, num_experts=8),
                   fmt="ct_channel", scale_dtype=torch.float32),
}
# The quantized Linear layers: attention, a dense MLP, every expert (not the router mlp.gate).
QUANTIZED = re.compile(r"model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj|"
                       r"mlp\.experts\.\d+\.(gate|up|down)_proj)$")


def act_quant_groups(x):
    """transformers' act_quant (DeepSeek's kernel) per 128 columns of each token: codes as
    float32 and scales (..., groups). An all-zero group gets s = 1 (act_quant divides by 0 there
    and nan_to_num zeroes the output row; detllm's rule, kernels/ref/fp8_linear.h)."""
    k = x.shape[-1]
    qs, ss = [], []
    for b in range(0, k, 128):
        xb = x[..., b:b + 128]
        s = xb.abs().amax(dim=-1, keepdim=True) / MAX
        s = torch.where(s == 0, torch.ones_like(s), s)
        qs.append(e4m3(xb / s).float())
        ss.append(s)
    return torch.cat(qs, dim=-1), torch.cat(ss, dim=-1)


def seq_matmul(q, codes):
    """q @ codesᵀ with each output's products summed in fp32 from 0, k ascending — detllm's order
    (torch's matmul sums in another order, which can move a downstream activation across an
    E4M3 rounding boundary)."""
    acc = torch.zeros(q.shape[:-1] + (codes.shape[0],), dtype=torch.float32)
    for k in range(q.shape[-1]):
        acc = acc + q[..., k:k + 1] * codes[:, k]
    return acc


class Fp8SeqLinear(torch.nn.Module):
    """Per-channel FP8 (compressed-tensors channel / dynamic per token) with detllm's sum order:
    y = ((Σ_k q·w) · s_x) · s_w."""

    def __init__(self, codes, scale):
        super().__init__()
        self.codes, self.scale = codes.float(), scale.float().reshape(-1)

    def forward(self, x):
        q, s = quantize_activation(x.float())
        return seq_matmul(q, self.codes) * s * self.scale


class Fp8GroupLinear(torch.nn.Module):
    """finegrained_fp8's FP8Linear in torch: acc += (q_b @ w_bᵀ) · a_s[b] · w_s[b], b ascending."""

    def __init__(self, codes, scale_inv):
        super().__init__()
        self.codes, self.scale = codes.float(), scale_inv.float()

    def forward(self, x):
        q, s = act_quant_groups(x.float())
        n, k = self.codes.shape
        y = torch.zeros(q.shape[:-1] + (n,), dtype=torch.float32)
        for b in range(0, k, 128):
            part = seq_matmul(q[..., b:b + 128], self.codes[:, b:b + 128])
            sw = self.scale[:, b // 128].repeat_interleave(128)[:n]
            y = y + part * s[..., b // 128:b // 128 + 1] * sw
        return y


class Fp8Experts(torch.nn.Module):
    """transformers' experts loop (Qwen3MoeExperts.forward, FP8Expert.forward) with each
    expert's gate, up and down an FP8 layer of its own, as the checkpoint stores them."""

    def __init__(self, experts, act_fn):
        super().__init__()
        self.experts, self.act_fn = experts, act_fn  # [(gate, up, down)] modules

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        n = len(self.experts)
        mask = torch.nn.functional.one_hot(top_k_index, num_classes=n + 1).permute(2, 1, 0)
        for e in range(n):
            top_k_pos, token_idx = torch.where(mask[e])
            if token_idx.numel() == 0:
                continue
            x = hidden_states[token_idx]
            g, u, d = self.experts[e]
            h = d(self.act_fn(g(x)) * u(x))
            out.index_add_(0, token_idx, h * top_k_weights[token_idx, top_k_pos, None])
        return out


def fp8_config(fmt, n_layers, moe):
    if fmt == "fp8":
        q = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128]}
        if moe:  # Qwen3-30B-A3B-FP8 lists lm_head and every router
            q["modules_to_not_convert"] = ["lm_head"] + [
                f"model.layers.{i}.mlp.gate" for i in range(n_layers)]
        return q
    q = ct_config("channel", static=False)
    q["ignore"] = ["lm_head"] + [f"model.layers.{i}.mlp.gate" for i in range(n_layers)]
    return q


def write_hf_case(out, name, case, seed):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    kw = dict(case["model"])
    config = AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed)
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    tensors = load_file(os.path.join(d, "model.safetensors"))
    layers = {}  # module -> the FP8 layer that replaces it in the reference
    for key in sorted(tensors):
        module = key[:-len(".weight")]
        if not key.endswith(".weight") or not QUANTIZED.search(module):
            continue
        w = tensors[key].float()
        if case["fmt"] == "fp8":
            codes, s = quantize_weight(w, "block")
            tensors[module + ".weight_scale_inv"] = s.to(case["scale_dtype"]).contiguous()
            layers[module] = Fp8GroupLinear(codes, s.to(case["scale_dtype"]))
        else:
            codes, s = quantize_weight(w, "channel")
            tensors[module + ".weight_scale"] = s.contiguous()
            layers[module] = Fp8SeqLinear(codes, s)
        tensors[key] = codes
    moe = hasattr(config, "num_experts")
    for i, layer in enumerate(ref.model.layers):
        for p in ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"]:
            parent, leaf = p.split(".")
            setattr(layer.get_submodule(parent), leaf, layers[f"model.layers.{i}.{p}"])
        if moe:
            experts = [tuple(layers[f"model.layers.{i}.mlp.experts.{e}.{x}_proj"]
                             for x in ("gate", "up", "down")) for e in range(config.num_experts)]
            layer.mlp.experts = Fp8Experts(experts, layer.mlp.experts.act_fn)
        else:
            for x in ("gate", "up", "down"):
                setattr(layer.mlp, f"{x}_proj", layers[f"model.layers.{i}.mlp.{x}_proj"])
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = fp8_config(case["fmt"], config.num_hidden_layers, moe)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    rng = np.random.default_rng(seed)
    seqs, blobs = [], []
    with torch.no_grad():
        for n in SEQ_LENS:
            ids = rng.integers(0, config.vocab_size, size=n).tolist()
            blobs.append(ref(torch.tensor([ids])).logits[0].float().numpy().astype("<f4"))
            seqs.append({"tokens": ids})
    np.concatenate(blobs).tofile(os.path.join(d, "logits.f32"))
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump({"transformers_version": transformers.__version__, "torch": torch.__version__,
                   "case": name, "vocab_size": config.vocab_size, "sequences": seqs}, f)
        f.write("\n")
    print(name, "written to", d)


def g128_case(rng, m, n, k, zero_group):
    """One kF8E4M3G128 layer: x with groups of different loudness, 128x128-block weights."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    x *= np.repeat(rng.choice([0.01, 1.0, 30.0], size=(m, (k + 127) // 128)), 128, axis=1)[:, :k]
    if zero_group:
        x[0, :128] = 0
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    nw = (k + 127) // 128
    ws = (rng.uniform(0.5, 2.0, size=(n, nw)) * 1e-3).astype(np.float32)
    codes = e4m3(torch.from_numpy(w / np.repeat(ws, 128, axis=1)[:, :k]))
    wd = codes.float().numpy()
    q, s = act_quant_groups(torch.from_numpy(x))
    q, s = q.numpy(), s.numpy()
    y = np.zeros((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            prods = (q[i] * wd[j]).astype(np.float32)  # exact in fp32
            acc = np.float32(0)
            for b in range(nw):
                part = seq_sum(prods[128 * b:128 * b + 128])
                acc = np.float32(acc + np.float32(np.float32(part * s[i, b]) * ws[j, b]))
            y[i, j] = acc
    return {"m": m, "n": n, "k": k, "blocks": True, "groups": True, "input_scale": 0.0,
            "act_bound": 0.0, "x": f32_bits(x), "codes": codes.view(torch.uint8).reshape(-1).tolist(),
            "weight_scales": f32_bits(ws), "y": f32_bits(y)}


def write_g128_golden(out):
    rng = np.random.default_rng(12)
    cases = [g128_case(rng, 3, 5, 256, True), g128_case(rng, 2, 4, 300, False),
             g128_case(rng, 4, 3, 128, False)]
    with open(os.path.join(out, "linear_g128_golden.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
        f.write("\n")
    print("linear g128 golden:", len(cases), "cases")


def main():
    args = sys.argv[1:]
    out = args.pop(0) if args and args[0] not in CASES and args[0] not in HF_CASES and \
        not args[0].startswith("linear") else os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "fp8")
    want = set(args)
    os.makedirs(out, exist_ok=True)
    torch.topk = stable_topk  # the MoE routers' only top-k: ties to the lower expert index
    for seed, (name, case) in enumerate(CASES.items()):
        if not want or name in want:
            write_case(out, name, case, 100 + seed)
    for seed, (name, case) in enumerate(HF_CASES.items()):
        if not want or name in want:
            write_hf_case(out, name, case, 200 + seed)
    if not want or "linear" in want:
        write_linear_golden(out)
    if not want or "linear_g128" in want:
        write_g128_golden(out)


if __name__ == "__main__":
    main()
