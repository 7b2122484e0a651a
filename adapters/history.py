"""Normalising an episode's action history: items are plain actions (elsciRL) or
``(state, action)`` pairs (`LanguageObservation`), mixed freely.
"""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

import numpy as np

__all__ = ["check_history_length", "history_pairs", "last_action"]

_FAST_TYPES = (list, tuple, deque)


def _action_of(item: Any) -> int:
    """The action of one history item (a plain action or a ``(state, action)`` pair)."""
    if isinstance(item, (tuple, list)):
        if len(item) != 2:
            raise ValueError(
                f"history item {item!r} has {len(item)} elements; expected an action or a "
                "(state, action) pair"
            )
        item = item[1]
    if isinstance(item, np.ndarray) and item.shape == ():
        item = item.item()
    if isinstance(item, bool) or not isinstance(item, numbers.Integral):
        raise ValueError(
            f"history action {item!r} is of type {type(item).__name__}; expected an int"
        )
    return int(item)


def _as_sequence(history: Iterable[Any] | None) -> Sequence[Any]:
    if history is None:
        return ()
    if isinstance(history, np.ndarray):
        return list(history) if history.ndim else [history]
    if isinstance(history, (str, bytes, Mapping, Set)) or not isinstance(history, Iterable):
        raise ValueError(
            f"episode_action_history {history!r} (type {type(history).__name__}) is not an "
            "ordered sequence; expected a list/tuple/deque of actions or (state, action) pairs"
        )
    if isinstance(history, Sequence):
        return history
    return list(history)


def last_action(history: Iterable[Any] | None) -> int | None:
    """The most recent action of the history, or ``None`` when it is empty."""
    if type(history) in _FAST_TYPES:  # the wrapper's list/deque of (state, int) pairs
        if not history:
            return None
        item = history[-1]
        if type(item) is tuple and len(item) == 2 and type(item[1]) is int:
            return item[1]
        if type(item) is int:
            return item
        return _action_of(item)
    history = _as_sequence(history)
    if len(history) == 0:
        return None
    return _action_of(history[-1])


def history_pairs(history: Iterable[Any] | None) -> list[tuple[Any | None, int]]:
    """The history as ``(state, action)`` pairs, oldest first.

    Plain-action items get ``None`` as their state (the state they were taken in is unknown).
    """
    pairs: list[tuple[Any | None, int]] = []
    for item in _as_sequence(history):
        state = item[0] if isinstance(item, (tuple, list)) and len(item) == 2 else None
        pairs.append((state, _action_of(item)))
    return pairs


def check_history_length(value: Any) -> int | None:
    """A wrapper's ``history_length``: None or an int >= 0, else ValueError."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"history_length={value!r}: expected None or an int >= 0")
    return value
