"""One discretisation of observations (equal bins, or integer cells), shared by Q-learning
and policy search; the index is row-major. See docs/agents.md (QLearningAgent)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["Discretisation"]


class Discretisation:
    """Observation -> state index in ``[0, n_states)`` (docs/agents.md)."""

    def __init__(
        self,
        space: spaces.Space,
        bins: int | Sequence[int] | None = None,
        bounds: Sequence[Sequence[float]] | None = None,
    ) -> None:
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ValueError(
                f"observation_space is {space!r}, expected a one-dimensional gymnasium Box"
            )
        dims = int(space.shape[0])
        if bounds is not None:
            if len(bounds) != dims or any(len(b) != 2 for b in bounds):
                raise ValueError(
                    f"bounds is {bounds!r}, expected {dims} (low, high) pairs, one per "
                    "observation dimension"
                )
            low = np.array([float(b[0]) for b in bounds])
            high = np.array([float(b[1]) for b in bounds])
        else:
            low = np.asarray(space.low, dtype=np.float64).copy()
            high = np.asarray(space.high, dtype=np.float64).copy()
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError(
                f"cannot discretise between low={low.tolist()} and high={high.tolist()}: "
                "expected finite bounds (give bounds: [[low, high], ...] per dimension)"
            )
        if np.any(high <= low):
            raise ValueError(
                f"bounds low={low.tolist()} high={high.tolist()}: expected high > low everywhere"
            )
        self.low, self.high = low, high
        self.discrete = bins is None
        if bins is None:
            if np.any(low != np.round(low)) or np.any(high != np.round(high)):
                raise ValueError(
                    f"bins not given, so every observation must be a discrete state, but the "
                    f"bounds low={low.tolist()} high={high.tolist()} are not integers; give "
                    "bins: [...] to discretise a continuous observation"
                )
            self.sizes = (high - low).astype(np.int64) + 1
            self.inner_edges: list[np.ndarray] = []
        else:
            if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
                bins = [int(bins)] * dims
            if len(bins) != dims or any(
                isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1
                for b in bins
            ):
                raise ValueError(
                    f"bins is {list(bins)!r}, expected {dims} positive ints (one per "
                    "observation dimension)"
                )
            self.sizes = np.asarray(bins, dtype=np.int64)
            self.inner_edges = [
                np.linspace(lo, hi, int(n) + 1)[1:-1]
                for lo, hi, n in zip(low, high, self.sizes, strict=True)
            ]
        width = max((len(e) for e in self.inner_edges), default=0)
        self._edge_rows = np.full((dims, width), np.inf)
        for d, edges in enumerate(self.inner_edges):
            self._edge_rows[d, :len(edges)] = edges
        self.dims = dims
        self.n_states = int(np.prod(self.sizes))
        self._radix = np.array(
            [int(np.prod(self.sizes[i + 1 :])) for i in range(dims)], dtype=np.int64
        )

    def bin_indices(self, obs: Any) -> tuple[int, ...]:
        """The per-dimension bin (or value) index of ``obs``; ValueError for a bad observation."""
        x = np.asarray(obs, dtype=np.float64).reshape(-1)
        if x.shape != (self.dims,) or not np.isfinite(x).all():
            raise ValueError(f"observation is {obs!r}, expected {self.dims} finite numbers")
        if self.discrete:
            rounded = np.round(x)
            if np.any(rounded != x) or np.any(x < self.low) or np.any(x > self.high):
                raise ValueError(
                    f"observation {x.tolist()} is not a discrete state: expected integers "
                    f"between {self.low.tolist()} and {self.high.tolist()} (give bins to "
                    "discretise a continuous observation)"
                )
            return tuple(int(v) for v in (rounded - self.low).astype(np.int64))
        return tuple(self.bins_of(x).tolist())

    def bins_of(self, x: np.ndarray) -> np.ndarray:
        """The bin indices of a checked, flat float observation (``bins`` given): equal-width
        bins (compared with the inner edges themselves, so a value is never put on the wrong
        side of an edge by rounding), the values outside in the first and last."""
        # the number of a dimension's inner edges at or below its value (rows padded with inf)
        return (self._edge_rows <= x[:, None]).sum(axis=1)

    def index(self, obs: Any) -> int:
        """The state index of ``obs`` in ``[0, n_states)``."""
        return int(np.dot(self.bin_indices(obs), self._radix))

    def unravel(self, state: int) -> tuple[int, ...]:
        """The per-dimension indices of a state index (inverse of the row-major index)."""
        if not 0 <= state < self.n_states:
            raise ValueError(f"state is {state!r}, expected an int in [0, {self.n_states})")
        return tuple(int(v) for v in np.unravel_index(state, tuple(self.sizes)))

    def representative(self, state: int) -> np.ndarray:
        """An observation inside the state (bin centres; the value itself when discrete)."""
        idx = np.asarray(self.unravel(state))
        if self.discrete:
            return self.low + idx
        width = (self.high - self.low) / self.sizes
        return self.low + (idx + 0.5) * width

    def layout(self, names: Sequence[str]) -> str:
        """How a state index is built, in words (for prompts); one-bin dimensions are named
        once as not used."""
        used = [d for d in range(self.dims) if self.sizes[d] > 1]
        terms = " + ".join(
            f"i{d}*{int(self._radix[d])}" if self._radix[d] > 1 else f"i{d}" for d in used
        ) or "0"
        lines = [f"There are {self.n_states} states; state = {terms}, where"]
        for d in used:
            if self.discrete:
                offset = f" - {self.low[d]:g}" if self.low[d] else ""
                lines.append(f"- i{d} = {names[d]}{offset} (0 to {int(self.sizes[d]) - 1})")
                continue
            inner = self.inner_edges[d].tolist()
            ranges = ", ".join(_bin_range(k, inner) for k in range(len(inner) + 1))
            lines.append(f"- i{d} is the bin of {names[d]} ({ranges})")
        unused = [names[d] for d in range(self.dims) if self.sizes[d] == 1]
        if unused:
            lines.append(f"Not used (one bin each): {', '.join(unused)}.")
        return "\n".join(lines)


def _bin_range(k: int, inner: list[float]) -> str:
    """Bin ``k`` of a dimension with these inner edges, in words."""
    if not inner:
        return "0: any value"
    if k == 0:
        return f"0: below {inner[0]:.3g}"
    if k == len(inner):
        return f"{k}: {inner[-1]:.3g} and above"
    return f"{k}: {inner[k - 1]:.3g} to {inner[k]:.3g}"


