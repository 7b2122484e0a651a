"""The two policy families an LLM (or random search) writes whole: tables and linear maps.

- :class:`Discretisation` maps an observation to one state index. With ``bins`` each
  dimension is cut into that many equal bins between its bounds (values outside go to the
  first / last bin; a value on an inner edge belongs to the bin on its right, the upper bound
  to the last bin). Without ``bins`` the observation is taken to *be* a discrete state (the
  maze's and FrozenLake's ``(row, col)``): every integer between the bounds is one value.
  The index is row-major over the dimensions (the first dimension varies slowest).
- :class:`TabularPolicy`: one action per state index.
- :class:`LinearPolicy`: ``argmax_a (W @ [obs, 1])[a]`` over the legal actions, ``W`` of shape
  ``(n_actions, obs_dim + 1)``; ties go to the lowest action.

:func:`proposal_schema` is the JSON schema a proposal must fit (used for structured output)
and :func:`parse_proposal` turns a reply into a policy or says exactly what is wrong with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from gymnasium import spaces

Family = Literal["tabular", "linear"]
#: The JSON key holding the proposal: ``{"actions": [...]}`` or ``{"weights": [[...], ...]}``.
PROPOSAL_KEYS: dict[str, str] = {"tabular": "actions", "linear": "weights"}


class Discretisation:
    """Observation -> state index in ``[0, n_states)`` (see the module docstring)."""

    def __init__(
        self,
        space: spaces.Space,
        bins: Sequence[int] | None = None,
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
        return tuple(
            int(np.searchsorted(edges, value, side="right"))
            for edges, value in zip(self.inner_edges, x, strict=True)
        )

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
        """How a state index is built, in words (for prompts)."""
        terms = " + ".join(
            f"i{d}*{int(r)}" if r > 1 else f"i{d}" for d, r in enumerate(self._radix)
        )
        lines = [f"There are {self.n_states} states; state = {terms}, where"]
        for d in range(self.dims):
            if self.discrete:
                offset = f" - {self.low[d]:g}" if self.low[d] else ""
                lines.append(f"- i{d} = {names[d]}{offset} (0 to {int(self.sizes[d]) - 1})")
                continue
            inner = self.inner_edges[d].tolist()
            ranges = ", ".join(_bin_range(k, inner) for k in range(len(inner) + 1))
            lines.append(f"- i{d} is the bin of {names[d]} ({ranges})")
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


class TabularPolicy:
    """One action per state index; an illegal table action falls back to the lowest legal one."""

    family: Family = "tabular"

    def __init__(self, table: Sequence[int] | np.ndarray, n_actions: int) -> None:
        table = np.asarray(table)
        if table.ndim != 1 or table.size == 0 or not np.issubdtype(table.dtype, np.integer):
            raise ValueError(f"table is {table!r}, expected a non-empty 1-d array of ints")
        if table.min() < 0 or table.max() >= n_actions:
            raise ValueError(f"table has actions outside [0, {n_actions}): {table.tolist()}")
        self.table = table.astype(np.int64)
        self.n_actions = n_actions

    def action(self, state: int, legal: np.ndarray) -> tuple[int, bool]:
        """(action, whether the table's own action was legal) in state index ``state``."""
        a = int(self.table[state])
        if legal[a]:
            return a, True
        return int(np.flatnonzero(legal)[0]), False

    def to_json(self) -> list[int]:
        return self.table.tolist()


class LinearPolicy:
    """``argmax_a (W @ [obs, 1])[a]`` among the legal actions (lowest action on ties)."""

    family: Family = "linear"

    def __init__(self, weights: Sequence[Sequence[float]] | np.ndarray, obs_dim: int,
                 n_actions: int) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n_actions, obs_dim + 1):
            raise ValueError(
                f"weights have shape {w.shape}, expected ({n_actions}, {obs_dim + 1}): one row "
                "per action, one column per observation dimension plus a bias"
            )
        if not np.isfinite(w).all():
            raise ValueError(f"weights contain NaN or inf: {w.tolist()}")
        self.weights = w
        self.obs_dim = obs_dim
        self.n_actions = n_actions

    def scores(self, obs: np.ndarray) -> np.ndarray:
        return self.weights[:, :-1] @ np.asarray(obs, dtype=np.float64) + self.weights[:, -1]

    def action(self, obs: np.ndarray, legal: np.ndarray) -> tuple[int, bool]:
        scores = np.where(legal, self.scores(obs), -np.inf)
        return int(np.argmax(scores)), True

    def to_json(self) -> list[list[float]]:
        return self.weights.tolist()


