"""Trainer-side logprobs of mixture-of-experts models (detllm.torch, docs/python.md "Mixture of
experts"), on the tiny transformers-written MoE checkpoints of tests/data/loaders/hf_v5
(scripts/ref/hf_checkpoints.py: Qwen3-MoE with and without exact router ties, Qwen2-MoE with
its shared expert, Mixtral, OLMoE; each with transformers' fp32 logits and routed experts):

- the torch reference (reference.py) gives transformers' logits within REF_LOGIT_ATOL and
  exactly its routed experts (ties to the lower index), on the engine's fp32 weights;
- the autograd forward is the engine's bits: equal to llm.score and to the rollout's
  logprobs (V13), with and without routing replay;
- gradients reach the router, the experts (and the shared expert) and match transformers'
  autograd at the same parameters within GRAD_RTOL;
- routing replay: the rollout's routed experts are the ones the reference runs, also after the
  weights moved so far that re-routing would choose others; a different routing gives other
  gradients (the replay is used), not other forward values (those stay the engine's).

Needs torch (skips, saying so, without it: CI); the transformers comparison needs transformers.
"""

import contextlib
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (CI): MoE trainer parity not run")

import detllm  # noqa: E402
import detllm.torch as dt  # noqa: E402
from conftest import bits, byte_tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "data", "loaders", "hf_v5")
CASES = ["qwen3_moe", "qwen3_moe_ties", "qwen2_moe", "mixtral", "olmoe"]
REF_LOGIT_ATOL = 1e-4   # fp32 torch vs transformers fp32 on the same weights (seen: 5e-7)
HF_LOGPROB_ATOL = 1e-4  # the engine's logprobs (fp32 CPU) vs transformers'
GRAD_RTOL = 1e-3        # max |Δ| / max |g|, per tensor, vs transformers' autograd


def golden(case):
    with open(os.path.join(FIXTURES, case, "golden.json")) as f:
        g = json.load(f)
    logits = np.fromfile(os.path.join(FIXTURES, case, "logits.f32"), dtype="<f4")
    return g, logits.reshape(-1, g["vocab_size"])


@pytest.fixture(scope="module", params=CASES)
def moe(request, tmp_path_factory):
    case = request.param
    d = tmp_path_factory.mktemp(case)
    for f in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(FIXTURES, case, f), d / f)
    (d / "tokenizer.json").write_text(json.dumps(byte_tokenizer()))
    llm = detllm.LLM(model=str(d), backend="cpu", mode="invariant")
    assert llm.config["n_experts"] > 0 and llm.config["arch"] in dt.reference.MOE_ARCHS
    return case, llm, dt.reference.params_from_llm(llm)


def sequences(case, n=2, length=24):
    g, _ = golden(case)
    return [s["tokens"][:length] for s in g["sequences"][:n]]


def rollout(llm, prompts, seed):
    sp = detllm.SamplingParams(max_tokens=6, temperature=1.0, seed=seed, prompt_logprobs=0,
                               return_routed_experts=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    seqs = [o.prompt_token_ids + o.outputs[0].token_ids for o in outs]
    return outs, seqs, [dt.rollout_routed_experts(o) for o in outs]


def test_reference_is_transformers(moe):
    case, llm, params = moe
    g, logits = golden(case)
    off, worst = 0, 0.0
    for s in g["sequences"]:
        ids = torch.tensor(s["tokens"])
        with torch.no_grad():
            lg, routed = dt.reference.forward(llm.config, params, ids)
        ref = torch.from_numpy(logits[off:off + len(ids)])
        off += len(ids)
        worst = max(worst, (lg - ref).abs().max().item())
        assert routed.tolist() == s["routed_experts"], f"{case}: routing differs from transformers'"
    print(f"[measure] {case}: reference vs transformers logits max |d| {worst:.3g}; routed experts equal")
    assert worst <= REF_LOGIT_ATOL


def test_forward_is_the_engine_bits_with_and_without_replay(moe):
    case, llm, params = moe
    outs, seqs, routed = rollout(llm, sequences(case), seed=3)
    scored = llm.score(seqs, use_tqdm=False)
    for replay in (None, routed):
        lps = dt.causal_lm_logprobs(llm, seqs, params, sync_weights=False, routed_experts=replay)
        for lp, s, o in zip(lps, scored, outs):
            lp = lp.detach().numpy()
            gen = o.outputs[0].token_logprobs
            assert np.array_equal(bits(lp), bits(s.logprobs))
            assert np.array_equal(bits(lp[-len(gen):]), bits(gen))
    print(f"[measure] {case}: autograd forward = score = rollout, bit for bit, with and without replay")


@contextlib.contextmanager
def stable_topk():
    """transformers' routers call torch.topk, whose order of equal values is unspecified: the
    tie rule of the fixtures and of detllm (lower index first) for the comparison."""
    original = torch.topk

    def topk(x, k, dim=-1, largest=True, sorted=True):
        values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
        return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)

    torch.topk = topk
    try:
        yield
    finally:
        torch.topk = original


