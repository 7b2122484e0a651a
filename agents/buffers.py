"""A preallocated ring replay buffer for off-policy agents (the SB3 ``ReplayBuffer`` idea).

Every field is one numpy array allocated up front (``np.zeros`` pages are committed by the
operating system only when written, so a large, mostly empty buffer costs little memory).
A transition stores ``next_obs`` explicitly, so the final observation of a truncated
episode is kept (not the first observation of the next episode), together with the
``terminated`` flag (1.0 only for true terminal states; truncation is 0.0 so the learner
bootstraps) and the boolean mask of the actions legal in ``next_obs``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class ReplayBatch(NamedTuple):
    """Batches of transitions as torch tensors, shaped ``(rounds, batch, ...)``."""

    obs: torch.Tensor  # float32 (R, B, obs_dim)
    actions: torch.Tensor  # int64 (R, B, 1)
    rewards: torch.Tensor  # float32 (R, B)
    next_obs: torch.Tensor  # float32 (R, B, obs_dim)
    terminated: torch.Tensor  # float32 (R, B), 1.0 = terminal state, no bootstrap
    next_masks: torch.Tensor | None  # bool (R, B, n_actions); None when all were legal


class ReplayBuffer:
    """Fixed-capacity FIFO store of transitions; the oldest is overwritten when full."""

    def __init__(self, capacity: int, obs_dim: int, n_actions: int):
        self.capacity = int(capacity)
        self.obs = np.zeros((self.capacity, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((self.capacity, obs_dim), dtype=np.float32)
        self.actions = np.zeros((self.capacity, 1), dtype=np.int64)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.float32)
        self.next_masks = np.ones((self.capacity, n_actions), dtype=bool)
        self.pos = 0
        self.size = 0
        #: True once any stored next-state mask excludes an action (lets learners skip masking).
        self.has_illegal = False

    def add(
        self,
        obs: np.ndarray,
        action: int,
        reward: float,
        next_obs: np.ndarray,
        terminated: bool,
        next_mask: np.ndarray,
    ) -> None:
        """Store one transition (arrays are copied into the buffer)."""
        i = self.pos
        self.obs[i] = obs
        self.next_obs[i] = next_obs
        self.actions[i, 0] = action
        self.rewards[i] = reward
        self.terminated[i] = terminated
        self.next_masks[i] = next_mask
        if not self.has_illegal and not next_mask.all():
            self.has_illegal = True
        self.pos = i + 1 if i + 1 < self.capacity else 0
        if self.size < self.capacity:
            self.size += 1

    def sample(
        self, rng: np.random.Generator, rounds: int, batch_size: int, device: torch.device
    ) -> ReplayBatch:
        """``rounds`` uniform batches of ``batch_size`` transitions (with replacement), drawn
        with one index draw and one gather."""
        idx = rng.integers(0, self.size, size=(rounds, batch_size))

        def field(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(array[idx]).to(device, non_blocking=True)

        return ReplayBatch(
            obs=field(self.obs),
            actions=field(self.actions),
            rewards=field(self.rewards),
            next_obs=field(self.next_obs),
            terminated=field(self.terminated),
            next_masks=field(self.next_masks) if self.has_illegal else None,
        )
