"""Helpers shared by the experiment and command-line tests (test_faults_experiments.py,
test_faults_results.py, test_cli.py, test_own_envs.py)."""

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
