"""GRPO steps with TRL's rollout hook served by detllm: the rollout is
``detllm.integrations.trl.make_rollout_func(llm)``, called as TRL's GRPOTrainer calls
``rollout_func(prompts, trainer)``, and the trainer's logprobs come from
``detllm.torch.causal_lm_logprobs`` (the engine's forward, with torch gradients). Prints, at
every step, the importance ratio exp(trainer logprob - rollout logprob) over the generated
tokens: exactly 1.

  .venv/bin/python examples/trl_grpo.py [--steps 3] [--group 4] [--max-tokens 16] [--model PATH]
  .venv/bin/python examples/trl_grpo.py --trl      # TRL's own GRPOTrainer (pip install trl;
                                                   # scripts/rl_check.sh does it in a venv)

Without --trl the example needs torch only: a stand-in with the attributes rollout_func reads
(args, state.global_step, model.named_parameters()) plays the trainer, so the loop is TRL's
call sequence without TRL's install. With --trl, TRL's GRPOTrainer drives two steps on a
transformers model of the same weights (loaded from the GGUF file), the rollout_func syncing
its parameters into the engine at each step; the ratio is then measured against detllm.torch
at the trained weights.
"""

from __future__ import annotations

import argparse
import sys
import types

try:
    import torch
except ImportError:
    sys.exit("examples/trl_grpo.py needs torch: pip install torch")

import detllm
import detllm.torch as dt
from detllm.integrations.trl import make_rollout_func

PROMPTS = ["Write one sentence about the sea:", "Name a colour and a fruit:"]


def reward(text: str) -> float:
    """Toy reward: the share of letters that are vowels, plus a bonus for ending a sentence."""
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / max(len(letters), 1) + (0.5 if "." in text else 0.0)


def ratio_report(llm, params, out):
    """exp(trainer - rollout) over every generated token, trainer = detllm.torch."""
    seqs = [p + c for p, c in zip(out["prompt_ids"], out["completion_ids"])]
    lps = dt.causal_lm_logprobs(llm, seqs, params, sync_weights=False)
    gen = [lp[len(lp) - len(c):] for lp, c in zip(lps, out["completion_ids"])]
    r = torch.cat([torch.exp(g.detach().cpu() - torch.tensor(l, dtype=torch.float32))
                   for g, l in zip(gen, out["logprobs"])])
    return gen, float(r.min()), float(r.max())


def run_standin(a) -> int:
    llm = detllm.LLM(model=a.model)
    params = dt.reference.params_from_llm(llm)
    opt = torch.optim.SGD(list(params.values()), lr=a.lr)
    rollout = make_rollout_func(llm, seed=0)
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(max_completion_length=a.max_tokens, temperature=1.0, top_p=1.0,
                                   top_k=None, min_p=None, repetition_penalty=1.0,
                                   generation_kwargs=None, chat_template_kwargs=None),
        state=types.SimpleNamespace(global_step=0),
        model=types.SimpleNamespace(named_parameters=lambda: list(params.items())),
        accelerator=None)
    worst = 0.0
    for step in range(a.steps):
        trainer.state.global_step = step
        prompts = [p for p in PROMPTS for _ in range(a.group)]  # TRL's sampler repeats each prompt
        out = rollout(prompts, trainer)  # syncs the trainer's step-`step` weights first
        gen, lo, hi = ratio_report(llm, params, out)
        worst = max(worst, abs(lo - 1), abs(hi - 1))
        tok = llm.get_tokenizer()
        rw = torch.tensor([reward(tok.decode(c)) for c in out["completion_ids"]]).view(-1, a.group)
        adv = ((rw - rw.mean(1, keepdim=True)) / (rw.std(1, keepdim=True) + 1e-6)).view(-1)
        loss = -sum(A * g.sum() for A, g in zip(adv, gen)) / len(gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: reward {rw.mean():.4f}  importance ratio rollout->trainer: min {lo:.9f} "
              f"max {hi:.9f}  (weights {llm.weight_version})", flush=True)
    print(f"max |ratio - 1| over {a.steps} steps: {worst:.3e}")
    return 0


def run_trl(a) -> int:
    import os

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    llm = detllm.LLM(model=a.model)
    path = a.model or detllm.llm.default_model_path()
    folder, name = os.path.split(os.path.abspath(path))
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    rollout = make_rollout_func(llm, seed=0)
    calls = []

    def rollout_func(prompts, trainer):
        out = rollout(prompts, trainer)
        calls.append(out)
        return out

    def reward_func(completions, **kw):
        return [reward(c) for c in completions]

    args = GRPOConfig(output_dir=a.out, per_device_train_batch_size=a.group * len(PROMPTS),
                      num_generations=a.group, max_completion_length=a.max_tokens, max_steps=a.steps,
                      learning_rate=a.lr, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                      temperature=1.0, bf16=False)
    ds = Dataset.from_dict({"prompt": PROMPTS * 8})
    trainer = GRPOTrainer(model=model, reward_funcs=reward_func, args=args, train_dataset=ds,
                          processing_class=tok, rollout_func=rollout_func)
    trainer.train()
    print(f"TRL GRPOTrainer ran {trainer.state.global_step} steps with detllm's rollout_func "
          f"({len(calls)} rollouts; engine weights {llm.weight_version})")
    # The last rollout against detllm.torch at the weights it ran on (the engine holds them).
    params = dt.reference.params_from_llm(llm)
    _, lo, hi = ratio_report(llm, params, calls[-1])
    print(f"last rollout: importance ratio rollout->detllm.torch trainer: min {lo:.9f} max {hi:.9f}")
    seqs = [p + c for p, c in zip(calls[-1]["prompt_ids"], calls[-1]["completion_ids"])]
    with torch.no_grad():
        model.load_state_dict(dict(params), strict=False)  # the weights of that rollout
        d = 0.0
        for s, l, c in zip(seqs, calls[-1]["logprobs"], calls[-1]["completion_ids"]):
            logits = model(torch.tensor([s])).logits[0, :-1].float()
            lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s[1:])[:, None])[:, 0]
            d = max(d, float((lp[-len(c):] - torch.tensor(l)).abs().max()))
    print(f"last rollout vs TRL's own transformers forward (the mismatch detllm.torch removes): "
          f"max |Δ logprob| {d:.3e}")
    return 0 if abs(lo - 1) == 0 and abs(hi - 1) == 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trl", action="store_true", help="run TRL's GRPOTrainer (needs trl)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default="/tmp/detllm-trl-grpo")
    a = ap.parse_args()
    return run_trl(a) if a.trl else run_standin(a)


if __name__ == "__main__":
    sys.exit(main())
