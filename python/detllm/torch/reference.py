"""A plain torch forward of the models detllm runs (fp32, Hugging Face parameter names), used for
the backward of causal_lm_logprobs and as the "plain torch" trainer of the example.

Dense: transformers' LlamaForCausalLM (RMSNorm, half-split RoPE, GQA, SwiGLU), with Qwen2's qkv
bias and Qwen3's per-head q/k norms when the parameters are there. Mixture of experts
(Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE; docs/models.md "Mixture of experts"), the engine's rules:
- router logits x · routerᵀ in fp32; the k highest logits, highest first, equal logits to the
  lower expert index (a stable descending sort, not torch.topk, whose tie order is unspecified);
- weights: the chosen experts' softmax probabilities over all experts, renormalised over the k
  when `norm_topk_prob` (Mixtral always; the others as their config says);
- combine in rank order (rank 0 first), then Qwen2-MoE's shared expert times
  sigmoid(shared_expert_gate · x); OLMoE's q/k norms span the whole projection.
`routed` replays given experts (the rollout's, from RequestOutput.routed_experts) instead of
re-routing: the same experts are run and weighted by the router's probabilities at them, so the
gradient reaches the router through exactly the rollout's choice.

Rope scaling and GGUF rope_freqs are not modelled: a model using them is refused by name."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import torch

MOE_ARCHS = ("qwen3_moe", "qwen2_moe", "mixtral", "olmoe")


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (heads, T, head_dim); HF's rotate_half
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def _check_config(c: Mapping) -> None:
    scaling = c.get("rope_scaling", "none")
    if scaling != "none":
        raise ValueError(f"the torch reference does not model rope scaling ({scaling!r}): its "
                         "gradients would be of another model; use a checkpoint without it")
    if c.get("n_experts", 0) and c.get("arch") not in MOE_ARCHS:
        raise ValueError(f"the torch reference has no mixture-of-experts forward for "
                         f"architecture {c.get('arch')!r} (it has {', '.join(MOE_ARCHS)}); "
                         "llm.config of a build with 'arch' gives it")


def route(logits: torch.Tensor, k: int, renormalize: bool,
          experts: Optional[torch.Tensor] = None):
    """(experts (T, k) int64, weights (T, k) fp32) for router logits (T, E).

    experts=None: the k highest logits, highest first, ties to the lower index. Given experts
    (replay): those, weighted by the router's probabilities at them."""
    if experts is None:
        experts = torch.sort(logits.detach(), dim=-1, descending=True, stable=True)[1][:, :k]
    probs = torch.softmax(logits.float(), dim=-1)
    w = probs.gather(-1, experts)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return experts, w


