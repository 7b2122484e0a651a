"""A researcher's own environment from an experiment file: gymnasium's ``module:EnvId``
and the ``imports:`` list, in the driver and in spawned workers (``--jobs 2``) of a user
module without a ``__main__`` guard; ``describe`` and ``prerender`` on the same ids; bad
ids and modules as one line; "did you mean" for ids and keys; ``--check`` building the
environment."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from experiment_fixtures import run_cli

from langadapt.experiments import cli_inspect
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.schema import ConfigError

LANGADAPT = Path(sys.executable).with_name("langadapt")

CORRIDOR = (Path(__file__).with_name("my_corridor.py")).read_text(encoding="utf-8")

EXPERIMENT = """\
name: corridor
IMPORTS
environment: {id: ENV_ID}
adapters: [{type: raw}, {type: language}]
agents: [{type: qlearning}]
training: {episodes: 3}
seeds: 1
evaluation: {final_episodes: 1}
cache_dir: CACHE
"""


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A folder with the user's module in it, the working directory of the test."""
    (tmp_path / "my_corridor.py").write_text(CORRIDOR, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LANGADAPT_CACHE_DIR", str(tmp_path / "llm-cache"))
    return tmp_path


def _experiment(folder: Path, env_id: str, imports: str = "") -> Path:
    """The experiment file, in a folder of its own (a file never imports its own folder's code)."""
    path = folder / "experiments" / "corridor.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(EXPERIMENT.replace("IMPORTS", imports).replace("ENV_ID", env_id)
                    .replace("CACHE", str(folder / "cache")), encoding="utf-8")
    return path


def _langadapt(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The installed ``langadapt`` command, as a user runs it (the module is found in the
    working directory, not on the test's PYTHONPATH)."""
    return subprocess.run([str(LANGADAPT), *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=600)


_main = run_cli


@pytest.mark.heavy
def test_module_env_id_runs_in_two_spawned_workers(user_folder):
    path = _experiment(user_folder, "my_corridor:Corridor-v0")
    done = _langadapt("run", str(path), "--jobs", "2", "--no-progress", "--out", "results",
                      cwd=user_folder)
    assert done.returncode == 0, done.stderr
    with open(user_folder / "results" / "episodes.csv", newline="") as rows:
        adapters = {row["adapter"] for row in csv.DictReader(rows)}
    assert adapters == {"raw", "language"}


def test_imports_list_then_prerender_and_describe(user_folder, capsys):
    path = _experiment(user_folder, "Corridor-v0", imports="imports: [my_corridor]")
    code, out, err = _main(capsys, "run", str(path), "--check")
    assert code == 0 and "2 runs" in out, err
    code, out, err = _main(capsys, "describe", "my_corridor:Corridor-v0", "--steps", "1")
    assert code == 0 and "cells from the end of the corridor" in out, err
    code, out, err = _main(capsys, "describe", "Corridor-v0", "--import", "my_corridor",
                           "--state", "2")
    assert code == 0 and "2 cells from the end" in out, err
    code, out, err = _main(capsys, "prerender", str(path), "--no-progress")
    assert code == 0 and "nothing to prerender" in out, err


def test_a_module_that_fails_to_import_is_one_line(user_folder, capsys):
    (user_folder / "broken_env.py").write_text("import no_such_dependency\n", encoding="utf-8")
    path = _experiment(user_folder, "broken_env:Broken-v0")
    code, _, err = _main(capsys, "run", str(path), "--check")
    assert code == 2 and "cannot import module 'broken_env'" in err
    assert "No module named 'no_such_dependency'" in err and "Traceback" not in err
    code, _, err = _main(capsys, "describe", "broken_env:Broken-v0")
    assert code == 2 and err.count("\n") == 1 and "'broken_env'" in err
    code, _, err = _main(capsys, "describe", "maze", "--import", "no_such_module")
    assert code == 2 and "--import: cannot import module 'no_such_module'" in err


def test_a_module_without_the_id_names_what_it_registers(user_folder):
    data = {"name": "x", "environment": {"id": "my_corridor:Coridor-v0"},
            "adapters": [{"type": "raw"}], "agents": [{"type": "random"}],
            "training": {"episodes": 1}}
    with pytest.raises(ConfigError, match="registers no environment 'Coridor-v0' "
                                          r"\(did you mean 'Corridor-v0'"):
        experiment_from_dict(data)


def test_did_you_mean_for_ids_and_keys(tmp_path):
    base = {"name": "x", "environment": {"id": "Taxi-v3"}, "adapters": [{"type": "raw"}],
            "agents": [{"type": "qlearning"}], "training": {"episodes": 1}}
    with pytest.raises(ConfigError, match=r"unknown environment 'Taxi-v3' \(did you mean "
                                          r"'Taxi-v4'\?\)"):
        experiment_from_dict(base)
    base["environment"]["id"] = "Taxi-v4"
    with pytest.raises(ConfigError, match=r"evaluation.final_episode: unknown key \(did you "
                                          r"mean 'final_episodes'"):
        experiment_from_dict({**base, "evaluation": {"final_episode": 3}})
    with pytest.raises(ConfigError, match=r"agents.0.params.alpah: unknown key \(did you "
                                          r"mean 'alpha'\?\)"):
        experiment_from_dict({**base, "agents": [{"type": "qlearning",
                                                  "params": {"alpah": 0.1}}]})
    with pytest.raises(ConfigError, match=r"adapters.0.setings: unknown key \(did you mean "
                                          r"'settings'\?\)"):
        experiment_from_dict({**base, "adapters": [{"type": "raw", "setings": {}}]})


def test_check_builds_the_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nenvironment: {id: langadapt/Maze-v0, params: {maze: umase}}\n"
                    "adapters: [{type: raw}]\nagents: [{type: qlearning}]\n"
                    "training: {episodes: 1}\n", encoding="utf-8")
    code, _, err = _main(capsys, "run", str(path), "--check")
    assert code == 2 and 'maze="umase"' in err and err.count("\n") == 1


def test_describe_and_prompt_take_the_openai_backend(capsys):
    spec = cli_inspect.llm_spec("openai", "smollm2", None, "http://127.0.0.1:8000/v1")
    assert spec == {"backend": "openai", "model": "smollm2",
                    "base_url": "http://127.0.0.1:8000/v1"}
    code, _, err = _main(capsys, "describe", "maze", "--adapter", "llm", "--backend", "openai",
                         "--model", "m")
    assert code == 2 and "--backend openai needs --base-url" in err
    code, _, err = _main(capsys, "prompt", "maze", "--backend", "openai", "--base-url",
                         "ftp://example.org/v1", "--model", "m")
    assert code == 2 and "base_url='ftp://example.org/v1'" in err and err.count("\n") == 1
    code, _, err = _main(capsys, "describe", "maze", "--adapter", "llm", "--base-url",
                         "http://127.0.0.1:8000/v1")
    assert code == 2 and "is for --backend openai" in err


@pytest.mark.heavy
@pytest.mark.slow
def test_module_env_id_runs_on_a_local_ray_cluster(user_folder):
    pytest.importorskip("ray")
    path = _experiment(user_folder, "my_corridor:Corridor-v0")
    done = _langadapt("run", str(path), "--executor", "ray", "--jobs", "1", "--no-progress",
                      "--out", "results", cwd=user_folder)
    assert done.returncode == 0, done.stderr
    with open(user_folder / "results" / "episodes.csv", newline="") as rows:
        adapters = {row["adapter"] for row in csv.DictReader(rows)}
    assert adapters == {"raw", "language"}
