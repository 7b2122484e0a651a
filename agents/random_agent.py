"""The baseline: an agent that picks uniformly among the legal moves and learns nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict

from langadapt.agents.base import Agent, rng_state, set_rng_state


class RandomConfig(BaseModel):
    """The random agent has no hyperparameters; the model exists to reject unknown ones."""

    model_config = ConfigDict(extra="forbid")


class RandomAgent(Agent):
    """Uniform over the legal moves, with its own seeded RNG."""

    kind = "random"
    config_model = RandomConfig

    def act(self, obs: Any, legal_moves: Sequence[int] | None = None, explore: bool = True) -> int:
        """A uniformly random legal action (``explore`` makes no difference)."""
        if isinstance(self.observation_space, spaces.Box):
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
        if isinstance(self.observation_space, spaces.Box):
            self.check_obs(obs)
            self.check_obs(next_obs)
        self.check_action(action)
        self.check_transition(reward, terminated, truncated)

    def save(self, path: str | Path) -> None:
        """Write kind, shapes and RNG state as JSON."""
        Path(path).write_text(json.dumps({"header": self._header(), "rng": rng_state(self.rng)}))

    def load(self, path: str | Path) -> None:
        """Restore the RNG state; ValueError if the file is for another agent or shape."""
        header, payload = self.read_checked(path)
        set_rng_state(self.rng, payload["rng"])
