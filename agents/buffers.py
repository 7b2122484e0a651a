"""A preallocated ring replay buffer for off-policy agents (the SB3 ``ReplayBuffer`` idea).

Every field is one numpy array allocated up front (``np.zeros`` pages are committed by the
operating system only when written, so a large, mostly empty buffer costs little memory).
A transition stores ``next_obs`` explicitly, so the final observation of a truncated
episode is kept (not the first observation of the next episode), together with the
``terminated`` flag (1.0 only for true terminal states; truncation is 0.0 so the learner
bootstraps) and the boolean mask of the actions legal in ``next_obs``.

Sampling returns torch tensors that share memory with freshly gathered numpy arrays
(no extra copy, no per-transition Python objects).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class ReplayBatch(NamedTuple):
    """A batch of transitions as torch tensors (first dimension = batch)."""

    obs: torch.Tensor  # float32 (B, *obs_shape)
    actions: torch.Tensor  # int64 (B, 1)
    rewards: torch.Tensor  # float32 (B,)
    next_obs: torch.Tensor  # float32 (B, *obs_shape)
    terminated: torch.Tensor  # float32 (B,), 1.0 = terminal state, no bootstrap
    next_masks: torch.Tensor  # bool (B, n_actions), actions legal in next_obs


class ReplayBuffer:
    """Fixed-capacity FIFO store of transitions; the oldest is overwritten when full."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], n_actions: int):
        if capacity < 1:
            raise ValueError(f"capacity is {capacity}, expected a positive int")
        self.capacity = int(capacity)
        self.obs_shape = tuple(obs_shape)
        self.n_actions = int(n_actions)
        self.obs = np.zeros((self.capacity, *self.obs_shape), dtype=np.float32)
        self.next_obs = np.zeros((self.capacity, *self.obs_shape), dtype=np.float32)
        self.actions = np.zeros((self.capacity, 1), dtype=np.int64)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.float32)
        self.next_masks = np.ones((self.capacity, self.n_actions), dtype=bool)
        self.pos = 0
        self.size = 0
        #: True once any stored next-state mask excludes an action (lets learners skip masking).
        self.has_illegal = False

    def __len__(self) -> int:
        return self.size

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

    def sample_indices(self, rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform indices (with replacement) into the stored transitions."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return rng.integers(0, self.size, size=shape)

    def gather(self, indices: np.ndarray) -> ReplayBatch:
        """The transitions at ``indices`` (1-D) as a :class:`ReplayBatch`."""
        return ReplayBatch(
            obs=torch.from_numpy(self.obs[indices]),
            actions=torch.from_numpy(self.actions[indices]),
            rewards=torch.from_numpy(self.rewards[indices]),
            next_obs=torch.from_numpy(self.next_obs[indices]),
            terminated=torch.from_numpy(self.terminated[indices]),
            next_masks=torch.from_numpy(self.next_masks[indices]),
        )

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBatch:
        """A uniform random batch of ``batch_size`` transitions."""
        return self.gather(self.sample_indices(rng, batch_size))
