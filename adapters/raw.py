"""RawAdapter: the raw observation as a float32 vector (the baseline of every comparison)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from langadapt.adapters.base import STAT_KEYS, AdapterInput, BaseAdapter, env_spaces
from langadapt.adapters.describers import check_legal_moves

__all__ = ["RawAdapter"]


class RawAdapter:
    """The environment's observation, checked and returned as a new float32 array.

    Same call shape as the text adapters. With ``encode=False`` it returns the numbers as
    text (``"Observation: 3, 1."``), which is also what the wrapper puts in
    ``info["description"]``. ``observation_space`` is the env's Box as float32. There is
    no encoder: ``stats()`` is all zeros and :meth:`prerender` has nothing to do.
    """

    kind = "raw"

    def __init__(self, env: Any, **settings: Any) -> None:
        if settings:
            raise ValueError(f"RawAdapter takes no settings, got {sorted(settings)}; expected none")
        space, self.n_actions = env_spaces(env)
        self.state_shape: tuple[int, ...] = tuple(space.shape)
        self.observation_space = spaces.Box(
            low=space.low.astype(np.float32),
            high=space.high.astype(np.float32),
            shape=space.shape,
            dtype=np.float32,
        )
        self.state_dtype = np.dtype(np.float32)

    check_state = BaseAdapter.check_state

    def __call__(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
        encode: bool = True,
    ) -> np.ndarray | str:
        """The float32 observation (``encode=True``) or the numbers as text."""
        vector = self.check_state(state).copy()
        return vector if encode else self._text(vector)

    def adapt(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
    ) -> tuple[np.ndarray, str]:
        """``(vector, text)`` of one input."""
        vector = self.check_state(state).copy()
        return vector, self._text(vector)

    @staticmethod
    def _text(vector: np.ndarray) -> str:
        return "Observation: " + ", ".join(f"{float(v):g}" for v in vector.ravel()) + "."

    def describe(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
    ) -> str:
        """The observation's numbers as text."""
        check_legal_moves(legal_moves, self.n_actions)
        return self._text(self.check_state(state))

    def describe_many(self, items: Iterable[AdapterInput]) -> list[str]:
        """:meth:`describe` of each ``(state, legal_moves, history)`` item."""
        return [self.describe(*BaseAdapter._unpack(item)) for item in items]

    def encode_many(self, texts: Iterable[str]) -> np.ndarray:
        """Not available: the raw adapter has no text encoder (raises ValueError)."""
        raise ValueError(
            "RawAdapter has no text encoder; its observation is the raw state "
            "(use adapters.make('language', env) to encode text)"
        )

    def prerender(self, inputs: Iterable[AdapterInput], progress: bool = True) -> int:
        """Check the inputs; nothing needs precomputing for raw states. Returns 0."""
        for item in inputs:
            state, legal, _ = BaseAdapter._unpack(item)
            self.check_state(state)
            check_legal_moves(legal, self.n_actions)
        return 0

    def stats(self) -> dict[str, float | int]:
        """All counters are 0 (no LLM, no encoder)."""
        return dict.fromkeys(STAT_KEYS, 0)
