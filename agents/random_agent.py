"""The baseline: an agent that picks uniformly among the legal moves and learns nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import Agent


class RandomAgent(Agent):
    """Uniform over the legal moves, with its own seeded RNG (saved with the agent);
    ``learns`` is False: an experiment evaluates it without spending the training budget
    (``agents.train`` still walks the budget when called)."""

    kind = "random"
    learns = False

    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> int:
        """A uniformly random legal action (``explore`` makes no difference)."""
        if legal_moves is None:
            return int(self.rng.integers(self.n_actions))
        legal = np.flatnonzero(self.mask(legal_moves))
        return int(legal[self.rng.integers(legal.size)])

    def _learn(self, *transition: Any) -> None:
        """Learns nothing (:meth:`learn` checks the transition)."""
