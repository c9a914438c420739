#!/usr/bin/env python3
"""Reference checkpoints and defaults from transformers >= 5, for the config-format tests.

Writes, under OUT (default tests/data/loaders):
  hf_config_defaults.json   every supported model_type's default config as transformers writes
                            it (to_json_string(use_diff=False)): tests/model/hf_checkpoint_test.cpp
                            checks our defaults table against it and parses each one whole;
  hf_v5/<case>/             tiny random checkpoints saved by save_pretrained (bf16 safetensors,
                            config.json in the transformers >= 5 format: rope_parameters, dtype),
                            with golden.json (token ids, greedy continuations; for MoE cases
                            each token's routed experts, (tokens, layers, k) from transformers'
                            router logits, ties to the lower index) and logits.f32
                            (fp32 logits of every position of every sequence, row-major), the
                            reference forward run in fp32 on the saved file.
Deterministic (fixed seeds). Needs torch and transformers >= 5 (the H200 machine has both):
    python3 scripts/ref/hf_checkpoints.py [OUT]
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

MODEL_TYPES = ["llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "qwen2_moe",
               "olmoe"]
N_GREEDY = 16
SEQ_LENS = [70, 33, 96]

# Small models whose RoPE settings matter: llama3 scaling with a short original context so every
# band of the llama3 rule is hit at head_dim 16; linear scaling with a qkv bias and tied
# embeddings; Qwen3 with a head_dim that is not hidden / heads and q/k norms.
CASES = {
    "llama31": dict(model_type="llama", vocab_size=256, hidden_size=64, intermediate_size=160,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 64}),
    "qwen2_linear": dict(model_type="qwen2", vocab_size=256, hidden_size=64,
                         intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                         tie_word_embeddings=True,
                         rope_parameters={"rope_type": "linear", "rope_theta": 1000000.0,
                                          "factor": 2.0}),
    "qwen3": dict(model_type="qwen3", vocab_size=256, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # Mixture of experts: 16 experts, 4 per token, the top-k probabilities renormalised.
    "qwen3_moe": dict(model_type="qwen3_moe", vocab_size=256, hidden_size=64,
                      intermediate_size=96, moe_intermediate_size=32, num_experts=16,
                      num_experts_per_tok=4, norm_topk_prob=True, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # Exact ties in the router: router row e equals row e % 4 (tie_router below), so every
    # token's logits come in 4 groups of 4 equal values and top-6 takes a whole group and 2 of
    # the next: which 2 is the tie rule (lower expert index first). Not renormalised.
    "qwen3_moe_ties": dict(model_type="qwen3_moe", vocab_size=256, hidden_size=64,
                           intermediate_size=96, moe_intermediate_size=32, num_experts=16,
                           num_experts_per_tok=6, norm_topk_prob=False, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           max_position_embeddings=256, rms_norm_eps=1e-6,
                           tie_word_embeddings=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    "mixtral": dict(model_type="mixtral", vocab_size=256, hidden_size=64, intermediate_size=32,
                    num_local_experts=8, num_experts_per_tok=2, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                    rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # A shared expert beside 16 routed ones, scaled by sigmoid(shared_expert_gate · x).
    "qwen2_moe": dict(model_type="qwen2_moe", vocab_size=256, hidden_size=64,
                      intermediate_size=96, moe_intermediate_size=32,
                      shared_expert_intermediate_size=48, num_experts=16, num_experts_per_tok=4,
                      norm_topk_prob=False, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                      tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # OLMoE: q_norm over the whole q projection (hidden_size) and k_norm over the whole k
    # projection, not per head; 16 experts as wide as intermediate_size, top-4, not renormalised.
    "olmoe": dict(model_type="olmoe", vocab_size=256, hidden_size=64, intermediate_size=32,
                  num_experts=16, num_experts_per_tok=4, norm_topk_prob=False,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}
# Cases whose router rows repeat with this period (exact ties in the router logits).
TIED_ROUTER_PERIOD = {"qwen3_moe_ties": 4}


def stable_topk(x, k, dim=-1, largest=True, sorted=True):
    """torch.topk with the tie rule detllm documents: of equal values, the lower index first.
    (torch.topk leaves the order of ties unspecified.) Used for the MoE routers' references."""
    assert largest and dim in (-1, x.dim() - 1)
    values, indices = torch.sort(x, dim=-1, descending=True, stable=True)
    return values[..., :k], indices[..., :k]


