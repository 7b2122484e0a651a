"""How a policy family fits the action space: :func:`check_family` and :func:`box_settings`
refuse a mismatch in one line; :class:`ActionGrid` holds the discretised actions of a table on
a Box (``action_bins`` values per dimension, evenly spaced from low to high inclusive; a table
entry is one flat index over their product, row-major like the state index). See
docs/policy-search.md."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from .policy_search_config import PolicySearchConfig


class ActionGrid:
    """Action index in ``[0, n_actions)`` <-> action vector of a one-dimensional Box."""

    def __init__(self, space: spaces.Box, bins: int | Sequence[int], low: np.ndarray,
                 high: np.ndarray) -> None:
        dims = len(low)
        sizes = [int(bins)] * dims if isinstance(bins, int) else list(bins)
        if len(sizes) != dims:
            raise ValueError(f"action_bins is {bins!r}, expected one int or {dims} ints (one "
                             "per action dimension)")
        self.levels = [np.linspace(lo, hi, n) for lo, hi, n in zip(low, high, sizes, strict=True)]
        self.sizes = sizes
        self.n_actions = int(np.prod(sizes))
        self.vectors = np.array(list(itertools.product(*self.levels)), dtype=space.dtype)

    def vector(self, index: int) -> np.ndarray:
        """The action vector of ``index`` (a copy)."""
        return self.vectors[index].copy()

    def index(self, action: np.ndarray) -> int:
        """The index of the grid vector nearest to ``action`` (per dimension)."""
        nearest = [int(np.abs(lv - a).argmin()) for lv, a in zip(self.levels, action, strict=True)]
        return int(np.ravel_multi_index(nearest, self.sizes))

    def layout(self, names: Sequence[str]) -> str:
        """The actions in words (for prompts): how an index is built and each level's value."""
        radix = [int(np.prod(self.sizes[d + 1:])) for d in range(len(self.sizes))]
        terms = " + ".join(f"j{d}*{r}" if r > 1 else f"j{d}" for d, r in enumerate(radix))
        lines = [f"{self.n_actions} action indices, each one vector of {len(names)} values: "
                 f"action = {terms}, where"]
        lines += [f"- j{d} is the value of {name} ("
                  + ", ".join(f"{k}: {v:.3g}" for k, v in enumerate(self.levels[d])) + ")"
                  for d, name in enumerate(names)]
        return "\n".join(lines)


def check_family(config: Any, action_space: spaces.Space) -> None:
    """One line naming the family and the action space when they do not fit."""
    family = (config.family if isinstance(config, PolicySearchConfig)
              else (config or {}).get("family", "tabular") if isinstance(config, dict)
              else "tabular")
    if isinstance(action_space, spaces.Discrete) or (
            isinstance(action_space, spaces.Box) and len(action_space.shape) == 1):
        return
    raise ValueError(f"family {family} does not fit action space {action_space}: policy "
                     "search writes tables or linear policies for Discrete actions or a "
                     "one-dimensional Box")


def box_settings(cfg: PolicySearchConfig, action_space: spaces.Space) -> bool:
    """Whether actions are discretised (tabular on a Box); one line for a setting that does
    not apply or a missing ``action_bins``."""
    if not isinstance(action_space, spaces.Box):
        if any(v is not None for v in (cfg.action_bounds, cfg.action_bins, cfg.normalise)):
            raise ValueError(f"action_bounds, action_bins and normalise apply to a Box action "
                             f"space, not to {action_space}")
        return False
    if cfg.family == "linear":
        if cfg.action_bins is not None:
            raise ValueError("action_bins applies to family: tabular, not to linear policies")
        return False
    if cfg.action_bins is None:
        raise ValueError(f"family tabular does not fit action space {action_space} without "
                         "action_bins: add action_bins (values per action dimension, e.g. 3) "
                         "to discretise the actions, or use family: linear")
    if cfg.normalise is not None:
        raise ValueError("normalise applies to linear policies, not to family: tabular")
    return True
