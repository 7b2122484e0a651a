"""An exception raised in the user's own code during ``langadapt run`` is one line naming
their file:line and the run (exit code 1), in this process and from a worker process;
``--traceback`` gives the whole; an exception with no frame of the user's (a langadapt bug)
keeps its traceback. An unknown option names the nearest known one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from experiment_fixtures import run_cli

LANGADAPT = Path(sys.executable).with_name("langadapt")
CORRIDOR = Path(__file__).with_name("my_corridor.py").read_text(encoding="utf-8")
GOOD = 'return f"You are {4 - int(state[0])} cells from the end of the corridor."'
BROKEN = 'return f"You are {[4, 3][int(state[0])]} cells from the end of the corridor."'

EXPERIMENT = """\
name: corridor
environment: {id: "my_broken_corridor:Corridor-v0"}
adapters: [{type: raw}, {type: language}]
agents: [{type: qlearning}]
training: {episodes: 3}
seeds: 1
evaluation: {final_episodes: 1}
cache_dir: cache
"""


@pytest.fixture
def broken(tmp_path, monkeypatch) -> tuple[Path, int]:
    """A user's folder whose describer fails past cell 1; -> (experiment file, the line)."""
    assert GOOD in CORRIDOR
    source = CORRIDOR.replace(GOOD, BROKEN)
    (tmp_path / "my_broken_corridor.py").write_text(source, encoding="utf-8")
    (tmp_path / "experiments").mkdir()  # (a file never imports its own folder's code)
    (tmp_path / "experiments" / "corridor.yaml").write_text(EXPERIMENT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "experiments" / "corridor.yaml", \
        source.splitlines().index("        " + BROKEN) + 1
    sys.modules.pop("my_broken_corridor", None)


def _expected(folder: Path, line: int) -> str:
    return (f"langadapt run: error: IndexError: list index out of range at "
            f"{folder / 'my_broken_corridor.py'}:{line} (in describe) in run "
            "language__qlearning__seed0; --traceback shows the whole traceback\n")


def test_an_error_in_the_users_describer_is_one_line(broken, capsys):
    path, line = broken
    code, _, err = run_cli(capsys, "run", str(path), "--no-progress", "--out", "results")
    assert code == 1 and err == _expected(path.parent.parent.resolve(), line)
    with pytest.raises(IndexError):
        run_cli(capsys, "run", str(path), "--no-progress", "--out", "results", "--force",
                "--traceback")


def test_an_error_in_a_worker_process_is_one_line_too(broken):
    path, line = broken
    done = subprocess.run([str(LANGADAPT), "run", str(path), "--jobs", "2", "--no-progress",
                           "--out", "results"], capture_output=True, text=True,
                          cwd=path.parent.parent, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                          timeout=600)
    # (the stopped pool may leave multiprocessing's "leaked semaphore" warning after it)
    assert done.returncode == 1 and _expected(path.parent.parent.resolve(), line) in done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_a_langadapt_bug_keeps_its_traceback(broken, capsys, monkeypatch):
    from langadapt.experiments import one_run

    monkeypatch.setattr(one_run, "train_run", one_run.find_run)  # called with wrong arguments
    with pytest.raises(TypeError, match="run_dir"):
        run_cli(capsys, "run", str(broken[0]), "--no-progress", "--out", "results")


def test_a_users_module_beside_the_checkouts_packages_is_theirs(monkeypatch):
    from langadapt.experiments import cli

    top = Path(cli.__file__).resolve().parents[1]
    assert cli._library_file(str(top / "environments" / "language.py"))
    assert cli._library_file(str(top / "__init__.py"))
    assert not cli._library_file(str(top / "my_corridor.py"))
    assert not cli._library_file(str(top / "tests" / "my_corridor.py"))


def test_an_unknown_option_names_the_nearest(capsys):
    code, _, err = run_cli(capsys, "run", "quickstart", "--output", "results")
    assert code == 2 and "unrecognized arguments: --output results; did you mean --out?" in err
    code, _, err = run_cli(capsys, "describe", "maze", "--stpes", "3")
    assert code == 2 and "did you mean --steps or " in err
    code, _, err = run_cli(capsys, "describe", "maze", "--zzzzz")
    assert code == 2 and err.startswith("langadapt describe: error: unrecognized arguments: "
                                        "--zzzzz (see")
