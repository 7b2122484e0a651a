"""Runs per second: a local Ray cluster against the process pool, at the same parallelism.

The same experiment (tabular Q-learning on raw maze states, one run per seed) is run by
both executors with ``jobs`` runs at a time, side by side in this process. Timed: from
handing the runs to the executor until the last run's files are written (the pool's time
includes spawning its processes; Ray's includes its workers importing the library). Ray's
start-up (``ray.init`` of a local cluster) is reported separately.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from pathlib import Path

from ..experiments.config import experiment_from_dict
from ..experiments.executors import ProcessExecutor
from ..experiments.runner import finished_runs, prepare_output, runs_of
from ..experiments.schema import ExecutorSpec


def _experiment(folder: Path, runs: int, episodes: int, executor: str) -> dict:
    return {
        "name": f"bench-{executor}",
        "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "double_t_maze"}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "qlearning", "params": {"epsilon_decay": 0.97}}],
        "training": {"episodes": episodes},
        "seeds": runs,
        "evaluation": {"every": 25, "episodes": 1, "final_episodes": 5},
        "output": str(folder / executor),
        "cache_dir": str(folder / "cache"),
        "executor": {"type": executor},
    }


def _time_runs(executor, data: dict) -> float:
    config = experiment_from_dict(data)
    out = config.output_dir
    prepare_output(config, out, resume=False, force=False)
    keys = [run.key for run in runs_of(config)]
    started = time.perf_counter()
    for _ in executor.run(config, keys, out):
        pass
    seconds = time.perf_counter() - started
    if len(finished_runs(out)) != len(keys):
        raise RuntimeError(f"{out}: not every run finished")
    return seconds


def run(quick: bool = False, jobs: int = 2) -> dict[str, float | str]:
    if importlib.util.find_spec("ray") is None:  # not imported: the local cluster stays on loopback
        message = "skipped: Ray is not installed (pip install 'langadapt[ray]')"
        print(message)
        return {"ray_vs_pool_runs_per_s": message}
    from ..experiments.executors import RayExecutor

    runs, episodes = (4, 100) if quick else (8, 300)
    with tempfile.TemporaryDirectory(prefix="langadapt-executors-bench-") as scratch:
        folder = Path(scratch)
        pool_s = _time_runs(ProcessExecutor(jobs), _experiment(folder, runs, episodes, "process"))
        with RayExecutor(ExecutorSpec(type="ray"), jobs) as executor:
            startup_s = executor.startup_seconds or 0.0
            ray_s = _time_runs(executor, _experiment(folder, runs, episodes, "ray"))
    figures = {
        "runs": float(runs),
        "jobs": float(jobs),
        "pool_runs_per_s": runs / pool_s,
        "ray_runs_per_s": runs / ray_s,
        "ray_vs_pool_runs_per_s": pool_s / ray_s,
        "ray_startup_s": startup_s,
        "ray_with_startup_vs_pool_runs_per_s": pool_s / (ray_s + startup_s),
    }
    print(f"{'executor':<10}{'runs':>6}{'seconds':>10}{'runs/s':>10}")
    print(f"{'process':<10}{runs:>6}{pool_s:>10.2f}{runs / pool_s:>10.3f}")
    print(f"{'ray':<10}{runs:>6}{ray_s:>10.2f}{runs / ray_s:>10.3f}")
    print(f"ray / process pool runs/s: {pool_s / ray_s:.3f} at {jobs} runs at a time; "
          f"Ray start-up (local cluster): {startup_s:.2f} s, not included "
          f"(with it: {pool_s / (ray_s + startup_s):.3f})")
    return figures


if __name__ == "__main__":
    run()
