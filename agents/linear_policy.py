"""Linear policies on Box actions as ARS writes them, ``clip(W @ ((s - mean) / std) + b)``, and
the running observation statistics (gymnasium's ``RunningMeanStd``) they normalise with."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.wrappers.utils import RunningMeanStd

__all__ = ["LinearBoxPolicy", "ObservationStats", "clip_range"]


def clip_range(space: spaces.Box, bounds: Sequence[Sequence[float]] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of a one-dimensional Box action space, or ``bounds`` (one (low, high) per
    action dimension) instead; ValueError for infinite bounds without ``bounds``."""
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"action space is {space!r}, expected a one-dimensional Box")
    dim = space.shape[0]
    if bounds is None:
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise ValueError(
                f"action space {space} has infinite bounds: give action_bounds, the range "
                f"actions are clipped to ({dim} pairs [low, high], one per action dimension)")
        return space.low.astype(np.float64), space.high.astype(np.float64)
    pairs = np.asarray(bounds, dtype=np.float64)
    if pairs.shape != (dim, 2) or not np.isfinite(pairs).all() or \
            not (pairs[:, 0] < pairs[:, 1]).all():
        raise ValueError(f"action_bounds is {list(bounds)!r}, expected {dim} pairs [low, high] "
                         "of finite numbers with low < high")
    return pairs[:, 0].copy(), pairs[:, 1].copy()


class ObservationStats:
    """Running mean and std of the observations seen (ARS's V2 statistics)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.running = RunningMeanStd(shape=(dim,))
        self.count = 0

    def update(self, observations: np.ndarray) -> None:
        """Add a batch of observations, shape ``(n, dim)``."""
        batch = np.asarray(observations, dtype=np.float64).reshape(-1, self.dim)
        if len(batch):
            self.running.update(batch)
            self.count += len(batch)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) now: 0 and 1 before any observation."""
        if self.count == 0:
            return np.zeros(self.dim), np.ones(self.dim)
        return self.running.mean.copy(), np.sqrt(self.running.var)


class LinearBoxPolicy:
    """``clip([W | b] @ [(obs - mean) / std, 1], low, high)``, as the action space's dtype."""

    family = "linear"

    def __init__(self, weights: Sequence[Sequence[float]] | np.ndarray, low: np.ndarray,
                 high: np.ndarray, mean: np.ndarray | None = None,
                 std: np.ndarray | None = None, dtype: type = np.float32) -> None:
        w = np.asarray(weights, dtype=np.float64)
        action_dim = len(low)
        if w.ndim != 2 or w.shape[0] != action_dim or w.shape[1] < 2:
            raise ValueError(f"weights have shape {w.shape}, expected ({action_dim}, obs_dim + "
                             "1): one row per action dimension, the bias last")
        if not np.isfinite(w).all():
            raise ValueError(f"weights contain NaN or inf: {w.tolist()}")
        obs_dim = w.shape[1] - 1
        self.weights = w
        self.low, self.high, self.dtype = np.asarray(low), np.asarray(high), dtype
        self.mean = np.zeros(obs_dim) if mean is None else np.asarray(mean, dtype=np.float64)
        std = np.ones(obs_dim) if std is None else np.asarray(std, dtype=np.float64)
        self.std = std
        self._scale = np.where(std > 1e-8, 1.0 / np.where(std > 1e-8, std, 1.0), 0.0)

    def action(self, obs: np.ndarray) -> np.ndarray:
        x = (np.asarray(obs, dtype=np.float64) - self.mean) * self._scale
        a = self.weights[:, :-1] @ x + self.weights[:, -1]
        return np.clip(a, self.low, self.high).astype(self.dtype)

    def with_weights(self, weights: np.ndarray) -> LinearBoxPolicy:
        """The same clip range and statistics with other weights."""
        return LinearBoxPolicy(weights, self.low, self.high, self.mean, self.std, self.dtype)

    def to_json(self) -> list[list[float]]:
        return self.weights.tolist()
