"""The baseline: an agent that picks uniformly among the legal moves and learns nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import Agent


class RandomAgent(Agent):
    """Uniform over the legal moves, with its own seeded RNG (saved with the agent)."""

    kind = "random"

    def act(self, obs: Any, legal_moves: Sequence[int] | None = None, explore: bool = True) -> int:
        """A uniformly random legal action (``explore`` makes no difference)."""
        self.check_obs(obs)
        if legal_moves is None:
            return int(self.rng.integers(self.n_actions))
        legal = np.flatnonzero(self.legal_mask(legal_moves, "legal_moves"))
        return int(legal[self.rng.integers(legal.size)])

    def learn(
        self,
        obs: Any,
        action: int,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
        next_legal_moves: Sequence[int] | None = None,
    ) -> None:
        """Checks its inputs and learns nothing."""
        self.check_obs(obs)
        self.check_obs(next_obs)
        self.check_action(action)
        _, terminated, _ = self.check_transition(reward, terminated, truncated)
        if next_legal_moves is not None and not terminated:
            self.legal_mask(next_legal_moves, "next_legal_moves")
