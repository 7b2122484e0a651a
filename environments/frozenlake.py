"""gymnasium's FrozenLake-v1 with this project's conventions (``langadapt/FrozenLake-v0``).

The lake, its moves, slipping and reward are gymnasium's `FrozenLakeEnv` (held inside, never
re-implemented). This class adds: the observation as the cell ``(row, col)`` in a float32 Box
(like the maze, so the raw adapter and tabular agents take it as it is), every action legal in
``info["legal_moves"]``, ``info["is_success"]`` (the goal was reached), its own step limit
(FrozenLake-v1's: 100 steps on 4x4, 200 on 8x8) and clear errors for bad actions.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLakeEnv

from ._checks import (
    check_action,
    check_reset_options,
    check_step_limit,
    episode_over_error,
)

#: Moves of FrozenLake-v1, by action index.
FROZENLAKE_ACTIONS: tuple[str, ...] = ("left", "down", "right", "up")


class FrozenLakeEnv(gym.Env[np.ndarray, int]):
    """Cross a frozen lake from S to G without falling into a hole H (gymnasium's FrozenLake).

    ``map_name`` ("4x4" or "8x8") or ``desc`` (rows of S/F/H/G) choose the lake;
    ``is_slippery`` (gymnasium's default, True) moves in the intended direction with
    probability 1/3 only. Observation: float32 ``[row, col]``. Reward 1 on reaching G, else 0.
    Terminal in a hole or at the goal; truncated after ``max_steps`` steps (default: 100 on
    a 4x4 lake, 200 otherwise, as FrozenLake-v1 registers them).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        map_name: str = "4x4",
        desc: list[str] | None = None,
        is_slippery: bool = True,
        max_steps: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; expected None or "
                             "'ansi'")
        if not isinstance(is_slippery, bool):
            raise ValueError(f"is_slippery={is_slippery!r}: expected true or false")
        if desc is None and map_name not in ("4x4", "8x8"):
            raise ValueError(f"map_name={map_name!r}: expected '4x4' or '8x8' (or give desc)")
        try:
            self.lake = GymFrozenLakeEnv(render_mode=render_mode, desc=desc, map_name=map_name,
                                         is_slippery=is_slippery)
        except (ValueError, TypeError, AttributeError, IndexError) as error:
            raise ValueError(f"desc={desc!r} is not a lake (rows of S, F, H, G): {error}") from None
        self.nrow, self.ncol = int(self.lake.nrow), int(self.lake.ncol)
        default = 100 if (self.nrow, self.ncol) == (4, 4) else 200
        self.max_steps = check_step_limit("max_steps", default if max_steps is None else max_steps)
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(4)
        self.observation_space = spaces.Box(
            low=np.zeros(2, dtype=np.float32),
            high=np.array([self.nrow - 1, self.ncol - 1], dtype=np.float32),
            dtype=np.float32,
        )
        self._steps = 0
        self._active = False

    def _obs(self, state: int) -> np.ndarray:
        return np.array(divmod(int(state), self.ncol), dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Back to S (FrozenLake takes no reset options)."""
        super().reset(seed=seed)
        check_reset_options(options, ())
        self.lake.np_random = self.np_random  # one RNG: seeding this env seeds the slipping
        state, _ = self.lake.reset()
        self._steps = 0
        self._active = True
        return self._obs(state), {"legal_moves": [0, 1, 2, 3], "is_success": False}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move (0 left, 1 down, 2 right, 3 up) and return the gymnasium 5-tuple."""
        action = check_action(action, 4)
        if not self._active:
            raise episode_over_error(type(self).__name__)
        state, reward, terminated, _, _ = self.lake.step(action)
        self._steps += 1
        truncated = not terminated and self._steps >= self.max_steps
        self._active = not (terminated or truncated)
        success = bool(terminated and reward > 0)
        return self._obs(state), float(reward), bool(terminated), truncated, {
            "legal_moves": [0, 1, 2, 3], "is_success": success,
        }

    def render(self) -> str | None:
        """``ansi``: gymnasium's text picture of the lake."""
        return self.lake.render() if self.render_mode == "ansi" else None

    def close(self) -> None:
        self.lake.close()
