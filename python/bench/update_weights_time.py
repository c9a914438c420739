"""Time of llm.update_weights from torch CUDA tensors: every parameter of the model, as a
trainer hands them over after a step (issue 15's target: the 8B synthetic model in <= 1 s).
The tensors are made by torch on the GPU (random, bf16 matrices; vectors in --vector-dtype),
then pushed --repeat times; prints each time, the median and the GB/s. Also checks that the
update took: a fixed sequence scores differently after the first push, the same after a
second push of the same tensors, and a parameter read back equals the pushed values.

  PYTHONPATH=python:DIR/python python3 python/bench/update_weights_time.py \
      [--model synthetic:llama-3.1-8b] [--repeat 3] [--vector-dtype float32|bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

try:
    import torch
except ImportError:
    sys.exit("python/bench/update_weights_time.py needs torch with CUDA")

import detllm


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="synthetic:llama-3.1-8b")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--vector-dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--kv-cache-tokens", type=int, default=32768)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    a = ap.parse_args()
    t0 = time.perf_counter()
    llm = detllm.LLM(model=a.model, backend="cuda", kv_cache_tokens=a.kv_cache_tokens,
                     max_num_batched_tokens=a.max_num_batched_tokens)
    print(f"engine ready in {time.perf_counter() - t0:.1f} s: {llm.model_name}, "
          f"{llm.config['n_layers']} layers, dim {llm.config['dim']}", flush=True)
    names = [n for n in llm.parameter_names()
             if not (n == "lm_head.weight" and llm.config["tied_embeddings"])]
    vdt = getattr(torch, a.vector_dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    tensors = {}
    for n in names:
        shape = llm.parameter_shape(n)
        if len(shape) == 2:
            std = 1.0 / shape[1] ** 0.5
            t = torch.empty(shape, dtype=torch.bfloat16, device="cuda").normal_(0, std, generator=g)
        else:
            t = (1 + 0.01 * torch.randn(shape, device="cuda", generator=g)).to(vdt)
        tensors[n] = t
    torch.cuda.synchronize()
    n_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
    print(f"{len(tensors)} tensors, {n_bytes / 1e9:.2f} GB on the GPU (bf16 matrices, "
          f"{a.vector_dtype} vectors)", flush=True)

    seq = [[(i * 7919) % llm.config["vocab_size"] for i in range(1, 65)]]
    before = llm.score(seq, use_tqdm=False)[0].logprobs
    times = []
    for r in range(a.repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        llm.update_weights(tensors, version=f"step-{r}")
        times.append(time.perf_counter() - t)
        print(f"update {r}: {times[-1] * 1e3:.1f} ms", flush=True)
        if r == 0:
            after = llm.score(seq, use_tqdm=False)[0].logprobs
            assert not np.array_equal(after.view("u4"), before.view("u4")), "the update changed nothing"
    again = llm.score(seq, use_tqdm=False)[0].logprobs
    assert np.array_equal(again.view("u4"), after.view("u4")), "the same tensors gave other bits"
    probe = "model.layers.0.self_attn.q_proj.weight"
    back = llm.get_parameter(probe)
    assert np.array_equal(back, tensors[probe].float().cpu().numpy()), "read-back differs"
    med = statistics.median(times)
    print(f"update_weights, {llm.model_name}, all {len(tensors)} tensors from torch CUDA: median "
          f"{med * 1e3:.1f} ms of {a.repeat} ({n_bytes / med / 1e9:.0f} GB/s); target <= 1000 ms: "
          f"{'met' if med <= 1.0 else 'missed'}")
    print("checks: the update changed the scores; the same tensors again gave the same bits; "
          f"{probe} read back equals the pushed values")
    return 0


if __name__ == "__main__":
    sys.exit(main())
