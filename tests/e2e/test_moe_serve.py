"""`detllm serve` on a mixture-of-experts GGUF file with quantized experts, through the official
openai client. The file is made at test time (no fixture in the repository): a tiny random
Qwen3-MoE (qwen3moe, 2 layers, 16 Q8_0 experts of 32, top-4; Q8_0 embeddings) written by
llama.cpp's `gguf` package, with the default model's tokenizer copied in (SmolLM2's 49,152
tokens, so its vocabulary is the embedding's). Checks: `return_routed_experts` gives, per
generated token, n_layers lists of k expert ids, each in range, distinct within a layer; two
identical seeded sampled requests sent concurrently with other traffic return the same tokens,
logprobs and routed experts."""
import concurrent.futures as cf
import os

import numpy as np
import pytest

from conftest import DEFAULT_MODEL, start_server

gguf = pytest.importorskip("gguf")

N_LAYERS, DIM, N_HEAD, N_KV, HEAD_DIM = 2, 64, 4, 2, 16
N_EXPERT, K, FFN = 16, 4, 32


def write_tiny_qwen3moe(path):
    if not os.path.exists(DEFAULT_MODEL):
        pytest.skip("the default model is not installed (scripts/setup.sh)")
    src = gguf.GGUFReader(DEFAULT_MODEL)
    vocab = len(src.fields["tokenizer.ggml.tokens"].contents())
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_name("tiny-qwen3moe-e2e")
    w.add_block_count(N_LAYERS)
    w.add_context_length(2048)
    w.add_embedding_length(DIM)
    w.add_feed_forward_length(96)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(vocab)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(K)
    w.add_expert_feed_forward_length(FFN)
    for key, field in src.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[1] if len(field.types) > 1 else None
            w.add_key_value(key, field.contents(), field.types[0], sub)
    rng = np.random.default_rng(7)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def mat(*shape, scale=None):
        scale = scale if scale is not None else 1 / np.sqrt(shape[-1])
        return rng.uniform(-scale, scale, size=shape).astype(np.float32)

    def norm(n):
        return rng.uniform(0.8, 1.2, size=n).astype(np.float32)

    w.add_tensor("token_embd.weight", gguf.quants.quantize(mat(vocab, DIM, scale=0.5), q8),
                 raw_dtype=q8)
    for i in range(N_LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", norm(DIM))
        w.add_tensor(b + "attn_q.weight", mat(N_HEAD * HEAD_DIM, DIM))
        w.add_tensor(b + "attn_k.weight", mat(N_KV * HEAD_DIM, DIM))
        w.add_tensor(b + "attn_v.weight", mat(N_KV * HEAD_DIM, DIM))
        w.add_tensor(b + "attn_output.weight", mat(DIM, N_HEAD * HEAD_DIM))
        w.add_tensor(b + "attn_q_norm.weight", norm(HEAD_DIM))
        w.add_tensor(b + "attn_k_norm.weight", norm(HEAD_DIM))
        w.add_tensor(b + "ffn_norm.weight", norm(DIM))
        w.add_tensor(b + "ffn_gate_inp.weight", mat(N_EXPERT, DIM, scale=2.0))
        for name, shape in (("ffn_gate_exps", (N_EXPERT, FFN, DIM)),
                            ("ffn_up_exps", (N_EXPERT, FFN, DIM)),
                            ("ffn_down_exps", (N_EXPERT, DIM, FFN))):
            w.add_tensor(b + name + ".weight", gguf.quants.quantize(mat(*shape), q8), raw_dtype=q8)
    w.add_tensor("output_norm.weight", norm(DIM))
    w.add_tensor("output.weight", gguf.quants.quantize(mat(vocab, DIM), q8), raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def moe_server(tmp_path_factory):
    path = write_tiny_qwen3moe(tmp_path_factory.mktemp("moe") / "tiny-qwen3moe-q8.gguf")
    s = start_server("--model", str(path))
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def moe_client(moe_server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=moe_server.base + "/v1", api_key="e2e-secret-key",
                         max_retries=0, timeout=300)


def seeded(client, prompt):
    return client.completions.create(
        model="default", prompt=prompt, max_tokens=12, temperature=0.9, seed=1234,
        logprobs=1, extra_body={"return_routed_experts": True, "ignore_eos": True})


def test_routed_experts_shape_and_range(moe_client):
    r = seeded(moe_client, "Experts route every token")
    choice = r.choices[0]
    routed = choice.model_extra["routed_experts"]
    n_tokens = len(choice.logprobs.token_logprobs)
    assert n_tokens == 12
    assert len(routed) == n_tokens
    for entry in routed:
        assert len(entry) == N_LAYERS
        for layer in entry:
            assert len(layer) == K
            assert all(0 <= e < N_EXPERT for e in layer)
            assert len(set(layer)) == K, layer


def test_seeded_requests_agree_under_concurrent_traffic(moe_client):
    prompt = "The mixture of experts says"
    noise = ["Other traffic " * n for n in range(1, 7)]
    with cf.ThreadPoolExecutor(8) as pool:
        a = pool.submit(seeded, moe_client, prompt)
        others = [pool.submit(moe_client.completions.create, model="default", prompt=p,
                              max_tokens=8 + i, temperature=0.7,
                              extra_body={"ignore_eos": True}) for i, p in enumerate(noise)]
        b = pool.submit(seeded, moe_client, prompt)
        ra, rb = a.result(), b.result()
        for o in others:
            o.result()
    ca, cb = ra.choices[0], rb.choices[0]
    assert ca.text == cb.text
    assert ca.logprobs.token_logprobs == cb.logprobs.token_logprobs
    assert ca.model_extra["routed_experts"] == cb.model_extra["routed_experts"]
    assert ra.system_fingerprint == rb.system_fingerprint
