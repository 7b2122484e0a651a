"""LanguageAdapter: the environment's describer, then the encoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field, PrivateAttr

from ..environments import Describer, language_for
from .base import BaseAdapter
from .history import last_action

__all__ = ["LanguageAdapter"]


class LanguageAdapter(BaseAdapter):
    """State -> the environment's describer -> sentence -> encoder -> float32 vector.

    ``describer``: a `Describer` or a plain function ``(state, legal_moves, last_action) ->
    str`` (default: the describer of the environment's language spec,
    ``language_for(env, **describer_options).describer``). Other settings: those of
    `BaseAdapter` (encoder, embedding cache, memo, representation); the representation
    settings default to the language spec's ``representation`` (with a spec's describer).
    """

    kind = "language"

    describer_options: dict[str, Any] = Field(
        default_factory=dict, description="options of the language spec, e.g. include_last_move")

    _describer: Any = PrivateAttr(default=None)

    def __init__(self, env: Any = None, /, *, describer: Describer | None = None,
                 **settings: Any) -> None:
        if describer is not None and not callable(describer):
            raise ValueError(f"describer={describer!r}: expected a Describer")
        if describer is not None and settings.get("describer_options"):
            raise ValueError("pass describer= or describer_options=, not both")
        if describer is None and env is not None:  # the spec's representation, then ours
            spec = language_for(env, **settings.get("describer_options", {}))
            settings = {**spec.representation, **settings}
        super().__init__(env, **settings)
        self._describer = describer or language_for(self.env, **self.describer_options).describer
        self.clear_memo()

    @property
    def describer(self) -> Describer:
        return self._describer

    @property
    def uses_history(self) -> bool:
        """True when the describer is given the last action (a plain function is not)."""
        return bool(getattr(self._describer, "uses_last_action", False))

    def history_key(self, history: Any) -> Any:
        return last_action(history)

    def describe_one(self, state: np.ndarray, legal_moves: tuple[int, ...],
                     history: Sequence[Any]) -> str:
        """The describer's sentence (with the last action when the describer uses it)."""
        action = last_action(history) if self.uses_history else None
        return self._describer(self.env_observation(state), legal_moves, action)
