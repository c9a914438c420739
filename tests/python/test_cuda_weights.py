"""update_weights from torch CUDA tensors on backend="cuda" (the H200 run of
scripts/gpu/python_gpu.sh; skipped without torch or a GPU). The engine holds bf16 matrices and
fp32 vectors on the GPU. A CUDA tensor of that dtype is copied device to device (the host fp32
copy is then stale and refreshed from the device when read); any other tensor goes through the
host copy (widened, rounded to bf16 as the load rounds, uploaded). The two paths must give the
same weights and so the same logprob bits; reading back, sleep(2)/wake and rollout = score
must hold after either."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (CI): CUDA weight updates not run")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: CUDA weight updates not run", allow_module_level=True)

import detllm  # noqa: E402
from conftest import bits, make_llm  # noqa: E402

NAMES = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
         "model.layers.1.self_attn.k_proj.weight", "model.layers.1.self_attn.v_proj.weight",
         "model.layers.2.mlp.gate_proj.weight", "model.layers.2.mlp.up_proj.weight",
         "model.layers.3.mlp.down_proj.weight", "model.layers.3.self_attn.o_proj.weight",
         "model.layers.0.input_layernorm.weight", "model.norm.weight"]


@pytest.fixture(scope="module")
def llm():
    return make_llm("cuda")


def seqs_of(llm, n=3, length=24, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, llm.config["vocab_size"], size=length).tolist() for _ in range(n)]


def scores(llm, seqs):
    return [s.logprobs for s in llm.score(seqs, use_tqdm=False)]


def same(a, b):
    return all(np.array_equal(bits(x), bits(y)) for x, y in zip(a, b))


def perturbed_bf16(llm, names, seed):
    """New values, bf16-representable (so both paths can carry them exactly)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for n in names:
        a = torch.from_numpy(llm.get_parameter(n))
        a = a * (1 + 0.1 * torch.randn(a.shape, generator=g))
        out[n] = a.to(torch.bfloat16)
    return out


def test_device_to_device_update_equals_host_update(llm):
    seqs = seqs_of(llm)
    base = {n: llm.get_parameter(n) for n in NAMES}
    s0 = scores(llm, seqs)
    new = perturbed_bf16(llm, NAMES, 1)
    # device path: bf16 matrices, fp32 vectors (the placed dtypes), on the GPU
    d2d = {n: (t if t.dim() == 2 else t.float()).cuda() for n, t in new.items()}
    llm.update_weights(d2d, version="d2d")
    s_dev = scores(llm, seqs)
    assert not same(s_dev, s0)
    for n, t in new.items():  # read back: the device's values (the host copy was stale)
        assert np.array_equal(bits(llm.get_parameter(n)), bits(t.float().numpy())), n
    # rollout = score after a device-to-device update
    out = llm.generate([s[:8] for s in seqs], detllm.SamplingParams(max_tokens=8, seed=3), use_tqdm=False)
    rs = scores(llm, [r.prompt_token_ids + r.outputs[0].token_ids for r in out])
    for r, s in zip(out, rs):
        g = r.outputs[0].token_logprobs
        assert np.array_equal(bits(s[len(s) - len(g):]), bits(g))
    llm.update_weights(base, version="base")  # host path, numpy fp32
    assert same(scores(llm, seqs), s0)
    # host path with the same values: fp32 numpy, and fp32 CUDA tensors (downloaded, rounded)
    llm.update_weights({n: t.float().numpy() for n, t in new.items()}, version="host")
    assert same(scores(llm, seqs), s_dev)
    llm.update_weights(base, version="base")
    llm.update_weights({n: t.float().cuda() for n, t in new.items()}, version="fp32-cuda")
    assert same(scores(llm, seqs), s_dev)
    # sleep(2) frees the device weights; wake places them again from the refreshed host copy
    llm.update_weights(base, version="base")
    llm.update_weights(d2d, version="d2d-again")
    llm.sleep(2)
    llm.wake_up()
    assert same(scores(llm, seqs), s_dev)
    print(f"[measure] cuda: device-to-device update = host-path update = after sleep(2)/wake, "
          f"bit for bit ({len(NAMES)} tensors, {sum(len(s) - 1 for s in seqs)} scored tokens)")
    llm.update_weights(base, version="base")


def test_device_tensor_checks(llm):
    name = "model.layers.0.self_attn.q_proj.weight"
    shape = llm.parameter_shape(name)
    with pytest.raises(detllm.Error, match=r"shape \[3\]"):
        llm.update_weights({name: torch.zeros(3, device="cuda")}, version="bad")
    with pytest.raises(detllm.Error, match="float64"):
        llm.update_weights({name: torch.zeros(shape, dtype=torch.float64, device="cuda")}, version="bad")
    if llm.config["tied_embeddings"]:
        e = torch.from_numpy(llm.get_parameter("model.embed_tokens.weight")).to(torch.bfloat16).cuda()
        # one tensor under both names (a tied torch module) passes; two device copies do not
        llm.update_weights({"model.embed_tokens.weight": e, "lm_head.weight": e}, version="tied")
        with pytest.raises(detllm.Error, match="tied embeddings"):
            llm.update_weights({"model.embed_tokens.weight": e, "lm_head.weight": e.clone()}, version="x")


def test_synthetic_model_in_device_memory():
    llm = make_llm("cuda", model="synthetic:tiny-llama")
    seqs = seqs_of(llm, 2, 16, seed=4)
    s0 = scores(llm, seqs)
    names = [n for n in llm.parameter_names() if n != "lm_head.weight"]
    cur = {n: torch.from_numpy(llm.get_parameter(n)) for n in names}  # the device's values
    # the same values back, device to device: the same bits
    llm.update_weights({n: (t.to(torch.bfloat16) if t.dim() == 2 else t).cuda() for n, t in cur.items()},
                       version="same")
    assert same(scores(llm, seqs), s0)
    # other values through the host path (no host copy: staged), then back
    w = cur["model.layers.0.mlp.up_proj.weight"]
    llm.update_weights({"model.layers.0.mlp.up_proj.weight": (w * 3).numpy()}, version="x3")
    assert not same(scores(llm, seqs), s0)
    llm.update_weights({"model.layers.0.mlp.up_proj.weight": w.numpy()}, version="back")
    assert same(scores(llm, seqs), s0)
