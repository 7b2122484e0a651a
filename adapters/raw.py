"""RawAdapter: the raw observation as a float32 vector (the baseline of every comparison)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import AdapterInput, BaseAdapter
from .representation import check_representation

__all__ = ["RawAdapter"]


class RawAdapter(BaseAdapter):
    """The environment's observation, checked, as a new float32 array; its description is the
    numbers (``"Observation: 3, 1."``). No encoder, no memo."""

    kind = "raw"
    describes_states: ClassVar[bool] = False  # its text is the numbers, not what they mean

    def __init__(self, env: Any = None, /, **settings: Any) -> None:
        check_representation(settings, "raw")
        if set(settings) - {"memory"}:
            raise ValueError(f"RawAdapter takes only memory, got {sorted(settings)}")
        super().__init__(env, memo_capacity=0, **settings)

    @property
    def observation_space(self) -> spaces.Box:
        return self.with_memory(self.frame_space)

    def observation_space_with(self, encoder: Any) -> spaces.Box:
        return self.observation_space

    @property
    def frame_space(self) -> spaces.Box:
        space = self._space
        return spaces.Box(low=space.low.astype(np.float32), high=space.high.astype(np.float32),
                          shape=space.shape, dtype=np.float32)

    def describe_one(self, state: np.ndarray, legal_moves: tuple[int, ...],
                     history: Sequence[Any]) -> str:
        return "Observation: " + ", ".join(f"{float(v):g}" for v in state.ravel()) + "."

    def adapt(self, state: Any, legal_moves: Iterable[int] = (),
              episode_action_history: Sequence[Any] = ()) -> tuple[np.ndarray, str]:
        """``(float32 copy of the state, the numbers as text)``."""
        state, legal, history = self.check_input((state, legal_moves, episode_action_history))
        return state.astype(np.float32), self.describe_one(state, legal, history)

    def adapt_many(self, inputs: Iterable[AdapterInput]) -> list[tuple[np.ndarray, str]]:
        """`adapt` of each input, in order (each checked once)."""
        return [(state.astype(np.float32), self.describe_one(state, legal, history))
                for state, legal, history in self._checked(inputs)]

    def __call__(self, state: Any, legal_moves: Iterable[int] = (),
                 episode_action_history: Sequence[Any] = (), encode: bool = True
                 ) -> np.ndarray | str:
        vector, text = self.adapt(state, legal_moves, episode_action_history)
        return vector if encode else text

    def encode_many(self, texts: Iterable[str]) -> np.ndarray:
        """Not available: the raw adapter has no text encoder (raises ValueError)."""
        raise ValueError("RawAdapter has no text encoder; its observation is the raw state "
                         "(use adapters.make('language', env) to encode text)")

    def prerender(self, inputs: Iterable[AdapterInput], progress: bool = True,
                  batch_size: int = 512) -> dict[str, int]:
        """Check the inputs; nothing needs precomputing for raw states."""
        return {"inputs": len(self._checked(inputs)), "distinct_texts": 0}
