"""Describers of grid worlds: the maze and the frozen lakes (the interface: `.describers`)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .describers import Describer, bin_index, check_edges, join_words, number_words
from .frozenlake import FROZENLAKE_ACTIONS, TILE_CODES
from .maze import ACTION_DELTAS, ACTION_NAMES

__all__ = ["FrozenLakeDescriber", "FrozenLakeMapsDescriber", "MazeDescriber"]


# --------------------------------------------------------------------------- maze
def _cells(n: int) -> str:
    return f"{number_words(n)} cell" + ("" if n == 1 else "s")


def _offset(drow: int, dcol: int) -> str:
    """``"two cells up and one cell to the right"``."""
    parts = []
    if drow:
        parts.append(_cells(abs(drow)) + (" up" if drow < 0 else " down"))
    if dcol:
        parts.append(_cells(abs(dcol)) + (" to the left" if dcol < 0 else " to the right"))
    return " and ".join(parts)


class MazeDescriber(Describer):
    """Maze: state ``[row, col]`` on ``grid`` (1 = wall): the goal, the walls around, the legal
    moves (docs/adapters.md, "The describers")."""

    env_name = "Maze"
    state_shape = (2,)
    n_actions = 8

    def __init__(
        self,
        grid: Any,
        goal: Sequence[int],
        include_last_move: bool = False,
        distance_edges: Sequence[int] = (2, 4, 7),
    ) -> None:
        array = np.asarray(grid)
        if array.ndim != 2 or array.size == 0 or not np.isin(array, (0, 1)).all():
            raise ValueError(
                f"grid of shape {array.shape}: expected a 2-D array of 0 (free) / 1 (wall)"
            )
        self.grid = array.astype(np.int8)
        self.height, self.width = self.grid.shape
        if (
            isinstance(goal, (str, bytes))
            or not isinstance(goal, Sequence | np.ndarray)
            or len(goal) != 2
            or not all(isinstance(v, numbers.Integral) for v in goal)
        ):
            raise ValueError(f"goal={goal!r}: expected a (row, col) pair of ints")
        self.goal = (int(goal[0]), int(goal[1]))
        if not self._is_free(*self.goal):
            raise ValueError(
                f"goal={goal!r} is not a free cell of the {self.height}x{self.width} grid"
            )
        self.include_last_move = bool(include_last_move)
        self.uses_last_action = self.include_last_move
        self.distance_edges = tuple(
            int(e) for e in check_edges("distance_edges", distance_edges, 3)
        )

    def _is_free(self, row: int, col: int) -> bool:
        return 0 <= row < self.height and 0 <= col < self.width and self.grid[row, col] == 0

    def goal_sentence(self, row: int, col: int) -> str:
        """Where the goal lies from ``(row, col)``."""
        drow, dcol = self.goal[0] - row, self.goal[1] - col
        if drow == 0 and dcol == 0:
            return "You are at the goal."
        how_far = ("right next to you", "near", "a fair way off", "far away")[
            bin_index(max(abs(drow), abs(dcol)), self.distance_edges)]
        return f"The goal is {how_far}, {_offset(drow, dcol)}."

    def wall_sentence(self, row: int, col: int) -> str:
        """Which neighbouring cells are walls."""
        walls = [
            name
            for name, (dr, dc) in zip(ACTION_NAMES, ACTION_DELTAS, strict=True)
            if not self._is_free(row + dr, col + dc)
        ]
        if not walls:
            return "There are no walls around you."
        if len(walls) == 1:
            return f"There is a wall {walls[0]}."
        return f"There are walls {join_words(walls, 'and')}."

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        if not all(float(v).is_integer() for v in state):
            raise ValueError(f"Maze state {state.tolist()!r}: expected integer [row, col]")
        row, col = int(state[0]), int(state[1])
        if not self._is_free(row, col):
            raise ValueError(
                f"Maze state {[row, col]!r} is not a free cell of the {self.height}x{self.width} "
                "maze; expected the [row, col] of a free cell"
            )
        sentences = [self.goal_sentence(row, col), self.wall_sentence(row, col)]
        if legal_moves:
            names = [ACTION_NAMES[a] for a in legal_moves]
            sentences.append(f"You can move {join_words(names, 'or')}.")
        else:
            sentences.append("You cannot move.")
        if self.include_last_move:
            if last_action is None:
                sentences.append("You have not moved yet.")
            else:
                sentences.append(f"Your last move was {ACTION_NAMES[last_action]}.")
        return " ".join(sentences)


# --------------------------------------------------------------------------- frozen lake
#: (row, col) step of each FrozenLake action: 0 left, 1 down, 2 right, 3 up.
_LAKE_DELTAS = ((0, -1), (1, 0), (0, 1), (-1, 0))
_TILES = {"S": "the start", "F": "frozen ice", "H": "a hole", "G": "the goal"}


class FrozenLakeDescriber(Describer):
    """FrozenLake: state ``[row, col]`` on a lake ``desc`` (rows of S, F, H, G): the goal, the
    holes and edges around, the moves (docs/adapters.md)."""

    env_name = "FrozenLake"
    state_shape = (2,)
    n_actions = 4

    def __init__(self, desc: Sequence[str]) -> None:
        rows = [str(row.decode() if isinstance(row, bytes) else row) for row in desc]
        if not rows or len({len(r) for r in rows}) != 1 or not all(
                set(r) <= set(_TILES) for r in rows):
            raise ValueError(f"desc={desc!r}: expected equal-length rows of S, F, H and G")
        goals = [(r, c) for r, row in enumerate(rows) for c, tile in enumerate(row) if tile == "G"]
        if len(goals) != 1:
            raise ValueError(f"desc={desc!r}: expected exactly one goal G, found {len(goals)}")
        self.desc = tuple(rows)
        self.height, self.width = len(rows), len(rows[0])
        self.goal = goals[0]

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        if not all(float(v).is_integer() for v in state):
            raise ValueError(f"FrozenLake state {state.tolist()!r}: expected integer [row, col]")
        row, col = int(state[0]), int(state[1])
        if not (0 <= row < self.height and 0 <= col < self.width):
            raise ValueError(f"FrozenLake state {[row, col]!r} is outside the "
                             f"{self.height}x{self.width} lake")
        tile = self.desc[row][col]
        if tile in "HG":
            sentences = [f"You are in {_TILES[tile]}."]
        else:
            sentences = [f"The goal is {_offset(self.goal[0] - row, self.goal[1] - col)}."]
        around = []
        for name, (dr, dc) in zip(FROZENLAKE_ACTIONS, _LAKE_DELTAS, strict=True):
            r, c = row + dr, col + dc
            where = "to the " + name if name in ("left", "right") else name
            if not (0 <= r < self.height and 0 <= c < self.width):
                around.append(f"the edge of the lake {where}")
            elif self.desc[r][c] == "H":
                around.append(f"a hole {where}")
        if around:
            verb = "is" if len(around) == 1 else "are"
            sentences.append(f"There {verb} {join_words(around, 'and')}.")
        else:
            sentences.append("There is frozen ice all around you.")
        if legal_moves:
            names = [FROZENLAKE_ACTIONS[a] for a in legal_moves]
            sentences.append(f"You can move {join_words(names, 'or')}.")
        return " ".join(sentences)


class FrozenLakeMapsDescriber(Describer):
    """FrozenLake on random lakes: state ``[row, col, tile codes]``; `FrozenLakeDescriber`'s
    sentences on the lake the state carries."""

    env_name = "FrozenLake"
    n_actions = 4

    def __init__(self, size: int) -> None:
        self.size = size
        self.state_shape = (2 + size * size,)
        self._describers: dict[bytes, FrozenLakeDescriber] = {}

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        tiles = state[2:].astype(np.int64)
        key = tiles.tobytes()
        if key not in self._describers:
            letters = {code: letter for letter, code in TILE_CODES.items() if letter != "S"}
            if not set(tiles.tolist()) <= set(letters):
                raise ValueError(f"FrozenLake lake codes {sorted(set(tiles.tolist()))}: "
                                 f"expected {sorted(letters)}")
            rows = ["".join(letters[int(c)] for c in tiles[r * self.size:(r + 1) * self.size])
                    for r in range(self.size)]
            self._describers[key] = FrozenLakeDescriber(rows)
        return self._describers[key].describe(state[:2], legal_moves, last_action)
