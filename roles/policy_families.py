"""The policy families a proposer writes whole: :class:`TabularPolicy` and :class:`LinearPolicy`
(a :class:`~langadapt.agents.LinearBoxPolicy` on Box actions), the proposal schema and its
parser. See docs/policy-search.md."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..agents import LinearBoxPolicy

Family = Literal["tabular", "linear"]
#: The JSON key holding the proposal: ``{"actions": [...]}`` or ``{"weights": [[...], ...]}``.
PROPOSAL_KEYS: dict[str, str] = {"tabular": "actions", "linear": "weights"}


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


Policy = TabularPolicy | LinearPolicy | LinearBoxPolicy


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
    except RecursionError:
        raise ValueError("the reply nests lists or objects too deeply to be a policy") from None
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
