"""A preallocated ring replay buffer for off-policy agents (the SB3 ``ReplayBuffer`` idea).

Every field is one numpy array allocated up front (``np.zeros`` pages are committed by the
operating system only when written, so a large, mostly empty buffer costs little memory).
A transition stores ``next_obs`` explicitly, so the final observation of a truncated
episode is kept (not the first observation of the next episode), together with the
``terminated`` flag (1.0 only for true terminal states; truncation is 0.0 so the learner
bootstraps) and the boolean mask of the actions legal in ``next_obs``. A transition whose
action came from an advisor learnt as a demonstration is marked (``demonstrations``); the
DQN learner adds a large-margin term on the marked ones (:mod:`agents.dqn`).

:meth:`ReplayBuffer.state` and :meth:`ReplayBuffer.load_state` give the stored transitions,
marks included, as named tensors (``DQNAgent.save_replay_buffer`` writes them to a file).
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
    demonstrations: torch.Tensor | None  # float32 (R, B), 1.0 = marked; None when none is


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
        self.demonstrations = np.zeros(self.capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0
        #: True once any stored next-state mask excludes an action (lets learners skip masking).
        self.has_illegal = False
        #: True once any transition was marked as a demonstration.
        self.has_demonstrations = False

    def add(
        self,
        obs: np.ndarray,
        action: int,
        reward: float,
        next_obs: np.ndarray,
        terminated: bool,
        next_mask: np.ndarray,
        demonstration: bool = False,
    ) -> None:
        """Store one transition (arrays are copied into the buffer); ``demonstration`` marks
        an advised action to be learnt as a demonstration."""
        i = self.pos
        self.obs[i] = obs
        self.next_obs[i] = next_obs
        self.actions[i, 0] = action
        self.rewards[i] = reward
        self.terminated[i] = terminated
        self.next_masks[i] = next_mask
        self.demonstrations[i] = demonstration
        self.has_demonstrations |= demonstration
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
            demonstrations=field(self.demonstrations) if self.has_demonstrations else None,
        )

    def state(self) -> tuple[dict[str, int], dict[str, torch.Tensor]]:
        """``(counters, tensors)``: the capacity, write position and size, and the stored
        rows of every field (the first ``size`` rows: a full buffer's are all of them)."""
        n = self.size
        tensors = {name: torch.from_numpy(getattr(self, name)[:n].copy()) for name in _FIELDS}
        return {"capacity": self.capacity, "pos": self.pos, "size": n}, tensors

    def load_state(self, counters: dict[str, int], tensors: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state`'s output; ValueError naming what does not fit (another
        capacity, a field of another shape) before anything is changed."""
        capacity, size, pos = (int(counters[k]) for k in ("capacity", "size", "pos"))
        if capacity != self.capacity or not 0 <= pos < capacity or not 0 <= size <= capacity:
            raise ValueError(f"saved buffer holds {capacity} transitions (size {size}, "
                             f"position {pos}), but this buffer holds {self.capacity}")
        arrays = {}
        for name in _FIELDS:
            want = (size, *getattr(self, name).shape[1:])
            if name not in tensors or tuple(tensors[name].shape) != want:
                got = tuple(tensors[name].shape) if name in tensors else "nothing"
                raise ValueError(f"saved buffer field {name!r} has shape {got}, expected {want}")
            arrays[name] = tensors[name].numpy()
        for name, array in arrays.items():
            getattr(self, name)[:size] = array
        self.size, self.pos = size, pos
        self.has_illegal = not self.next_masks[:size].all()
        self.has_demonstrations = bool(self.demonstrations[:size].any())


_FIELDS = ("obs", "next_obs", "actions", "rewards", "terminated", "next_masks", "demonstrations")
