"""A preallocated ring replay buffer (SB3's ``ReplayBuffer`` idea) that keeps ``next_obs``,
terminal flags, next legal-move masks, demonstration marks (kept while they fill at most half
the buffer) and n-step returns over advised segments. See docs/agents.md, docs/llm-in-the-loop.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .base import FILE_FORMAT, FILE_VERSION, read_agent_file, write_agent_file

BUFFER_KIND = "replay-buffer"


class NStepBatch(NamedTuple):
    """n-step returns over advised segments, shaped ``(rounds, batch, ...)`` (1-step for
    unmarked transitions)."""

    returns: torch.Tensor  # float32 (R, B): discounted rewards of the segment's k steps
    discounts: torch.Tensor  # float32 (R, B): gamma ** k
    terminated: torch.Tensor  # float32 (R, B): the segment's last step ended the episode
    next_obs: torch.Tensor  # float32 (R, B, obs_dim): the state after the segment
    next_masks: torch.Tensor | None  # bool (R, B, n_actions); None when all were legal


class ReplayBatch(NamedTuple):
    """Batches of transitions as torch tensors, shaped ``(rounds, batch, ...)``."""

    obs: torch.Tensor  # float32 (R, B, obs_dim)
    actions: torch.Tensor  # int64 (R, B, 1)
    rewards: torch.Tensor  # float32 (R, B)
    next_obs: torch.Tensor  # float32 (R, B, obs_dim)
    terminated: torch.Tensor  # float32 (R, B), 1.0 = terminal state, no bootstrap
    next_masks: torch.Tensor | None  # bool (R, B, n_actions); None when all were legal
    demonstrations: torch.Tensor | None  # float32 (R, B), 1.0 = marked; None when none is
    n_step: NStepBatch | None  # with n_step > 1 and demonstrations stored


class ReplayBuffer:
    """Fixed-capacity FIFO store of transitions; the oldest is overwritten when full (marked
    ones kept while they fill at most half of it)."""

    def __init__(self, capacity: int, obs_dim: int, n_actions: int, n_step: int = 1,
                 gamma: float = 0.99):
        self.capacity = int(capacity)
        if not 1 <= n_step <= self.capacity:
            raise ValueError(f"n_step is {n_step!r}, expected 1..{self.capacity} (the capacity)")
        self.n_step, self.gamma = int(n_step), float(gamma)
        self.obs = np.zeros((self.capacity, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((self.capacity, obs_dim), dtype=np.float32)
        self.actions = np.zeros((self.capacity, 1), dtype=np.int64)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.float32)
        self.next_masks = np.ones((self.capacity, n_actions), dtype=bool)
        self.demonstrations = np.zeros(self.capacity, dtype=np.float32)
        self.marked = 0  # transitions stored marked
        self.segment_lengths = np.ones(self.capacity, dtype=np.int64)
        self._open: list[int] = []  # positions of the current segment still shorter than n
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
        demonstration: bool = False,
        truncated: bool = False,
    ) -> None:
        """Store one transition (arrays are copied into the buffer); ``demonstration`` marks
        an advised action to be learnt as a demonstration; ``terminated`` or ``truncated``
        ends the advised segment."""
        i = self._slot()
        if self.demonstrations[i]:
            self.marked -= 1
            for back in range(1, self.n_step):  # segments that ran into the slot end before it
                j = (i - back) % self.capacity
                self.segment_lengths[j] = min(self.segment_lengths[j], back)
        self.marked += demonstration
        self.obs[i] = obs
        self.next_obs[i] = next_obs
        self.actions[i, 0] = action
        self.rewards[i] = reward
        self.terminated[i] = terminated
        self.next_masks[i] = next_mask
        self.demonstrations[i] = demonstration
        if self.n_step > 1:
            self._extend_segment(i, demonstration, terminated or truncated)
        if not self.has_illegal and not next_mask.all():
            self.has_illegal = True
        self.pos = i + 1 if i + 1 < self.capacity else 0
        if self.size < self.capacity:
            self.size += 1

    @property
    def has_demonstrations(self) -> bool:
        """Whether any stored transition is marked as a demonstration."""
        return self.marked > 0

    def _slot(self) -> int:
        """Where the next transition goes: the write position, moved past kept marked
        transitions (see the module's docstring)."""
        i = self.pos
        if self.size < self.capacity or not self.demonstrations[i] \
                or self.marked > self.capacity // 2:
            return i
        unmarked = np.flatnonzero(self.demonstrations[i:] == 0)
        i = i + int(unmarked[0]) if unmarked.size else int(np.argmin(self.demonstrations))
        self._open.clear()  # the current advised segment ends at the jump
        return i

    def _extend_segment(self, i: int, demonstration: bool, episode_end: bool) -> None:
        self.segment_lengths[i] = 1
        if not demonstration:
            self._open.clear()
            return
        for j in self._open:
            self.segment_lengths[j] += 1
        self._open = [j for j in self._open if self.segment_lengths[j] < self.n_step] + [i]
        if episode_end:
            self._open.clear()

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
            n_step=self._n_step_batch(idx, device)
            if self.n_step > 1 and self.has_demonstrations else None,
        )

    def _n_step_batch(self, idx: np.ndarray, device: torch.device) -> NStepBatch:
        k = self.segment_lengths[idx]  # (R, B)
        offsets = np.arange(self.n_step)
        within = offsets < k[..., None]  # (R, B, n): the steps of each segment
        rows = (idx[..., None] + offsets) % self.capacity
        powers = self.gamma ** offsets
        returns = (self.rewards[rows] * powers * within).sum(-1, dtype=np.float32)
        last = (idx + k - 1) % self.capacity

        def tensor(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True)

        return NStepBatch(
            returns=tensor(returns),
            discounts=tensor((self.gamma ** k).astype(np.float32)),
            terminated=tensor(self.terminated[last]),
            next_obs=tensor(self.next_obs[last]),
            next_masks=tensor(self.next_masks[last]) if self.has_illegal else None,
        )

    def save(self, path: str | Path) -> None:
        """Write every stored transition, marks included, to ``path`` (the agents' file
        format: :func:`agents.base.write_agent_file`)."""
        counters, tensors = self.state()
        header = {"format": FILE_FORMAT, "version": FILE_VERSION, "kind": BUFFER_KIND,
                  "state": counters}
        write_agent_file(path, header, tensors)

    def load(self, path: str | Path) -> None:
        """Replace the contents by the file :meth:`save` wrote; ValueError naming the file
        when it is not one or does not fit this buffer (nothing is changed then)."""
        header, tensors = read_agent_file(path, most=None)  # the user's own, any size
        if header["kind"] != BUFFER_KIND:
            raise ValueError(f"{path} holds kind={header['kind']!r}, expected a replay buffer "
                             f"({BUFFER_KIND!r})")
        try:
            self.load_state(header["state"], tensors)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: {error}") from None

    def state(self) -> tuple[dict[str, int], dict[str, torch.Tensor]]:
        """``(counters, tensors)``: the capacity, write position and size, and the stored
        rows of every field (the first ``size`` rows: a full buffer's are all of them)."""
        n = self.size
        tensors = {name: torch.from_numpy(getattr(self, name)[:n].copy()) for name in _FIELDS}
        counters = {"capacity": self.capacity, "n_step": self.n_step, "pos": self.pos,
                    "size": n, "open_segment": list(self._open)}
        return counters, tensors

    def load_state(self, counters: dict[str, int], tensors: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state`'s output; ValueError naming what does not fit (another
        capacity or n_step, a field of another shape) before anything is changed."""
        capacity, size, pos = (int(counters[k]) for k in ("capacity", "size", "pos"))
        if capacity != self.capacity or not 0 <= pos < capacity or not 0 <= size <= capacity:
            raise ValueError(f"saved buffer holds {capacity} transitions (size {size}, "
                             f"position {pos}), but this buffer holds {self.capacity}")
        if int(counters["n_step"]) != self.n_step:
            raise ValueError(f"saved buffer has n_step {counters['n_step']}, but this buffer "
                             f"has n_step {self.n_step}")
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
        self._open = [int(j) for j in counters["open_segment"]]
        self.has_illegal = not self.next_masks[:size].all()
        self.marked = int(self.demonstrations[:size].sum())


_FIELDS = ("obs", "next_obs", "actions", "rewards", "terminated", "next_masks", "demonstrations",
           "segment_lengths")
