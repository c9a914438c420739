"""detllm.torch: trainer-side logprobs that equal the rollout's bit for bit.

``causal_lm_logprobs(llm, token_ids, params)`` is a torch.autograd.Function:
- forward: detllm's own forward (``llm.score``) on ``params`` — pushed into the engine first
  with ``llm.update_weights`` unless ``sync_weights=False`` says they already are — so its
  values are the engine's fp32 bits, the same as ``llm.generate`` reported for those tokens.
  Beside it, a plain torch forward of the same model (reference.py) runs at the same weights
  and keeps its activations for the backward; with ``overlap`` (the default) the engine's
  forward runs in a second thread (the GIL is released while the engine runs) while torch
  runs its own, so the engine's pass costs little more than waiting for the longer of the two;
- backward: the gradient of that torch forward, from its saved activations. The gradient is
  torch's (not bitwise the engine's); the forward value is the engine's.
Mixture-of-experts models (Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE) are covered the same way; with
``routed_experts`` (the rollout's, ``reference.rollout_routed_experts``) the torch forward
replays those experts instead of routing again (routing replay), so the gradient is that of the
experts the rollout used, while the forward value stays the engine's bits.
"""

from __future__ import annotations

import threading
from typing import List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from . import reference

__all__ = ["causal_lm_logprobs", "reference", "rollout_routed_experts"]

rollout_routed_experts = reference.rollout_routed_experts


def _engine_logprobs(llm, seqs) -> np.ndarray:
    scored = llm.score([s.tolist() for s in seqs], use_tqdm=False)
    return np.concatenate([s.logprobs for s in scored]).astype(np.float32, copy=False)


class _CausalLMLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, llm, seqs, routed, names, overlap, *tensors):  # noqa: D401
        result, failure = {}, []

        def run_engine():
            try:
                result["lp"] = _engine_logprobs(llm, seqs)
            except BaseException as e:  # re-raised in the caller's thread
                failure.append(e)

        worker = None
        if overlap:
            worker = threading.Thread(target=run_engine, name="detllm-score")
            worker.start()
        try:
            # The torch forward whose graph the backward uses (the leaves are detached views
            # of the caller's parameters; their gradients are returned to them in backward).
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
                ref = reference.sequences_logprobs(llm.config, dict(zip(names, leaves)), seqs,
                                                   routed)
        finally:
            if worker is not None:
                worker.join()
        if worker is None:
            run_engine()
        if failure:
            raise failure[0]
        ctx.ref, ctx.leaves = ref, leaves
        device = tensors[0].device if tensors else torch.device("cpu")
        return torch.from_numpy(result["lp"]).to(device)

    @staticmethod
    def backward(ctx, grad_out):
        leaves = ctx.leaves
        wanted = [t for t in leaves if t.requires_grad]
        grads = iter(torch.autograd.grad(ctx.ref, wanted, grad_out, allow_unused=True))
        full = [next(grads) if t.requires_grad else None for t in leaves]
        ctx.ref = ctx.leaves = None
        return (None, None, None, None, None, *full)


def causal_lm_logprobs(
    llm,
    token_ids: Union[torch.Tensor, Sequence[Sequence[int]]],
    params: Mapping[str, torch.Tensor],
    *,
    sync_weights: bool = True,
    version: Optional[str] = None,
    overlap: bool = True,
    routed_experts: Optional[Sequence] = None,
) -> Union[torch.Tensor, List[torch.Tensor]]:
    """The logprob of every token given its prefix, with the engine's bits and torch gradients.

    token_ids: a (B, T) tensor, or a list of 1-D sequences (any lengths). Returns (B, T - 1)
    for a tensor, else a list of (len - 1,) tensors. params: every parameter by HF name (fp32
    tensors, e.g. a trainer's ``dict(model.named_parameters())`` for a Llama model); with
    sync_weights they are written into the engine first (version: the fingerprint's weight
    version, default "torch-sync"). overlap: run the engine's forward in a second thread while
    torch runs the forward the backward needs (False: one after the other).
    routed_experts: MoE models only; per sequence, (len - 1, layers, k) expert ids of tokens
    0 … len - 2 (the rollout's: ``rollout_routed_experts(request_output)``) that the torch
    forward replays instead of re-routing; None: it routes by itself (the engine's rule).
    """
    if isinstance(token_ids, torch.Tensor):
        if token_ids.dim() == 1:
            token_ids = token_ids[None]
        seqs = [row.detach().cpu().long() for row in token_ids]
        batched = True
    else:
        seqs = [torch.as_tensor(list(s), dtype=torch.long) for s in token_ids]
        batched = False
    if routed_experts is not None:
        if len(routed_experts) != len(seqs):
            raise ValueError(f"routed_experts has {len(routed_experts)} entries for {len(seqs)} "
                             "sequences: give one (len - 1, layers, k) array a sequence")
        routed_experts = [None if r is None else torch.as_tensor(r, dtype=torch.long)
                          for r in routed_experts]
    names = list(params.keys())
    tensors = [params[n] for n in names]
    for n, t in zip(names, tensors):
        if t.dtype != torch.float32:
            raise TypeError(f"{n}: {t.dtype}; causal_lm_logprobs needs fp32 parameters (the "
                            "engine computes in fp32 from exactly these values)")
    if sync_weights:
        with torch.no_grad():
            llm.update_weights({n: t.detach() for n, t in zip(names, tensors)},
                               version=version or "torch-sync")
    flat = _CausalLMLogprobs.apply(llm, seqs, routed_experts, names, overlap, *tensors)
    parts = list(torch.split(flat, [len(s) - 1 for s in seqs]))
    return torch.stack(parts) if batched else parts
