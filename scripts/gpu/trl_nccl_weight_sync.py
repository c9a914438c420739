"""TRL's own VLLMClient pushes weights over NCCL into `detllm serve --backend cuda
--weight-transfer` (docs/server.md, "NCCL"): the trainer (this process, rank 0) on cuda:0, the
server (rank 1) on cuda:1. Needs two GPUs, torch with CUDA, transformers, trl >= 1.16 and vLLM
(TRL's client uses vLLM's trainer-side NCCL helpers: the StatelessProcessGroup over a TCPStore
and PyNcclCommunicator), and a detllm built with CUDA and NCCL.

  python scripts/gpu/trl_nccl_weight_sync.py --bin build/detllm [--model DIR|GGUF]

Without --model a random Llama of the default model's shapes is written first
(python/bench/random_model.py). Steps, each checked:
  1. init_communicator(device=0): the server joins TRL's group (/init_weight_transfer_engine
     with TRL's init_info: master_address/port, rank_offset 1, world_size 2, packed);
  2. update_model_params(W1) (W1 = the model's parameters x 1.01, fp32), then a seeded request:
     its tokens or logprobs differ from before, and X-Detllm-Weight-Version is a new version;
  3. update W2 (x 0.99) then W1 again: the seeded request gives W1's tokens and logprob bits
     again, bit for bit (the same values give the same engine);
  4. the same W1 once more as bf16 tensors: the engine places bf16 matrices, so the bits equal
     step 2's too where the fp32 values were bf16-exact; printed, not required.
Prints one line per step and exits non-zero on a failed check.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import requests
import torch

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary: str, model: str, device: int):
    proc = subprocess.Popen([binary, "serve", "--model", model, "--backend", "cuda", "--device",
                             str(device), "--weight-transfer", "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            errors="backslashreplace")
    port, ready = [], threading.Event()

    def read():
        for line in proc.stderr:
            sys.stderr.write("[serve] " + line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port.append(int(m.group(1)))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(600)
    if not port:
        proc.kill()
        sys.exit("detllm serve did not start")
    return proc, f"http://127.0.0.1:{port[0]}"


def bits(values):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


def seeded(url: str):
    r = requests.post(f"{url}/v1/completions", json={
        "prompt": "The capital of France is", "max_tokens": 16, "temperature": 1.0, "seed": 7,
        "logprobs": 0, "ignore_eos": True})
    r.raise_for_status()
    lp = r.json()["choices"][0]["logprobs"]
    return (lp["token_ids"], bits(lp["token_logprobs"])), r.headers.get("X-Detllm-Weight-Version")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("DETLLM_BIN", str(ROOT / "build" / "detllm")))
    ap.add_argument("--model", help="HF directory or GGUF (default: a random SmolLM2-135M-shaped Llama)")
    ap.add_argument("--server-device", type=int, default=1)
    a = ap.parse_args()
    if torch.cuda.device_count() < 2:
        sys.exit("needs two GPUs: the trainer on cuda:0, detllm serve on cuda:1")
    from transformers import AutoModelForCausalLM
    from trl.generation.vllm_client import VLLMClient

    model_path = a.model
    if model_path is None:
        sys.path.insert(0, str(ROOT / "python" / "bench"))
        import random_model
        model_path = tempfile.mkdtemp(prefix="detllm-trl-nccl-")
        random_model.write_model(model_path, "smollm2-135m", 0, "float32")
    if model_path.endswith(".gguf"):
        hf = AutoModelForCausalLM.from_pretrained(os.path.dirname(model_path),
                                                  gguf_file=os.path.basename(model_path),
                                                  torch_dtype=torch.float32)
    else:
        hf = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
    hf = hf.to("cuda:0")
    base = {n: p.detach().clone() for n, p in hf.named_parameters()}

    proc, url = start_server(a.bin, model_path, a.server_device)
    ok = True
    try:
        client = VLLMClient(base_url=url, group_port=free_port(), connection_timeout=120)
        info = client.get_server_info()["weight_transfer_config"]
        print("server_info weight_transfer_config:", info)
        client.init_communicator(device=0)
        print("1. init_communicator: joined (trainer rank 0 on cuda:0, server rank 1 on "
              f"cuda:{a.server_device})")
        out0, v0 = seeded(url)

        def push(scale, dtype=torch.float32):
            with torch.no_grad():
                for n, p in hf.named_parameters():
                    p.copy_(base[n] * scale)
            meta = [(n, str(dtype).removeprefix("torch."), list(p.shape)) for n, p in hf.named_parameters()]
            client.update_named_params(meta, ((n, p.data.to(dtype)) for n, p in hf.named_parameters()))
            return seeded(url)

        out1, v1 = push(1.01)
        changed = out1 != out0 and v1 != v0
        print(f"2. update_model_params(x1.01): version {v0} -> {v1}; output changed: {changed}")
        ok &= changed
        _, v2 = push(0.99)
        out3, v3 = push(1.01)
        same = out3 == out1
        print(f"3. x0.99 ({v2}) then x1.01 again ({v3}): tokens and logprob bits = step 2's: {same}")
        ok &= same
        out4, v4 = push(1.01, torch.bfloat16)
        print(f"4. x1.01 as bf16 tensors ({v4}): = step 2's bits: {out4 == out1} (informative)")
    finally:
        proc.terminate()
        proc.wait(60)
    print("trl_nccl_weight_sync:", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
