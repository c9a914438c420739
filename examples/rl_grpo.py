"""A few GRPO steps (REINFORCE with group-normalised advantages) on the default model with a toy
reward, printing the rollout-vs-trainer max |Δ logprob| at every step.

  trainer=detllm (default): trainer logprobs from detllm.torch.causal_lm_logprobs — the
    engine's own forward, so Δ is exactly 0 at every step; gradients from torch.
  trainer=torch: the same loop with a plain torch forward (detllm/torch/reference.py, fp32;
    or transformers' LlamaForCausalLM with --trainer transformers) for the trainer logprobs —
    the training–inference mismatch the first mode removes.

  .venv/bin/python examples/rl_grpo.py [--trainer detllm|torch|transformers] [--steps 4]
      [--backend cpu|cuda] [--model PATH] [--group 4] [--max-tokens 16] [--lr 1e-5]

Needs torch (pip install torch); the engine weights are updated in place every step from the
trainer's tensors (llm.update_weights), with the step as the fingerprint's weight version.
"""

from __future__ import annotations

import argparse
import sys
import time

try:
    import torch
except ImportError:
    sys.exit("examples/rl_grpo.py needs torch: pip install torch (the rest of detllm does not)")

import detllm
import detllm.torch as dt

PROMPTS = [
    "Write one sentence about the sea:",
    "Name a colour and a fruit:",
]


def reward(text: str) -> float:
    """Toy reward: the share of letters that are vowels, plus a bonus for ending a sentence."""
    letters = [c for c in text.lower() if c.isalpha()]
    vowels = sum(c in "aeiou" for c in letters)
    return vowels / max(len(letters), 1) + (0.5 if "." in text else 0.0)


def transformers_logprobs(llm, params, seqs):
    """Trainer logprobs from transformers' LlamaForCausalLM at the same fp32 weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = llm.config
    cfg = LlamaConfig(vocab_size=c["vocab_size"], hidden_size=c["dim"], intermediate_size=c["ffn_dim"],
                      num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"],
                      num_key_value_heads=c["n_kv_heads"], head_dim=c["head_dim"],
                      rms_norm_eps=c["rms_eps"], rope_theta=c["rope_theta"],
                      max_position_embeddings=c["max_position"], tie_word_embeddings=c["tied_embeddings"])
    model = LlamaForCausalLM(cfg).to(next(iter(params.values())).device)
    out = []
    for s in seqs:
        ids = torch.tensor([s], device=model.device)
        logits = torch.func.functional_call(model, dict(params), (ids,)).logits[0, :-1].float()
        out.append(torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", choices=["detllm", "torch", "transformers"], default="detllm")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--group", type=int, default=4, help="samples per prompt (GRPO group)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--model", default=None, help="default: the default model ($DETLLM_DEFAULT_MODEL)")
    ap.add_argument("--kv-cache-tokens", type=int, default=0,
                    help="the engine's KV pool in tokens (0: its own sizing)")
    a = ap.parse_args()
    if a.trainer == "transformers":
        try:
            import transformers  # noqa: F401  (transformers_logprobs imports from it)
        except ImportError:
            sys.exit("examples/rl_grpo.py --trainer transformers needs the package transformers: "
                     "pip install transformers (or pick --trainer detllm|torch)")

    llm = detllm.LLM(model=a.model, backend=a.backend, kv_cache_tokens=a.kv_cache_tokens)
    device = "cuda" if a.backend == "cuda" else "cpu"
    params = dt.reference.params_from_llm(llm, device=device)
    opt = torch.optim.SGD(list(params.values()), lr=a.lr)
    print(f"model {llm.config['n_layers']} layers, trainer={a.trainer}, backend={a.backend}, "
          f"fingerprint {llm.fingerprint}")
    worst = 0.0
    for step in range(a.steps):
        t0 = time.perf_counter()
        sp = detllm.SamplingParams(n=a.group, max_tokens=a.max_tokens, temperature=1.0, seed=1000 + step)
        outs = llm.generate(PROMPTS, sp, use_tqdm=False)
        seqs, rollout, n_gen, rewards = [], [], [], []
        for r in outs:
            for c in r.outputs:
                seqs.append(r.prompt_token_ids + c.token_ids)
                rollout.append(torch.from_numpy(c.token_logprobs))
                n_gen.append(len(c.token_ids))
                rewards.append(reward(c.text))
        rw = torch.tensor(rewards).view(len(PROMPTS), a.group)
        adv = ((rw - rw.mean(1, keepdim=True)) / (rw.std(1, keepdim=True) + 1e-6)).view(-1)

        if a.trainer == "detllm":
            # the engine holds exactly these params (updated below), so no sync is needed
            lps = dt.causal_lm_logprobs(llm, seqs, params, sync_weights=False)
        elif a.trainer == "torch":
            lps = [dt.reference.token_logprobs(llm.config, params, torch.tensor(s)) for s in seqs]
        else:
            lps = transformers_logprobs(llm, params, seqs)
        gen_lps = [lp[len(lp) - n:] for lp, n in zip(lps, n_gen)]
        delta = max((g.detach().cpu() - r).abs().max().item() for g, r in zip(gen_lps, rollout))
        worst = max(worst, delta)

        loss = -sum(A * g.sum() for A, g in zip(adv.to(device), gen_lps)) / len(seqs)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            llm.update_weights({n: p.detach() for n, p in params.items()}, version=f"step-{step + 1}")
        print(f"step {step}: reward {rw.mean().item():.4f}  rollout-vs-trainer max |Δ logprob| = "
              f"{delta:.3e}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"max |Δ logprob| over {a.steps} steps: {worst:.3e} (trainer={a.trainer})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
