"""GRPO steps with detllm as verl's rollout: ``detllm.integrations.verl.DetllmRollout``, driven
in verl's order for a hybrid engine (``release`` while the trainer steps, ``resume(["weights"])``,
``update_weights`` with the trainer's tensors, ``resume(["kv_cache"])``, then one async
``generate(prompt_ids, sampling_params, request_id)`` per sample, all in flight together as
verl's agent loop sends them). The trainer's logprobs come from
``detllm.torch.causal_lm_logprobs``. Prints the importance ratio exp(trainer - rollout) over
the generated tokens at every step: exactly 1.

  .venv/bin/python examples/verl_grpo.py [--steps 3] [--group 4] [--max-tokens 16] [--model PATH]
  .venv/bin/python examples/verl_grpo.py --verl   # verl's own GRPO advantage and TokenOutput
                                                  # (pip install verl; scripts/rl_check.sh)
"""

from __future__ import annotations

import argparse
import asyncio
import sys

try:
    import torch
except ImportError:
    sys.exit("examples/verl_grpo.py needs torch: pip install torch")

import detllm
import detllm.torch as dt
from detllm.integrations.verl import DetllmRollout

PROMPTS = ["Write one sentence about the sea:", "Name a colour and a fruit:"]


def reward(text: str) -> float:
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / max(len(letters), 1) + (0.5 if "." in text else 0.0)


def grpo_advantage(rewards: torch.Tensor, group: int, use_verl: bool) -> torch.Tensor:
    if not use_verl:
        rw = rewards.view(-1, group)
        return ((rw - rw.mean(1, keepdim=True)) / (rw.std(1, keepdim=True) + 1e-6)).view(-1)
    import numpy as np
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    n = rewards.numel()
    scores = torch.zeros(n, 1)
    scores[:, 0] = rewards
    index = np.array([i // group for i in range(n)], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(scores, torch.ones(n, 1), index)
    return adv[:, 0]


async def rollout_step(rollout, prompt_ids, group, max_tokens, step):
    calls = [rollout.generate(p, {"max_tokens": max_tokens, "temperature": 1.0, "top_p": 1.0,
                                  "top_k": -1, "logprobs": True}, request_id=f"step{step}-{i}-{k}")
             for i, p in enumerate(prompt_ids) for k in range(group)]
    return await asyncio.gather(*calls)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verl", action="store_true", help="verl's GRPO advantage and TokenOutput (needs verl)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--model", default=None)
    a = ap.parse_args()

    llm = detllm.LLM(model=a.model)
    params = dt.reference.params_from_llm(llm)
    opt = torch.optim.SGD(list(params.values()), lr=a.lr)
    rollout = DetllmRollout(llm, {"response_length": a.max_tokens}, seed=0)
    tok = llm.get_tokenizer()
    prompt_ids = [tok.encode(p) for p in PROMPTS]
    worst = 0.0
    try:
        for step in range(a.steps):
            # verl's hybrid-engine order around a weight sync
            asyncio.run(rollout.release())
            asyncio.run(rollout.resume(["weights"]))
            asyncio.run(rollout.update_weights(((n, p.detach()) for n, p in params.items()),
                                               global_steps=step))
            asyncio.run(rollout.resume(["kv_cache"]))
            outs = asyncio.run(rollout_step(rollout, prompt_ids, a.group, a.max_tokens, step))
            if a.verl:
                outs = [o.as_verl() for o in outs]  # verl's own pydantic TokenOutput
            seqs = [prompt_ids[j // a.group] + list(o.token_ids) for j, o in enumerate(outs)]
            lps = dt.causal_lm_logprobs(llm, seqs, params, sync_weights=False)
            gen = [lp[len(lp) - len(o.token_ids):] for lp, o in zip(lps, outs)]
            ratio = torch.cat([torch.exp(g.detach() - torch.tensor(o.log_probs, dtype=torch.float32))
                               for g, o in zip(gen, outs)])
            lo, hi = float(ratio.min()), float(ratio.max())
            worst = max(worst, abs(lo - 1), abs(hi - 1))
            rw = torch.tensor([reward(tok.decode(list(o.token_ids))) for o in outs])
            adv = grpo_advantage(rw, a.group, a.verl)
            loss = -sum(A * g.sum() for A, g in zip(adv, gen)) / len(gen)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step}: reward {rw.mean():.4f}  importance ratio rollout->trainer: min {lo:.9f} "
                  f"max {hi:.9f}  (stop reasons {sorted({o.stop_reason for o in outs})}, weights "
                  f"{llm.weight_version})", flush=True)
    finally:
        rollout.close()
    print(f"max |ratio - 1| over {a.steps} steps: {worst:.3e}")
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