def _swiglu(h: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    lin = torch.nn.functional.linear
    return lin(torch.nn.functional.silu(lin(h, gate)) * lin(h, up), down)


def _moe_names(arch: str, p: str):
    """The router's and expert e's gate/up/down names of layer prefix p (HF's per-expert names,
    as safetensors files and llm.parameter_names() spell them)."""
    if arch == "mixtral":
        b = p + "block_sparse_moe."
        return b + "gate.weight", lambda e: tuple(f"{b}experts.{e}.{w}.weight" for w in ("w1", "w3", "w2"))
    b = p + "mlp."
    return b + "gate.weight", lambda e: tuple(f"{b}experts.{e}.{w}_proj.weight"
                                              for w in ("gate", "up", "down"))


def _moe_mlp(c: Mapping, params: Mapping[str, torch.Tensor], p: str, h: torch.Tensor,
             experts: Optional[torch.Tensor]):
    arch, k, n = c["arch"], int(c["n_experts_used"]), int(c["n_experts"])
    router, expert = _moe_names(arch, p)
    logits = torch.nn.functional.linear(h, params[router])
    renorm = arch == "mixtral" or bool(c.get("norm_topk_prob", False))
    idx, w = route(logits, k, renorm, experts)
    T = h.shape[0]
    out_rank = h.new_zeros((T, k, h.shape[1]))
    for e in range(n):
        rows, ranks = (idx == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        y = _swiglu(h[rows], *(params[name] for name in expert(e)))
        out_rank = out_rank.index_put((rows, ranks), y)
    out = w[:, 0:1] * out_rank[:, 0]
    for r in range(1, k):  # rank order, as the engine's combine
        out = out + w[:, r:r + 1] * out_rank[:, r]
    shared = p + "mlp.shared_expert."
    if shared + "gate_proj.weight" in params:
        s = _swiglu(h, params[shared + "gate_proj.weight"], params[shared + "up_proj.weight"],
                    params[shared + "down_proj.weight"])
        g = torch.sigmoid(torch.nn.functional.linear(h, params[p + "mlp.shared_expert_gate.weight"]))
        out = out + g * s
    return out, idx


def forward(config: Mapping, params: Mapping[str, torch.Tensor], ids: torch.Tensor,
            routed: Optional[torch.Tensor] = None):
    """(logits (T, vocab), routed experts (T, layers, k) or None) of one sequence ids (T,).

    routed: (T, layers, k) experts to replay (MoE only); None: the reference routes."""
    c = config
    _check_config(c)
    dim, nh, nkv, hd = c["dim"], c["n_heads"], c["n_kv_heads"], c["head_dim"]
    eps = float(c["rms_eps"])
    moe = int(c.get("n_experts", 0)) > 0
    T = ids.shape[0]
    emb = params["model.embed_tokens.weight"]
    dev = emb.device
    ids = ids.to(dev)
    if routed is not None:
        if not moe:
            raise ValueError("routed experts were given for a dense model (it has no experts)")
        routed = torch.as_tensor(routed, dtype=torch.long, device=dev)
        want = (T, c["n_layers"], c["n_experts_used"])
        if tuple(routed.shape) != want:
            raise ValueError(f"routed experts of shape {tuple(routed.shape)}; this sequence "
                             f"needs {want} (tokens, layers, k)")
        if routed.min() < 0 or routed.max() >= c["n_experts"]:
            raise ValueError(f"routed experts outside 0…{c['n_experts'] - 1}")
    x = emb[ids]  # (T, dim)
    pos = torch.arange(T, device=dev, dtype=torch.float32)
    inv = 1.0 / (float(c["rope_theta"]) ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
    ang = torch.outer(pos, inv)
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos(), ang.sin()
    mask = torch.full((T, T), float("-inf"), device=dev).triu(1)
    chosen: List[torch.Tensor] = []
    for i in range(c["n_layers"]):
        p = f"model.layers.{i}."

        def lin(name: str, h: torch.Tensor) -> torch.Tensor:
            w = params[p + name + ".weight"]
            b = params.get(p + name + ".bias")
            return torch.nn.functional.linear(h, w, b)

        h = _rms_norm(x, params[p + "input_layernorm.weight"], eps)
        q, k, v = lin("self_attn.q_proj", h), lin("self_attn.k_proj", h), lin("self_attn.v_proj", h)
        qn = params.get(p + "self_attn.q_norm.weight")
        full = qn is not None and qn.shape[0] == nh * hd and nh * hd != hd
        if full:  # OLMoE: one RMS over the whole q (k) projection of a token
            q = _rms_norm(q, qn, eps)
            k = _rms_norm(k, params[p + "self_attn.k_norm.weight"], eps)
        q = q.view(T, nh, hd).transpose(0, 1)
        k = k.view(T, nkv, hd).transpose(0, 1)
        v = v.view(T, nkv, hd).transpose(0, 1)
        if qn is not None and not full:  # Qwen3: per head
            q = _rms_norm(q, qn, eps)
            k = _rms_norm(k, params[p + "self_attn.k_norm.weight"], eps)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        att = (q @ k.transpose(-1, -2)) / (hd**0.5) + mask
        o = (att.softmax(-1) @ v).transpose(0, 1).reshape(T, nh * hd)
        x = x + lin("self_attn.o_proj", o)
        h = _rms_norm(x, params[p + "post_attention_layernorm.weight"], eps)
        if moe:
            y, idx = _moe_mlp(c, params, p, h, None if routed is None else routed[:, i])
            chosen.append(idx)
            x = x + y
        else:
            g = torch.nn.functional.silu(lin("mlp.gate_proj", h)) * lin("mlp.up_proj", h)
            x = x + lin("mlp.down_proj", g)
    x = _rms_norm(x, params["model.norm.weight"], eps)
    head = params.get("lm_head.weight", emb)
    return x @ head.t(), (torch.stack(chosen, dim=1) if moe else None)


def token_logprobs(config: Mapping, params: Mapping[str, torch.Tensor], ids: torch.Tensor,
                   routed: Optional[torch.Tensor] = None) -> torch.Tensor:
    """logprobs (T - 1,) of ids[1:] given their prefixes, for one sequence ids (T,).

    routed: (T - 1, layers, k), the experts of tokens 0 … T - 2 to replay (the rows whose
    logits give these logprobs: RequestOutput.prompt_routed_experts followed by
    CompletionOutput.routed_experts; rollout_routed_experts() joins them)."""
    ids = ids.to(params["model.embed_tokens.weight"].device)
    logits, _ = forward(config, params, ids[:-1], routed)  # the last token's logits are unused
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[1:, None]).squeeze(-1)


def routed_experts(config: Mapping, params: Mapping[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """The experts the reference routes tokens 0 … T - 2 of ids to: (T - 1, layers, k)."""
    with torch.no_grad():
        return forward(config, params, torch.as_tensor(ids)[:-1])[1]


def sequences_logprobs(
    config: Mapping, params: Mapping[str, torch.Tensor], seqs: Sequence[torch.Tensor],
    routed: Optional[Sequence[Optional[torch.Tensor]]] = None,
) -> torch.Tensor:
    """The logprobs of every sequence, concatenated: (sum(len - 1),)."""
    routed = routed if routed is not None else [None] * len(seqs)
    return torch.cat([token_logprobs(config, params, s, r) for s, r in zip(seqs, routed)])


def rollout_routed_experts(request_output, choice: int = 0):
    """The routing of every token a rollout's logprobs came from, (len - 1, layers, k) int32 for
    the sequence prompt + completion: prompt_routed_experts (generated with prompt_logprobs and
    return_routed_experts) followed by the completion's routed_experts."""
    import numpy as np

    c = request_output.outputs[choice]
    if c.routed_experts is None or request_output.prompt_routed_experts is None:
        raise ValueError("the rollout has no routed experts of its prompt and completion: "
                         "generate with SamplingParams(return_routed_experts=True, "
                         "prompt_logprobs=0)")
    return np.concatenate([request_output.prompt_routed_experts, c.routed_experts])


def params_from_llm(llm, device="cpu", requires_grad: bool = True) -> Dict[str, torch.Tensor]:
    """The engine's weights as fp32 torch parameters (a trainer's starting copy)."""
    out = {}
    for name, a in llm.named_parameters().items():
        t = torch.from_numpy(a).to(device)
        out[name] = t.requires_grad_(requires_grad)
    return out
