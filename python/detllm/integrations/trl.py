"""TRL's GRPOTrainer with detllm as the rollout engine, colocated: a ``rollout_func``.

TRL's experimental hook (``GRPOTrainer(rollout_func=...)``) calls ``rollout_func(prompts,
trainer)`` with the prompts of this process (each prompt already repeated
``num_generations`` times by TRL's sampler) and expects a dict with, per completion,
``prompt_ids``, ``completion_ids`` and ``logprobs`` (the sampled token's logprob at each
completion position: the trainer's "sampling" logprobs). ``DetllmRolloutFunc`` is that
function over one ``detllm.LLM`` in the trainer's process:

- **Weights.** When the trainer's ``state.global_step`` differs from the last synchronised
  one (and on the first call), the trainer's parameters are written into the engine with
  ``llm.update_weights`` (Hugging Face names, through DLPack: no copy through Python),
  with the version ``trl-step-N``. So the rollout of step N runs the weights the trainer
  holds at step N, and its outputs carry that version in their fingerprint.
- **Seeds.** Completion *i* of the *c*-th call at step *s* on process *p* is drawn with a
  seed derived from (``seed``, *s*, *c*, *p*, *i*), so the group's copies of a prompt get different samples and a
  re-run of the same step replays them bit for bit.
- **Logprobs.** The engine reports the model's raw logprobs (before temperature and filters,
  as vLLM's default). TRL's trainer computes its logprobs from ``logits / temperature``, so
  the two agree only at ``temperature=1``; another temperature is refused, by name, rather
  than handed to TRL as a mismatch it cannot see.
- **Prompts.** Text is encoded with the model's tokenizer; a conversation (a list of message
  dicts) is rendered with the model's own chat template (``chat_template_kwargs`` of the
  trainer's args apply), as ``LLM.chat`` does.

Nothing here imports torch or TRL: the trainer is read through the attributes TRL gives it
(``args``, ``state``, ``model``, ``accelerator``), and tensors reach the engine by DLPack.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..sampling_params import SamplingParams

# GRPOConfig fields the rollout takes from the trainer's args, and the SamplingParams field
# each one sets. None in the args means "not set" (TRL's top_k and min_p default to None).
_ARGS_TO_SAMPLING = {
    "max_completion_length": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
}


def derived_seed(*parts: Any) -> int:
    """A 63-bit seed from its parts (blake2b of their text): stable across processes and
    Python versions, unlike hash()."""
    h = hashlib.blake2b(":".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def check_raw_logprobs_temperature(temperature: float, where: str) -> None:
    """Refuses a temperature at which the engine's logprobs (raw) are not the trainer's."""
    if float(temperature) != 1.0:
        raise ValueError(
            f"{where}: temperature={temperature} with logprobs: detllm reports the model's raw "
            "logprobs (before temperature), while TRL's trainer computes logprobs of "
            "logits / temperature (and TRL's vllm-serve reports processed ones), so the "
            "rollout's and the trainer's logprobs would differ by the temperature. Use "
            "temperature=1.0 (top_p, top_k and min_p may still filter the draw)")


def unwrap_model(trainer: Any) -> Any:
    model = getattr(trainer, "model", None)
    acc = getattr(trainer, "accelerator", None)
    if model is not None and acc is not None and hasattr(acc, "unwrap_model"):
        model = acc.unwrap_model(model)
    return model


def model_named_tensors(model: Any) -> List[tuple]:
    """(HF name, detached tensor) of every parameter of a torch module, as the engine names
    them (transformers' CausalLM names: ``model.layers.N...``, ``lm_head.weight``)."""
    return [(n, p.detach()) for n, p in model.named_parameters()]


class DetllmRolloutFunc:
    """``rollout_func`` for TRL's GRPOTrainer over a colocated ``detllm.LLM``.

    llm: the engine. seed: the base of every request's seed. sync_weights: write the trainer's
    parameters into the engine when its step changes (turn off only when something else keeps
    them equal). Keyword overrides (``max_tokens``, ``temperature``, ``top_p``, ``top_k``,
    ``min_p``, ``repetition_penalty``) take precedence over the trainer's args; any other
    SamplingParams field can be given in ``sampling_overrides`` (an unknown name is refused by
    SamplingParams). ``return_seeds``: add ``detllm_seed`` (one per completion) to the output,
    which TRL forwards to the reward functions; a replay needs it.
    """

    def __init__(self, llm: Any, *, seed: int = 0, sync_weights: bool = True,
                 return_seeds: bool = False, sampling_overrides: Optional[Mapping[str, Any]] = None,
                 **overrides: Any) -> None:
        unknown = set(overrides) - set(_ARGS_TO_SAMPLING.values())
        if unknown:
            raise ValueError(f"DetllmRolloutFunc: unknown argument(s) {sorted(unknown)} (the "
                             f"sampling overrides are {sorted(_ARGS_TO_SAMPLING.values())}; "
                             "other SamplingParams fields go in sampling_overrides=)")
        self.llm = llm
        self.seed = int(seed)
        self.sync_weights = sync_weights
        self.return_seeds = return_seeds
        self.overrides = {k: v for k, v in overrides.items() if v is not None}
        self.sampling_overrides = dict(sampling_overrides or {})
        self.synced_step: Optional[int] = None
        self.step_calls: Dict[int, int] = {}

    # ---- weights ----
    def sync(self, trainer: Any, step: int) -> None:
        model = unwrap_model(trainer)
        if model is None:
            raise ValueError("rollout_func: the trainer has no model to take the weights from "
                             "(pass sync_weights=False if the engine is kept in sync otherwise)")
        self.llm.update_weights(model_named_tensors(model), version=f"trl-step-{step}")
        self.synced_step = step

    # ---- sampling ----
    def sampling_fields(self, trainer: Any) -> Dict[str, Any]:
        args = getattr(trainer, "args", None)
        fields: Dict[str, Any] = {}
        for arg, field in _ARGS_TO_SAMPLING.items():
            v = getattr(args, arg, None)
            if v is not None:
                fields[field] = v
        gen_kwargs = getattr(args, "generation_kwargs", None) or {}
        fields.update(gen_kwargs)
        fields.update(self.overrides)
        fields.update(self.sampling_overrides)
        if fields.get("top_k") is not None and fields["top_k"] < 0:
            fields["top_k"] = 0  # vLLM's -1: no top-k, detllm's 0
        fields.pop("n", None)
        fields.pop("seed", None)
        check_raw_logprobs_temperature(fields.get("temperature", 1.0), "rollout_func")
        return fields

    def prompt_ids(self, prompt: Any, trainer: Any) -> List[int]:
        if isinstance(prompt, str):
            return self.llm.get_tokenizer().encode(prompt)
        if isinstance(prompt, Sequence) and prompt and isinstance(prompt[0], Mapping):
            kwargs = getattr(getattr(trainer, "args", None), "chat_template_kwargs", None) or {}
            return list(self.llm.get_tokenizer().apply_chat_template(
                list(prompt), tokenize=True, add_generation_prompt=True, **kwargs))
        if isinstance(prompt, Sequence) and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        raise ValueError(f"rollout_func: a prompt must be text, a conversation (a list of message "
                         f"dicts) or token ids, not {type(prompt).__name__}")

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> Dict[str, Any]:
        state = getattr(trainer, "state", None)
        step = int(getattr(state, "global_step", 0) or 0)
        if self.sync_weights and step != self.synced_step:
            self.sync(trainer, step)
        acc = getattr(trainer, "accelerator", None)
        rank = int(getattr(acc, "process_index", 0) or 0)
        fields = self.sampling_fields(trainer)
        ids = [self.prompt_ids(p, trainer) for p in prompts]
        # The call's index within its step tells apart two calls at one step (TRL's
        # steps_per_generation); a re-run of the step counts the same way, so it replays.
        call = self.step_calls.get(step, 0)
        self.step_calls[step] = call + 1
        seeds = [derived_seed(self.seed, step, call, rank, i) for i in range(len(ids))]
        params = [SamplingParams(n=1, seed=s, **fields) for s in seeds]
        outs = self.llm.generate([{"prompt_token_ids": t} for t in ids], params, use_tqdm=False)
        result: Dict[str, Any] = {
            "prompt_ids": [list(o.prompt_token_ids) for o in outs],
            "completion_ids": [list(o.outputs[0].token_ids) for o in outs],
            # float32 -> Python float is exact, and TRL's torch.tensor(list) -> float32 is too
            "logprobs": [o.outputs[0].token_logprobs.tolist() for o in outs],
        }
        if self.return_seeds:
            result["detllm_seed"] = [o.seed for o in outs]
        return result


def make_rollout_func(llm: Any, **kwargs: Any) -> DetllmRolloutFunc:
    """``GRPOTrainer(..., rollout_func=make_rollout_func(llm))``; kwargs: DetllmRolloutFunc's."""
    return DetllmRolloutFunc(llm, **kwargs)
