"""`Memo`: the adapter's one memo, checked input -> ``(vector, text)``, bounded, with a
warm index.

``entries``: key -> pair (key = state bytes + legal moves as bytes, with the history key
when the text depends on it); ``by_state``: state bytes -> (legal moves, pair) of the last
remembered input with that state (only when the text ignores the history), so the warm
path is a dict hit and a list compare. Oldest entries are dropped first past ``capacity``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["Memo"]


class Memo:
    """The adapter's memo (see the module docstring)."""

    __slots__ = ("entries", "by_state", "history_key", "capacity", "dtype", "shape", "nbytes",
                 "misses")

    def __init__(self) -> None:
        self.entries: dict[Hashable, tuple[np.ndarray, str]] = {}
        self.by_state: dict[bytes, tuple[list[int], tuple[np.ndarray, str]]] = {}
        self.history_key: Callable[[Any], Hashable] | None = None
        self.capacity = 0
        self.dtype: np.dtype | None = None
        self.shape: tuple[int, ...] = ()
        self.nbytes = 0
        self.misses = 0

    def configure(self, space: spaces.Box, capacity: int,
                  history_key: Callable[[Any], Hashable] | None) -> None:
        self.dtype = np.dtype(space.dtype)
        self.shape = tuple(space.shape)
        self.nbytes = self.dtype.itemsize * int(np.prod(self.shape))
        self.capacity = capacity
        self.history_key = history_key
        self.clear()

    def key(self, state: np.ndarray, legal: tuple[int, ...], history: Any) -> Hashable:
        """The key of a checked input (legal moves as bytes when all are below 256)."""
        if all(0 <= move < 256 for move in legal):
            base: Hashable = state.tobytes() + bytes(legal)
        else:
            base = (state.tobytes(), legal)
        return base if self.history_key is None else (base, self.history_key(history))

    def put(self, key: Hashable, pair: tuple[np.ndarray, str]) -> None:
        if self.capacity == 0:
            return
        entries = self.entries
        if key not in entries and len(entries) >= self.capacity:
            oldest = next(iter(entries))
            del entries[oldest]
            split = self._split(oldest)
            if split is not None:
                entry = self.by_state.get(split[0])
                if entry is not None and entry[0] == split[1]:
                    del self.by_state[split[0]]
        entries[key] = pair
        split = self._split(key)
        if split is not None:
            self.by_state[split[0]] = (split[1], pair)

    def _split(self, key: Hashable) -> tuple[bytes, list[int]] | None:
        """(state bytes, legal moves) of a key without a history part, else None."""
        if self.history_key is not None:
            return None
        if type(key) is bytes:
            return key[: self.nbytes], list(key[self.nbytes :])
        return key[0], list(key[1])  # type: ignore[index]

    def clear(self) -> None:
        self.entries.clear()
        self.by_state.clear()
