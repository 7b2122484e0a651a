"""Benchmark scripts behind `langadapt bench` (or `make bench`), run from a checkout of the
repository: this folder is not in the installed package (setup.py leaves it out).

Each module ``<area>_bench.py`` exposes ``run(quick: bool = False) -> dict[str, float | str]``:
it measures everything it compares within one run (this machine is shared and noisy, so
only ratios measured side by side are meaningful), prints a readable table while it
goes, and returns the named figures. ``python -m langadapt.benchmarks.<area>_bench``
runs one of them on its own.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def legal_action_sequence(env: Any, steps: int, seed: int) -> list[int]:
    """Random legal actions (from ``info["legal_moves"]``) of one run from ``reset(seed=0)``,
    resetting when an episode ends: replay them with :func:`replay` so that every contender
    times the same trajectory and no action choice."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=0)
    actions = []
    for _ in range(steps):
        legal = info["legal_moves"]
        actions.append(int(legal[int(rng.integers(len(legal)))]))
        _, _, terminated, truncated, info = env.step(actions[-1])
        if terminated or truncated:
            _, info = env.reset()
    return actions


def replay(env: Any, actions: list[int]) -> float:
    """Seconds to play ``actions`` on ``env`` from ``reset(seed=0)``, resetting whenever an
    episode ends."""
    env.reset(seed=0)
    step, reset = env.step, env.reset
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = step(action)
        if terminated or truncated:
            reset()
    return time.perf_counter() - start
