"""Adapters from RL post-training frameworks to detllm (docs/python.md, "RL frameworks").

- ``detllm.integrations.trl``: a ``rollout_func`` for TRL's ``GRPOTrainer`` backed by a
  colocated ``detllm.LLM`` (weights synchronised from the trainer's model at each step).
- ``detllm.integrations.verl``: a rollout with verl's interface (``generate`` with token ids,
  logprobs, routed experts and a stop reason; ``update_weights``; ``resume``; ``release``).

None of them imports torch, TRL or verl: they speak the frameworks' protocols (names, JSON,
call signatures), so their tests run where neither framework is installed, and
``scripts/rl_check.sh`` runs them against the frameworks themselves. TRL's server mode
(``vllm_mode="server"``) needs no adapter: its ``VLLMClient`` talks to ``detllm serve``.
"""
