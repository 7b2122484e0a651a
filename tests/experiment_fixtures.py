"""Helpers shared by the experiment and command-line tests (test_experiments.py,
test_faults_experiments.py, test_faults_results.py, test_cli.py, test_own_envs.py)."""

from __future__ import annotations

import sys
from pathlib import Path

LANGADAPT = Path(sys.executable).parent / "langadapt"
QUIET = {"progress": False, "log": lambda _: None}


def raw_config(tmp_path: Path, **changes) -> dict:
    """Raw states only (no encoder to load): two agents x two seeds on the umaze."""
    data = {
        "name": "faults",
        "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "qlearning"}, {"type": "random"}],
        "training": {"episodes": 4},
        "seeds": 2,
        "evaluation": {"every": 2, "episodes": 1, "final_episodes": 2},
        "output": str(tmp_path / "out"),
        "cache_dir": str(tmp_path / "cache"),
    }
    data.update(changes)
    return data


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """``langadapt ARGS`` in this process -> (exit code, stdout, stderr); argparse's exits
    count too, and only what the command prints is returned."""
    from langadapt.experiments import cli

    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def started_runs(monkeypatch, finished_before_crash: int | None = None) -> list[str]:
    """Record the key of every run the runner starts (the list returned, filled as runs
    start); with ``finished_before_crash`` the run after that many raises KeyboardInterrupt
    (a simulated crash). Calling it again in a test records afresh."""
    from langadapt.experiments import one_run

    real = getattr(one_run.execute_run, "unrecorded", one_run.execute_run)
    started: list[str] = []

    def record_and_run(data, key, out_dir):
        started.append(key)
        if finished_before_crash is not None and len(started) > finished_before_crash:
            raise KeyboardInterrupt("simulated crash")
        return real(data, key, out_dir)

    record_and_run.unrecorded = real
    monkeypatch.setattr(one_run, "execute_run", record_and_run)
    return started


def one_line_error(capsys, *args: str, lines: int = 1) -> tuple[int, str]:
    """``langadapt ARGS`` in this process -> (exit code, its error): ``lines`` lines (an
    invalid experiment file is its name, then one line per bad key), no traceback."""
    from langadapt.experiments import cli

    capsys.readouterr()
    code = cli.main(list(args))
    err = capsys.readouterr().err
    assert err.count("\n") == lines and "Traceback" not in err, err  # (a bar ends in \r)
    return code, err.rsplit("\r", 1)[-1]


def write_yaml(path: Path, data: dict) -> Path:
    """``data`` written as YAML to ``path``; ``path``."""
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
