"""A plain torch forward of the Llama family (fp32, Hugging Face parameter names), used for the
backward of causal_lm_logprobs and as the "plain torch" trainer of the example. It follows
transformers' LlamaForCausalLM (RMSNorm, half-split RoPE, GQA, SwiGLU); rope scaling and
GGUF rope_freqs are not modelled (the default model has neither)."""

from __future__ import annotations

from typing import Dict, Mapping, Sequence

import torch


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (heads, T, head_dim); HF's rotate_half
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def token_logprobs(config: Mapping, params: Mapping[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """logprobs (T - 1,) of ids[1:] given their prefixes, for one sequence ids (T,)."""
    c = config
    dim, nh, nkv, hd = c["dim"], c["n_heads"], c["n_kv_heads"], c["head_dim"]
    eps = float(c["rms_eps"])
    T = ids.shape[0]
    emb = params["model.embed_tokens.weight"]
    dev = emb.device
    ids = ids.to(dev)
    x = emb[ids]  # (T, dim)
    pos = torch.arange(T, device=dev, dtype=torch.float32)
    inv = 1.0 / (float(c["rope_theta"]) ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
    ang = torch.outer(pos, inv)
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos(), ang.sin()
    mask = torch.full((T, T), float("-inf"), device=dev).triu(1)
    for i in range(c["n_layers"]):
        p = f"model.layers.{i}."

        def lin(name: str, h: torch.Tensor) -> torch.Tensor:
            w = params[p + name + ".weight"]
            b = params.get(p + name + ".bias")
            return torch.nn.functional.linear(h, w, b)

        h = _rms_norm(x, params[p + "input_layernorm.weight"], eps)
        q = lin("self_attn.q_proj", h).view(T, nh, hd).transpose(0, 1)
        k = lin("self_attn.k_proj", h).view(T, nkv, hd).transpose(0, 1)
        v = lin("self_attn.v_proj", h).view(T, nkv, hd).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in params:
            q = _rms_norm(q, params[p + "self_attn.q_norm.weight"], eps)
            k = _rms_norm(k, params[p + "self_attn.k_norm.weight"], eps)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        att = (q @ k.transpose(-1, -2)) / (hd**0.5) + mask
        o = (att.softmax(-1) @ v).transpose(0, 1).reshape(T, nh * hd)
        x = x + lin("self_attn.o_proj", o)
        h = _rms_norm(x, params[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(lin("mlp.gate_proj", h)) * lin("mlp.up_proj", h)
        x = x + lin("mlp.down_proj", g)
    x = _rms_norm(x, params["model.norm.weight"], eps)
    head = params.get("lm_head.weight", emb)
    logits = x[:-1] @ head.t()
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[1:, None]).squeeze(-1)


def sequences_logprobs(
    config: Mapping, params: Mapping[str, torch.Tensor], seqs: Sequence[torch.Tensor]
) -> torch.Tensor:
    """The logprobs of every sequence, concatenated: (sum(len - 1),)."""
    return torch.cat([token_logprobs(config, params, s) for s in seqs])


def params_from_llm(llm, device="cpu", requires_grad: bool = True) -> Dict[str, torch.Tensor]:
    """The engine's weights as fp32 torch parameters (a trainer's starting copy)."""
    out = {}
    for name, a in llm.named_parameters().items():
        t = torch.from_numpy(a).to(device)
        out[name] = t.requires_grad_(requires_grad)
    return out
