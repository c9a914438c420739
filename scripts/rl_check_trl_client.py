"""TRL's own VLLMClient (trl.generation.vllm_client) against detllm.integrations.trl_server:
generate (text and token ids), chat, get_sequence_logprobs (json and binary), reset_prefix_cache;
the results are compared with detllm.LLM's, bit for bit. Part of scripts/rl_check.sh.

VLLMClient refuses to be built without vLLM installed (it imports vLLM's NCCL communicator
for weight updates), although generation does not use it; the check is bypassed here, as the
communicator is never initialised (detllm's server refuses it: use the colocated rollout_func).
"""

import numpy as np

import detllm
from detllm.integrations.trl_server import TrlServer
import trl.generation.vllm_client as vc

vc.is_vllm_available = lambda: True  # see the docstring

llm = detllm.LLM()
with TrlServer(llm, port=0) as s:
    client = vc.VLLMClient(base_url=s.url, connection_timeout=10)
    r = client.generate(["The capital of France is"], n=2, max_tokens=8,
                        generation_kwargs={"seed": 3})
    want = llm.generate(["The capital of France is"], detllm.SamplingParams(n=2, max_tokens=8, seed=3),
                        use_tqdm=False)[0]
    same = all(r["completion_ids"][k] == c.token_ids and
               np.array([x[0] for x in r["logprobs"][k]], np.float32).view("u4").tolist() ==
               c.token_logprobs.view("u4").tolist() for k, c in enumerate(want.outputs))
    print("VLLMClient.generate:", r["completion_ids"], "= LLM.generate bit for bit:", same)
    ids = client.generate([want.prompt_token_ids], max_tokens=4, generation_kwargs={"seed": 3})
    print("VLLMClient.generate (token ids):", ids["completion_ids"])
    c = client.chat([[{"role": "user", "content": "Name a colour."}]], max_tokens=8,
                    generation_kwargs={"seed": 1})
    print("VLLMClient.chat:", llm.get_tokenizer().decode(c["completion_ids"][0]))
    seq = want.prompt_token_ids + want.outputs[0].token_ids
    for binary in (False, True):
        lp = client.get_sequence_logprobs([seq], [len(want.prompt_token_ids)], top_logprobs=5,
                                          use_binary=binary)
        print(f"VLLMClient.get_sequence_logprobs (binary={binary}): {len(lp['logprobs'][0])} positions x "
              f"{len(lp['logprobs'][0][0])} top logprobs")
    client.reset_prefix_cache()
    print("VLLMClient.reset_prefix_cache: ok")
    if not same:
        raise SystemExit(1)
