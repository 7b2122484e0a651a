"""``memory: {observations: K, actions: M}``: the state an agent sees carries the last K
observations (the current one first) and the last M actions, as GLAM's agents see the last 3
observations and 2 actions (docs/adapters.md, "Memory"). Past observations are the vectors
already made (no description or encoding again); the wrappers (`LanguageObservation`,
`LanguageVectorEnv`) keep one `Frames` per episode, zeros before its start.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Frames", "Memory"]


class Memory(BaseModel):
    """How much of the episode an observation carries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    observations: int = Field(1, ge=1, le=16, description="observations, the current one first")
    actions: int = Field(0, ge=0, le=16, description="last actions, the latest first (one-hot "
                         "for Discrete actions, the values for Box actions)")

    def space(self, frame: spaces.Box, actions: spaces.Space) -> spaces.Box:
        """The Box of ``observations`` frames of ``frame`` followed by ``actions`` actions."""
        low, high = np.tile(frame.low.ravel(), self.observations), \
            np.tile(frame.high.ravel(), self.observations)
        if self.actions:
            one = _action_box(actions)
            low = np.concatenate([low, np.tile(one.low, self.actions)])
            high = np.concatenate([high, np.tile(one.high, self.actions)])
        return spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)

    def action_size(self, actions: spaces.Space) -> int:
        """Values of the actions' part (after the frames)."""
        return self.actions * _action_box(actions).shape[0] if self.actions else 0


def _action_box(actions: spaces.Space) -> spaces.Box:
    """One action's values: a one-hot of a Discrete action, a Box action's own bounds."""
    if isinstance(actions, spaces.Discrete):
        return spaces.Box(0.0, 1.0, (int(actions.n),), np.float32)
    if isinstance(actions, spaces.Box):
        return spaces.Box(actions.low.ravel(), actions.high.ravel(), dtype=np.float32)
    raise ValueError(f"memory.actions: actions of {actions} cannot be remembered; expected "
                     "Discrete or Box actions (set memory.actions: 0)")


class Frames:
    """One episode's memory: `start` at a reset, `push` after each step; both return the
    observation (a new float32 array)."""

    def __init__(self, memory: Memory, frame_size: int, actions: spaces.Space) -> None:
        self.observations = np.zeros((memory.observations, frame_size), dtype=np.float32)
        self.discrete = isinstance(actions, spaces.Discrete)
        width = _action_box(actions).shape[0] if memory.actions else 0
        self.actions = np.zeros((memory.actions, width), dtype=np.float32)

    def start(self, vector: np.ndarray) -> np.ndarray:
        self.observations[:] = 0.0
        self.actions[:] = 0.0
        self.observations[0] = vector
        return self.observation()

    def push(self, vector: np.ndarray, action: object) -> np.ndarray:
        self.observations[1:] = self.observations[:-1]
        self.observations[0] = vector
        if len(self.actions):
            self.actions[1:] = self.actions[:-1]
            self.actions[0] = 0.0
            if self.discrete:
                self.actions[0, int(action)] = 1.0  # type: ignore[call-overload]
            else:
                self.actions[0] = np.ravel(action)  # type: ignore[arg-type]
        return self.observation()

    def observation(self) -> np.ndarray:
        return np.concatenate([self.observations.ravel(), self.actions.ravel()])