def hf_logprobs(case, llm, params, seqs):
    """transformers' logprobs at our parameters: its fused expert tensors are built from our
    per-expert ones (torch.stack / cat, so its gradients flow back to them)."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.AutoConfig.from_pretrained(os.path.join(FIXTURES, case))
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    arch = llm.config["arch"]
    hf = {}
    for name, _ in model.named_parameters():
        if ".mlp.experts." in name or name.endswith(".mlp.gate.weight"):
            i = int(name.split(".")[2])
            router, expert = dt.reference._moe_names(arch, f"model.layers.{i}.")
            n = llm.config["n_experts"]
            if name.endswith("gate_up_proj"):
                hf[name] = torch.stack([torch.cat([params[expert(e)[0]], params[expert(e)[1]]])
                                        for e in range(n)])
            elif name.endswith("down_proj"):
                hf[name] = torch.stack([params[expert(e)[2]] for e in range(n)])
            else:
                hf[name] = params[router]
        else:
            hf[name] = params[name]
    out = []
    with stable_topk():
        for s in seqs:
            ids = torch.tensor([s])
            logits = torch.func.functional_call(model, hf, (ids,)).logits[0, :-1].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1))
    return torch.cat(out)


def checked_names(llm, routed):
    """The router, two routed experts' gate/up/down of layer 0 (a much used and a rarely used
    one), the shared expert where there is one, a q norm and the embeddings."""
    arch = llm.config["arch"]
    router, expert = dt.reference._moe_names(arch, "model.layers.0.")
    used = np.bincount(np.concatenate([r[:, 0].ravel() for r in routed]),
                       minlength=llm.config["n_experts"])
    order = [int(e) for e in np.argsort(-used, kind="stable") if used[e] > 0]
    names = [router, *expert(order[0]), *expert(order[-1]),
             "model.layers.1.input_layernorm.weight", "model.embed_tokens.weight"]
    if arch == "qwen2_moe":
        names += ["model.layers.0.mlp.shared_expert.up_proj.weight",
                  "model.layers.0.mlp.shared_expert_gate.weight"]
    if arch in ("qwen3_moe", "olmoe"):
        names.append("model.layers.1.self_attn.q_norm.weight")
    return names


def test_gradients_reach_the_experts_and_match_transformers(moe):
    case, llm, params = moe
    outs, seqs, routed = rollout(llm, sequences(case), seed=5)
    names = checked_names(llm, routed)
    ref = hf_logprobs(case, llm, params, seqs)
    lps = torch.cat(dt.causal_lm_logprobs(llm, seqs, params, sync_weights=False))
    delta = (lps.detach() - ref.detach()).abs().max().item()
    print(f"[measure] {case}: engine logprobs vs transformers fp32: max |d| {delta:.3g}")
    assert delta <= HF_LOGPROB_ATOL
    g_ours = torch.autograd.grad(lps.sum(), [params[n] for n in names], allow_unused=True)
    g_hf = torch.autograd.grad(ref.sum(), [params[n] for n in names], allow_unused=True)
    worst = 0.0
    for n, a, b in zip(names, g_ours, g_hf):
        a = torch.zeros_like(params[n]) if a is None else a
        b = torch.zeros_like(params[n]) if b is None else b
        assert b.abs().max() > 0, f"{n}: transformers gives no gradient (not routed?)"
        err = (a - b).abs().max().item() / b.abs().max().item()
        worst = max(worst, err)
        assert err <= GRAD_RTOL, f"{case} {n}: relative gradient error {err} vs transformers"
    print(f"[measure] {case}: gradients vs transformers, {len(names)} tensors (router, experts): "
          f"max rel. error {worst:.3g}")


def test_routing_replay_runs_the_rollouts_experts(moe):
    case, llm, params = moe
    outs, seqs, routed = rollout(llm, sequences(case, n=1), seed=9)
    seq, rollout_routing = torch.tensor(seqs[0]), torch.as_tensor(routed[0], dtype=torch.long)
    # The engine's routing of the rollout is the reference's at the same weights.
    assert torch.equal(dt.reference.routed_experts(llm.config, params, seq), rollout_routing)
    # Move the routers far (a trainer's later step): re-routing now picks other experts, the
    # replay keeps the rollout's.
    moved = dict(params)
    g = torch.Generator().manual_seed(0)
    for n in params:
        if n.endswith("mlp.gate.weight") or n.endswith("block_sparse_moe.gate.weight"):
            moved[n] = params[n] + 3.0 * torch.randn(params[n].shape, generator=g)
    with torch.no_grad():
        _, rerouted = dt.reference.forward(llm.config, moved, seq[:-1])
        _, replayed = dt.reference.forward(llm.config, moved, seq[:-1], rollout_routing)
    assert torch.equal(replayed, rollout_routing)
    assert not torch.equal(rerouted, rollout_routing)
    # The replay is what the backward uses: another routing gives other router gradients, and
    # the forward values stay the engine's bits either way.
    router = dt.reference._moe_names(llm.config["arch"], "model.layers.0.")[0]
    other = torch.roll(rollout_routing, 1, dims=-1)  # the same experts, ranks rotated
    other[:, :, 0] = (other[:, :, 0] + 1) % llm.config["n_experts"]
    grads = []
    for replay in (rollout_routing, other):
        lp = dt.causal_lm_logprobs(llm, [seqs[0]], params, sync_weights=False,
                                   routed_experts=[replay])[0]
        assert np.array_equal(bits(lp.detach().numpy()), bits(llm.score([seqs[0]], use_tqdm=False)[0].logprobs))
        grads.append(torch.autograd.grad(lp.sum(), params[router])[0])
    assert not torch.equal(grads[0], grads[1])
    # Replaying the rollout's routing at the rollout's weights is the re-routed reference.
    no_replay = dt.causal_lm_logprobs(llm, [seqs[0]], params, sync_weights=False)[0]
    g_plain = torch.autograd.grad(no_replay.sum(), params[router])[0]
    assert torch.equal(g_plain, grads[0])
    print(f"[measure] {case}: replay runs the rollout's experts ({(rerouted != rollout_routing).sum().item()} "
          f"of {rollout_routing.numel()} choices differ when re-routed at moved weights)")


def test_bad_routed_experts_are_refused(moe):
    case, llm, params = moe
    seq = sequences(case, n=1)[0]
    L, k = llm.config["n_layers"], llm.config["n_experts_used"]
    with pytest.raises(ValueError, match="needs"):
        dt.causal_lm_logprobs(llm, [seq], params, sync_weights=False,
                              routed_experts=[np.zeros((len(seq), L, k), np.int32)])
    with pytest.raises(ValueError, match="outside"):
        dt.causal_lm_logprobs(llm, [seq], params, sync_weights=False,
                              routed_experts=[np.full((len(seq) - 1, L, k), 999, np.int32)])
    with pytest.raises(ValueError, match="one .* array a sequence"):
        dt.causal_lm_logprobs(llm, [seq, seq], params, sync_weights=False, routed_experts=[None])


def test_update_weights_writes_the_experts(moe):
    # A trainer step on a MoE model: every parameter (router, experts, shared expert) goes into
    # the engine by its HF name; the engine's logprobs then are those of the new weights
    # (transformers at the same values agrees), and the autograd forward is still score's bits.
    case, llm, params = moe
    names = list(params)
    assert llm.parameter_names() == names
    seqs = sequences(case)
    before = llm.score(seqs, use_tqdm=False)
    g = torch.Generator().manual_seed(1)
    moved = {n: (p.detach() + 0.02 * torch.randn(p.shape, generator=g)).requires_grad_(True)
             for n, p in params.items()}
    try:
        lps = dt.causal_lm_logprobs(llm, seqs, moved, version="moved")
        scored = llm.score(seqs, use_tqdm=False)
        for lp, s, b in zip(lps, scored, before):
            assert np.array_equal(bits(lp.detach().numpy()), bits(s.logprobs))
            assert not np.array_equal(bits(s.logprobs), bits(b.logprobs))
        for n in names:  # read back: every tensor took its new values
            assert np.array_equal(llm.get_parameter(n), moved[n].detach().numpy()), n
        ref = hf_logprobs(case, llm, moved, seqs)
        delta = (torch.cat(lps).detach() - ref.detach()).abs().max().item()
        assert delta <= HF_LOGPROB_ATOL, f"{case}: engine after the update vs transformers {delta}"
    finally:
        with torch.no_grad():
            llm.update_weights({n: p.detach() for n, p in params.items()}, version="restored")
    for s, b in zip(llm.score(seqs, use_tqdm=False), before):
        assert np.array_equal(bits(s.logprobs), bits(b.logprobs))