def routed_experts(router_logits, k):
    """(tokens, layers, k) expert ids from transformers' router logits (one (tokens, experts)
    tensor a layer, output_router_logits=True): the top k of each row, highest first, ties to
    the lower index (stable_topk) — the experts each token was routed to."""
    per_layer = [stable_topk(l.float(), k)[1] for l in router_logits]  # (tokens, k) each
    return torch.stack(per_layer, dim=1).tolist()


def tie_router(model, period):
    """Router row e := row e % period in every layer, so the router logits tie exactly."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight") and p.dim() == 2:
                for e in range(period, p.shape[0]):
                    p[e].copy_(p[e % period])


def write_defaults(out):
    d = {"transformers_version": transformers.__version__}
    for mt in MODEL_TYPES:
        d[mt] = json.loads(AutoConfig.for_model(mt).to_json_string(use_diff=False))
    with open(os.path.join(out, "hf_config_defaults.json"), "w") as f:
        json.dump(d, f, indent=1, sort_keys=True)
        f.write("\n")


def randomize(model, seed):
    """Every parameter random (transformers zeroes biases and sets norms to 1, which would leave
    them untested): norms 1 + 0.1 N(0,1), everything else 0.05 N(0,1), embeddings 0.5 N(0,1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * r)
            elif "embed_tokens" in name:
                p.copy_(0.5 * r)
            else:
                p.copy_(0.05 * r)


def write_case(out, name, kw, seed):
    d = os.path.join(out, "hf_v5", name)
    os.makedirs(d, exist_ok=True)
    kw = dict(kw)
    config = AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed)
    if name in TIED_ROUTER_PERIOD:
        tie_router(model, TIED_ROUTER_PERIOD[name])
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    # The reference runs on the file as saved, in fp32.
    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    ref.eval()
    rng = np.random.default_rng(seed)
    seqs, blobs = [], []
    with torch.no_grad():
        for n in SEQ_LENS:
            ids = rng.integers(0, config.vocab_size, size=n).tolist()
            moe = hasattr(config, "num_experts_per_tok")
            res = ref(torch.tensor([ids]), output_router_logits=moe) if moe else ref(
                torch.tensor([ids]))
            logits = res.logits[0].float()
            blobs.append(logits.numpy().astype("<f4"))
            seq = {"tokens": ids}
            if moe:
                seq["routed_experts"] = routed_experts(res.router_logits, config.num_experts_per_tok)
            cur, greedy = list(ids), []
            for _ in range(N_GREEDY):
                nxt = int(ref(torch.tensor([cur])).logits[0, -1].float().argmax())
                greedy.append(nxt)
                cur.append(nxt)
            seq["greedy"] = greedy
            seqs.append(seq)
    np.concatenate(blobs).tofile(os.path.join(d, "logits.f32"))
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump({"transformers_version": transformers.__version__, "case": name,
                   "vocab_size": config.vocab_size, "sequences": seqs}, f)
        f.write("\n")
    with open(os.path.join(d, "config.json")) as f:
        print(name, "config keys:", sorted(json.load(f).keys()))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "..", "tests", "data", "loaders")
    os.makedirs(out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    write_defaults(out)
    torch.topk = stable_topk  # the MoE routers' only top-k: ties to the lower expert index
    for i, (name, kw) in enumerate(CASES.items()):
        write_case(out, name, kw, 1000 + i)
    print("transformers", transformers.__version__, "torch", torch.__version__, "->", out)


if __name__ == "__main__":
    main()
