"""Helpers shared by the experiment fault tests (tests/test_faults_experiments.py and
tests/test_faults_results.py)."""

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
