"""The Sailing, Maze and CartPole environments as gymnasium environments.

Importing this package registers ``langadapt/Sailing-v0``, ``langadapt/Maze-v0`` (layout
chosen by the ``maze`` argument) and ``langadapt/CartPole-v0`` with gymnasium; importing
it again (or reloading it) registers nothing twice. Every environment puts
``legal_moves`` (list of ints) and ``is_success`` (bool) in ``info`` on reset and step,
and handles its own truncation, so no TimeLimit wrapper is added.
"""

from __future__ import annotations

import gymnasium

from langadapt.environments._checks import check_action
from langadapt.environments.cartpole import CartPoleEnv
from langadapt.environments.maze import (
    ACTION_DELTAS,
    ACTION_NAMES,
    MAZE_LAYOUTS,
    MAZE_NAMES,
    MazeEnv,
)
from langadapt.environments.sailing import SailingEnv

#: gymnasium id -> entry point of every environment of this package.
ENV_IDS: dict[str, str] = {
    "langadapt/Sailing-v0": "langadapt.environments.sailing:SailingEnv",
    "langadapt/Maze-v0": "langadapt.environments.maze:MazeEnv",
    "langadapt/CartPole-v0": "langadapt.environments.cartpole:CartPoleEnv",
    "langadapt/FrozenLake-v0": "langadapt.environments.frozenlake:FrozenLakeEnv",
}


def register_environments() -> None:
    """Register the environments with gymnasium, skipping ids that are already registered."""
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


register_environments()

__all__ = [
    "ACTION_DELTAS",
    "ACTION_NAMES",
    "ENV_IDS",
    "MAZE_LAYOUTS",
    "MAZE_NAMES",
    "CartPoleEnv",
    "MazeEnv",
    "SailingEnv",
    "check_action",
    "register_environments",
]
