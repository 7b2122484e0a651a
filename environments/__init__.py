"""The environments and their language specs (docs/environments.md).

Importing it registers ``langadapt/Sailing-v0``, ``Maze-v0``, ``CartPole-v0``,
``FrozenLake-v0`` and ``FrozenLakeMaps-v0`` with gymnasium (once). Each puts ``legal_moves``
and ``is_success`` in ``info`` and truncates its own episodes.
"""

from __future__ import annotations

import gymnasium

from ._checks import check_action
from .cartpole import CartPoleBins, CartPoleDescriber, CartPoleEnv, CartPoleSteps
from .continuous import (
    InvertedPendulumDescriber,
    MountainCarContinuousDescriber,
    PendulumDescriber,
)
from .frozenlake import (
    FROZENLAKE_ACTIONS,
    FrozenLakeDescriber,
    FrozenLakeEnv,
    FrozenLakeMapsDescriber,
    FrozenLakeMapsEnv,
)
from .language import (
    Describer,
    LanguageSpec,
    LanguageSpecError,
    bridged_minigrid_hint,
    check_legal_moves,
    language_for,
    register_language,
    unwrap_env,
)
from .maze import (
    ACTION_DELTAS,
    ACTION_NAMES,
    MAZE_LAYOUTS,
    MAZE_NAMES,
    MazeDescriber,
    MazeEnv,
    bfs_distances,
)
from .minigrid import MiniGridBridge, MiniGridNotInstalled, make_minigrid
from .sailing import SailingBins, SailingDescriber, SailingEnv
from .toy_text import CliffWalkingDescriber, TaxiDescriber

#: gymnasium id -> entry point of every environment of this package.
ENV_IDS: dict[str, str] = {
    "langadapt/Sailing-v0": "langadapt.environments.sailing:SailingEnv",
    "langadapt/Maze-v0": "langadapt.environments.maze:MazeEnv",
    "langadapt/CartPole-v0": "langadapt.environments.cartpole:CartPoleEnv",
    "langadapt/FrozenLake-v0": "langadapt.environments.frozenlake:FrozenLakeEnv",
    "langadapt/FrozenLakeMaps-v0": "langadapt.environments.frozenlake:FrozenLakeMapsEnv",
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
    "FROZENLAKE_ACTIONS",
    "MAZE_LAYOUTS",
    "MAZE_NAMES",
    "CartPoleBins",
    "CartPoleDescriber",
    "CartPoleEnv",
    "CartPoleSteps",
    "CliffWalkingDescriber",
    "Describer",
    "FrozenLakeDescriber",
    "FrozenLakeEnv",
    "FrozenLakeMapsEnv",
    "FrozenLakeMapsDescriber",
    "InvertedPendulumDescriber",
    "LanguageSpec",
    "LanguageSpecError",
    "MazeDescriber",
    "MazeEnv",
    "MiniGridBridge",
    "MiniGridNotInstalled",
    "MountainCarContinuousDescriber",
    "PendulumDescriber",
    "SailingBins",
    "SailingDescriber",
    "SailingEnv",
    "TaxiDescriber",
    "bfs_distances",
    "bridged_minigrid_hint",
    "check_action",
    "check_legal_moves",
    "language_for",
    "make_minigrid",
    "register_language",
    "register_environments",
    "unwrap_env",
]
