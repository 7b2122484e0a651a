"""`LanguageAdapter`: the environment's describer, then the encoder (docs/adapters.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from pydantic import Field, PrivateAttr

from ..environments import Describer, language_for
from .base import BaseAdapter, Checked
from .history import last_action

__all__ = ["LanguageAdapter"]


class LanguageAdapter(BaseAdapter):
    """State -> the describer's sentence -> encoder -> float32 vector. ``describer``: a
    `Describer` or a function ``(state, legal_moves, last_action) -> str`` (default: the
    spec's, whose ``representation`` settings are then the defaults). A `Describer` of the
    environment's shape is trusted: its checks run once, in `check_input`."""

    kind = "language"

    describer_options: dict[str, Any] = Field(
        default_factory=dict, description="options of the language spec, e.g. include_last_move")

    _describer: Any = PrivateAttr(default=None)
    _trusted: Describer | None = PrivateAttr(default=None)

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
        if isinstance(self._describer, Describer) and (
                self._describer.state_shape is None
                or (isinstance(self._env_space, spaces.Box)
                    and tuple(self._describer.state_shape) == self.state_shape)):
            self._trusted = self._describer
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

    def check_input(self, item: Any) -> Checked:
        """`BaseAdapter.check_input`, plus the trusted describer's bounds."""
        checked = super().check_input(item)
        if self._trusted is not None and self._trusted.state_shape is not None:
            self._trusted.check_bounds(checked[0])
        return checked

    def check_history(self, history: Any) -> None:
        """The last action: an int (`last_action`), of the describer's actions when trusted."""
        action = last_action(history)
        if self._trusted is not None:
            self._trusted.check_last_action(action)

    def describe_one(self, state: np.ndarray, legal_moves: tuple[int, ...],
                     history: Sequence[Any]) -> str:
        """The describer's sentence (with the last action when the describer uses it)."""
        action = last_action(history) if self.uses_history else None
        trusted = self._trusted
        if trusted is None:  # a plain function, or a describer of another shape: its checks
            return self._describer(self.env_observation(state), legal_moves, action)
        if trusted.state_shape is None:
            return trusted.describe(self.env_observation(state), legal_moves, action)
        return trusted.describe(state.astype(np.float64), legal_moves, action)

    def text_source(self) -> str:
        return getattr(self._describer, "__name__", type(self._describer).__name__)
