"""The model names a server accepts, with the official `openai` client: a server started with
--model PATH still answers the name "default" (so the README's examples keep working once a
model is named), --served-model-name takes several names as vLLM does, and a response's
"model" echoes the name the request used."""
import pytest

from conftest import API_KEY, DEFAULT_MODEL, start_server

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def named():
    s = start_server("--model", DEFAULT_MODEL, "--served-model-name", "smol", "smol-alias")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def by_path():
    s = start_server("--model", DEFAULT_MODEL)
    yield s
    s.stop()


def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=60)


def test_default_is_an_alias_when_a_model_path_is_given(by_path):
    with client(by_path) as c:
        ids = [m.id for m in c.models.list().data]
        assert ids == ["SmolLM2-135M-Instruct.Q4_1.gguf", "default"]
        for name in ids:
            r = c.completions.create(model=name, prompt="Hello", max_tokens=2, temperature=0)
            assert r.model == name
        with pytest.raises(openai.NotFoundError):
            c.completions.create(model="nope", prompt="Hello", max_tokens=2)


def test_several_served_names_each_echoed(named):
    with client(named) as c:
        assert [m.id for m in c.models.list().data] == ["smol", "smol-alias", "default"]
        outs = {}
        for name in ("smol", "smol-alias", "default"):
            r = c.chat.completions.create(model=name, max_tokens=3, temperature=0,
                                          messages=[{"role": "user", "content": "Hi"}])
            assert r.model == name
            outs[name] = r.choices[0].message.content
        assert len(set(outs.values())) == 1, outs  # one model behind every name
        chunks = list(c.completions.create(model="smol-alias", prompt="Hi", max_tokens=2,
                                           stream=True, temperature=0))
        assert chunks and all(ch.model == "smol-alias" for ch in chunks)
        # A response without a "model" in the request names the first served name.
        assert named.get("/health").json()["model"] == "smol"
