"""Enumerate the inputs an adapter can meet in a discrete environment, for prerendering.

``adapter.prerender(reachable_inputs(env))`` describes and encodes every reachable maze
cell once, so that a training run afterwards makes no encoder call.
"""

from __future__ import annotations

from typing import Any

from ..environments.maze import bfs_distances
from .base import AdapterInput

__all__ = ["reachable_inputs"]

_NEEDED = ("free_cells", "grid", "legal_moves_at", "observation_of", "start")


def reachable_inputs(env: Any, with_last_action: bool = False) -> list[AdapterInput]:
    """``(state, legal_moves, history)`` for every cell reachable from the start.

    ``env``: a discrete grid environment (instance, wrapped or not) with ``grid``,
    ``start``, ``legal_moves_at(cell)``, ``observation_of(cell)`` and ``free_cells()`` - the
    maze. Cells are found by the maze's own breadth-first search
    (:func:`environments.maze.bfs_distances`, the goal included),
    listed in row-major order. ``with_last_action``: also list each cell with every
    possible last action (``history=(action,)``), as needed when the describer mentions
    the last move (an action into a wall leaves the agent in place, so every action can
    precede every cell); the cell with an empty history is always listed.
    """
    base = getattr(env, "unwrapped", env)
    missing = [name for name in _NEEDED if not hasattr(base, name)]
    if missing:
        raise ValueError(
            f"environment {type(base).__name__} has no {missing}; reachable_inputs expected a "
            "discrete grid environment such as MazeEnv"
        )
    seen = bfs_distances(base.grid, tuple(base.start))
    n_actions = int(base.action_space.n)
    inputs: list[AdapterInput] = []
    for cell in base.free_cells():
        if cell not in seen:
            continue
        state, legal = base.observation_of(cell), base.legal_moves_at(cell)
        inputs.append((state, legal, ()))
        if with_last_action:
            inputs.extend((state, legal, (a,)) for a in range(n_actions))
    return inputs

