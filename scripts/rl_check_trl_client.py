"""TRL's own VLLMClient (trl.generation.vllm_client, TRL >= 1.16: vLLM's OpenAI server protocol)
against `detllm serve`: the calls GRPOTrainer's server mode makes (generate with text and
token-id prompts, get_server_info, get_world_size, reset_prefix_cache), chat, and
get_sequence_logprobs; checked bit for bit against the server's own answers. Part of
scripts/rl_check.sh.

  python scripts/rl_check_trl_client.py [--bin build-cpu/detllm] [--model GGUF]

VLLMClient refuses to be built without vLLM installed (it imports vLLM's NCCL weight-transfer
helpers at init_communicator), although nothing else uses vLLM; the check is bypassed here.
The server here runs without --weight-transfer, so init_communicator, called last, is refused
(no weight-transfer engine). The NCCL weight sync itself needs GPUs on both sides:
scripts/gpu/trl_nccl_weight_sync.py runs it against detllm serve --weight-transfer.
"""

import argparse
import os
import re
import struct
import subprocess
import sys
import threading

import trl.generation.vllm_client as vc

vc.is_vllm_available = lambda *a, **k: True  # see the docstring

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def f32(values):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


def start_server(binary, model):
    proc = subprocess.Popen([binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
                             "--threads", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, errors="backslashreplace")
    port, ready = [], threading.Event()

    def read():
        for line in proc.stderr:
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port.append(int(m.group(1)))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(300)
    if not port:
        proc.kill()
        raise SystemExit("detllm serve did not start")
    return proc, f"http://127.0.0.1:{port[0]}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("DETLLM_BIN", os.path.join(ROOT, "build-cpu", "detllm")))
    ap.add_argument("--model", default=os.environ.get(
        "DETLLM_DEFAULT_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")))
    a = ap.parse_args()
    proc, url = start_server(a.bin, a.model)
    ok = True
    try:
        client = vc.VLLMClient(base_url=url, connection_timeout=60)
        print("VLLMClient connected; model:", client.model)
        info = client.get_server_info()
        print("get_server_info: logprobs_mode", info["model_config"]["logprobs_mode"],
              "weight_transfer_config", info["weight_transfer_config"])
        print("get_world_size:", client.get_world_size())
        prompts = ["The capital of France is", "Count: one, two,"]
        r = client.generate(prompts, n=2, max_tokens=8, generation_kwargs={"seed": 3})
        print("generate (text): prompt_ids", [len(p) for p in r["prompt_ids"]], "tokens; completions",
              r["completion_ids"])
        # GRPOTrainer's server mode sends token ids: the same requests, the same bits.
        again = client.generate(r["prompt_ids"], n=2, max_tokens=8, generation_kwargs={"seed": 3})
        same = again["completion_ids"] == r["completion_ids"] and all(
            f32([x[0] for x in a]) == f32([x[0] for x in b])
            for a, b in zip(again["logprobs"], r["logprobs"]))
        print("generate (token ids) = generate (text), tokens and logprobs bit for bit:", same)
        ok &= same
        seq = r["prompt_ids"][0] + r["completion_ids"][0]
        lp = client.get_sequence_logprobs([seq], [len(r["prompt_ids"][0])], top_logprobs=5)
        scored = [x[0] for x in lp["actual_logprobs"][0]]
        match = f32(scored) == f32([x[0] for x in r["logprobs"][0]])
        print(f"get_sequence_logprobs: {len(lp['logprobs'][0])} positions x {len(lp['logprobs'][0][0])} "
              f"top logprobs; actual tokens' = generate's logprobs bit for bit: {match}")
        ok &= match
        c = client.chat([[{"role": "user", "content": "Name a colour."}]], max_tokens=8,
                        generation_kwargs={"seed": 1})
        print("chat: prompt_ids", len(c["prompt_ids"][0]), "tokens; completion_ids", c["completion_ids"])
        client.reset_prefix_cache()
        print("reset_prefix_cache: ok")
        after = client.generate(r["prompt_ids"], n=2, max_tokens=8, generation_kwargs={"seed": 3})
        same = after["completion_ids"] == r["completion_ids"]
        print("generate after reset_prefix_cache = before:", same)
        ok &= same
        try:
            client.init_communicator(device="cuda")
            print("init_communicator: unexpectedly accepted")
            ok = False
        except Exception as e:  # refused: no weight-transfer engine / no CUDA / no vLLM group
            print("init_communicator (weight sync over NCCL):", type(e).__name__ + ":", str(e)[:200])
    finally:
        proc.terminate()
        proc.wait(60)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
