"""Language specs of gymnasium's Taxi and CliffWalking (their ``Discrete`` observation is
received as it is). See docs/environments.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.toy_text.cliffwalking import CliffWalkingEnv
from gymnasium.envs.toy_text.taxi import TaxiEnv

from .language import Describer, LanguageSpec, register_language

__all__ = ["CliffWalkingDescriber", "TaxiDescriber"]

TAXI_ACTIONS = ("south", "north", "east", "west", "pick up", "drop off")
TAXI_TASK = (
    "You drive a taxi on a 5x5 grid with four stands, R, G, Y and B. Drive to the passenger, "
    "pick them up, drive to their destination and drop them off. Actions: 0 south, 1 north, "
    "2 east, 3 west, 4 pick up, 5 drop off. Walls block some moves; a pick-up or drop-off "
    "in the wrong place costs a penalty."
)
CLIFF_ACTIONS = ("up", "right", "down", "left")
CLIFF_TASK = (
    "You walk on a 4x12 grid from the start at the bottom left to the goal at the bottom "
    "right. The cells between them on the bottom row are a cliff: stepping onto one costs a "
    "large penalty and sends you back to the start. Every step costs 1. Actions: 0 up, "
    "1 right, 2 down, 3 left."
)


def _cell(row: int, col: int) -> str:
    return f"row {row}, column {col}"


def _way(drow: int, dcol: int, down: str, up: str, right: str, left: str) -> str:
    """``"2 south and 1 west"``: the moves from one cell to another."""
    parts = ([f"{abs(drow)} {down if drow > 0 else up}"] if drow else []) + (
        [f"{abs(dcol)} {right if dcol > 0 else left}"] if dcol else [])
    return " and ".join(parts)


def _index(state: np.ndarray, size: int, env_name: str) -> int:
    value = float(state)
    if value != int(value) or not 0 <= value < size:
        raise ValueError(f"{env_name} state {value!r}: expected an integer in [0, {size - 1}]")
    return int(value)


class TaxiDescriber(Describer):
    """The taxi, the passenger, the destination and the walls beside the taxi, from
    Taxi's integer state (gymnasium's ``decode``)."""

    env_name = "Taxi"
    state_shape = ()
    n_actions = 6

    def __init__(self, env: TaxiEnv) -> None:
        self._decode = env.decode
        self._locs = [tuple(loc) for loc in env.locs]
        self._names = "RGYB"
        self._map = [row.tobytes().decode() for row in np.asarray(env.desc)]

    def _walls(self, row: int, col: int) -> list[str]:
        line = self._map[row + 1]
        walls = [name for name, char in (("east", line[2 * col + 2]), ("west", line[2 * col]))
                 if char == "|"]
        walls += ["north"] if row == 0 else []
        walls += ["south"] if row == len(self._map) - 3 else []
        return walls

    def _stand(self, index: int) -> str:
        return f"{self._names[index]} ({_cell(*self._locs[index])})"

    def describe(self, state: np.ndarray, legal_moves: tuple[int, ...],
                 last_action: int | None) -> str:
        row, col, passenger, destination = self._decode(_index(state, 500, self.env_name))
        text = f"The taxi is at {_cell(row, col)}."
        target = self._locs[destination]
        if passenger == 4:
            text += " The passenger is in the taxi."
        else:
            text += f" The passenger waits at {self._stand(passenger)}."
            target = self._locs[passenger]
        text += f" The destination is {self._stand(destination)}."
        way = _way(target[0] - row, target[1] - col, "south", "north", "east", "west")
        goal = "the destination" if passenger == 4 else "the passenger"
        text += f" {goal.capitalize()} is {way} of the taxi." if way else \
            f" The taxi is at {goal}."
        walls = self._walls(row, col)
        if walls:
            text += f" Walls block the way {' and '.join(walls)}."
        return text


class CliffWalkingDescriber(Describer):
    """The agent's cell, the way to the goal and the moves that step off the cliff."""

    env_name = "CliffWalking"
    state_shape = ()
    n_actions = 4

    def __init__(self, env: CliffWalkingEnv) -> None:
        self.rows, self.cols = (int(n) for n in env.shape)
        self.cliff = np.asarray(env._cliff, dtype=bool)  # gymnasium's own cliff cells
        self.goal = (self.rows - 1, self.cols - 1)

    def describe(self, state: np.ndarray, legal_moves: tuple[int, ...],
                 last_action: int | None) -> str:
        row, col = divmod(_index(state, self.rows * self.cols, self.env_name), self.cols)
        text = f"You are at {_cell(row, col)}."
        way = _way(self.goal[0] - row, self.goal[1] - col, "down", "up", "right", "left")
        text += f" The goal ({_cell(*self.goal)}) is {way}." if way else " You are at the goal."
        steps = ((-1, 0), (0, 1), (1, 0), (0, -1))
        over = [name for name, (dr, dc) in zip(CLIFF_ACTIONS, steps, strict=True)
                if 0 <= row + dr < self.rows and 0 <= col + dc < self.cols
                and self.cliff[row + dr, col + dc]]
        if over:
            text += f" The cliff is right next to you: moving {' or '.join(over)} falls off it."
        return text


def _taxi(env: TaxiEnv, **options: Any) -> LanguageSpec:
    return LanguageSpec(TaxiDescriber(env, **options), TAXI_ACTIONS, TAXI_TASK,
                        lambda e: np.asarray(int(e.s)))


def _cliff_walking(env: CliffWalkingEnv, **options: Any) -> LanguageSpec:
    return LanguageSpec(CliffWalkingDescriber(env, **options), CLIFF_ACTIONS, CLIFF_TASK,
                        lambda e: np.asarray(int(e.s)))


register_language(TaxiEnv, _taxi)
register_language(CliffWalkingEnv, _cliff_walking)