Policy = TabularPolicy | LinearPolicy


def proposal_schema(family: Family, n_actions: int, n_states: int = 0, obs_dim: int = 0
                    ) -> dict[str, Any]:
    """The JSON schema of a proposal: ``{"actions": [n_states ints from the action enum]}``
    or ``{"weights": n_actions rows of obs_dim + 1 numbers}``."""
    if family == "tabular":
        value: dict[str, Any] = {
            "type": "array",
            "items": {"type": "integer", "enum": list(range(n_actions))},
            "minItems": n_states,
            "maxItems": n_states,
        }
    else:
        value = {
            "type": "array",
            "items": {
                "type": "array",
                "items": {"type": "number"},
                "minItems": obs_dim + 1,
                "maxItems": obs_dim + 1,
            },
            "minItems": n_actions,
            "maxItems": n_actions,
        }
    key = PROPOSAL_KEYS[family]
    return {"type": "object", "properties": {key: value}, "required": [key],
            "additionalProperties": False}


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_proposal(
    text: str, family: Family, n_actions: int, n_states: int = 0, obs_dim: int = 0
) -> Policy:
    """The policy a reply proposes; ValueError saying what is wrong (in words a model can act
    on) for anything else: text around the JSON, a missing key, a table of the wrong length
    or with actions outside the action set, weights of the wrong shape, NaN or inf."""
    key = PROPOSAL_KEYS[family]
    try:
        value = json.loads(text.strip(), parse_constant=_no_constants)
    except (json.JSONDecodeError, ValueError) as error:
        raise ValueError(f"the reply is not one JSON object ({error})") from None
    if not isinstance(value, dict) or set(value) != {key}:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f'expected a JSON object with the single key "{key}", got {got}')
    data = value[key]
    if family == "tabular":
        if not isinstance(data, list):
            raise ValueError(f'"{key}" must be a list of {n_states} actions')
        if len(data) != n_states:
            raise ValueError(
                f'"{key}" has {len(data)} entries, expected {n_states} (one per state)')
        bad = [
            i for i, a in enumerate(data)
            if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < n_actions
        ]
        if bad:
            raise ValueError(
                f'"{key}" has entries that are not actions 0..{n_actions - 1} at states '
                f"{bad[:10]} (e.g. {data[bad[0]]!r})"
            )
        return TabularPolicy(np.asarray(data, dtype=np.int64), n_actions)
    rows = data if isinstance(data, list) else None
    if rows is None or len(rows) != n_actions or any(
        not isinstance(r, list) or len(r) != obs_dim + 1 for r in rows
    ):
        shape = [len(r) if isinstance(r, list) else None for r in rows] if rows else data
        raise ValueError(
            f'"{key}" must be {n_actions} rows of {obs_dim + 1} numbers, got {shape!r}'
        )
    flat = [v for r in rows for v in r]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
           for v in flat):
        raise ValueError(f'"{key}" must hold finite numbers only')
    return LinearPolicy(rows, obs_dim, n_actions)


def random_policy(rng: np.random.Generator, family: Family, n_actions: int, n_states: int = 0,
                  obs_dim: int = 0, scale: float = 1.0) -> Policy:
    """A uniformly random table, or weights uniform in ``[-scale, scale]``."""
    if family == "tabular":
        return TabularPolicy(rng.integers(n_actions, size=n_states), n_actions)
    return LinearPolicy(rng.uniform(-scale, scale, size=(n_actions, obs_dim + 1)), obs_dim,
                        n_actions)
