"""Oracles: non-LLM references for advice and potentials, planning on the environment's full
state (:func:`oracle_for`, :func:`register_oracle`, :class:`MazeOracle`).
See docs/llm-in-the-loop.md."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ..environments import ACTION_DELTAS, MazeEnv, bfs_distances

__all__ = ["MazeOracle", "Oracle", "oracle_for", "register_oracle"]


class Oracle(Protocol):
    """What the advisor (``source: oracle``) and reward shaping (``potential: oracle``) use."""

    def best_move(self, env: Any, legal_moves: Sequence[int]) -> int:
        """A legal move on a shortest plan from the environment's current state."""

    def potential(self, env: Any) -> float:
        """Minus the remaining plan length from the current state, scaled into [-1, 0]."""


class MazeOracle:
    """Shortest-path distances to the goal of a maze (an environment with grid and goal)."""

    def __init__(self, grid: Any, goal: Sequence[int]) -> None:
        self.distance: dict[tuple[int, int], int] = bfs_distances(np.asarray(grid), tuple(goal))
        self.d_max = max(self.distance.values()) or 1

    def best_move(self, env: Any, legal_moves: Sequence[int]) -> int:
        """The first of the legal moves whose target cell is nearest the goal."""
        return self.best_move_at(env.cell, legal_moves)

    def potential(self, env: Any) -> float:
        return self.potential_at(env.cell)

    def best_move_at(self, cell: Sequence[float], moves: Sequence[int]) -> int:
        """:meth:`best_move` for a given cell."""
        row, col = int(cell[0]), int(cell[1])
        far = len(self.distance) + 1
        return min(moves, key=lambda a: self.distance.get(
            (row + ACTION_DELTAS[a][0], col + ACTION_DELTAS[a][1]), far))

    def potential_at(self, cell: Sequence[float]) -> float:
        """``-d(cell) / d_max``: 0 at the goal, -1 at the farthest reachable cell; ValueError
        for a cell that cannot reach the goal."""
        key = (int(cell[0]), int(cell[1]))
        if key not in self.distance:
            raise ValueError(f"state {list(cell)!r} is not a cell that can reach the goal")
        return -self.distance[key] / self.d_max


OracleFactory = Callable[[Any], Oracle]
_ORACLES: list[tuple[type, OracleFactory]] = []


def register_oracle(env_type: type, factory: OracleFactory) -> None:
    """Use ``factory(env) -> Oracle`` for environments of class ``env_type`` (and its
    subclasses); ``env`` is the unwrapped environment. A later registration replaces one for
    the same class."""
    if not isinstance(env_type, type) or not callable(factory):
        raise ValueError(f"register_oracle({env_type!r}, {factory!r}): expected an environment "
                         "class and a callable env -> Oracle")
    _ORACLES[:] = [(t, f) for t, f in _ORACLES if t is not env_type]
    _ORACLES.append((env_type, factory))


def oracle_for(env: Any, role: str = "oracle") -> Oracle:
    """The oracle of ``env`` (wrapped or not); ValueError naming ``role``, the environment
    and the environments that have an oracle."""
    base = getattr(env, "unwrapped", env)
    for env_type, factory in reversed(_ORACLES):
        if isinstance(base, env_type):
            return factory(base)
    known = ", ".join(t.__name__ for t, _ in _ORACLES)
    name = getattr(getattr(base, "spec", None), "id", None) or type(base).__name__
    raise ValueError(f"{role}: no oracle can plan on {name}; oracles exist for: {known}")


register_oracle(MazeEnv, lambda env: MazeOracle(env.grid, env.goal))
