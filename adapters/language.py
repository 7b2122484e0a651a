"""LanguageAdapter: the environment's describer, then the encoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from langadapt.adapters.base import BaseAdapter, env_spaces
from langadapt.adapters.describers import Describer, describer_for
from langadapt.adapters.embedding_cache import EmbeddingCache
from langadapt.adapters.encoder import MiniLMEncoder
from langadapt.adapters.history import last_action

__all__ = ["LanguageAdapter", "LanguageAdapterSettings"]


class LanguageAdapterSettings(BaseModel):
    """Settings of :class:`LanguageAdapter` (what ``adapters.make("language", env, ...)``
    accepts besides the ``describer``/``encoder``/``cache`` objects)."""

    model_config = ConfigDict(extra="forbid")

    encoder_name: str | None = Field(
        default=None, description="sentence-transformers model name or path; None = MiniLM"
    )
    cache_path: str | None = Field(
        default=None, description="SQLite file of the persistent embedding cache; None = memory"
    )
    cache_capacity: int = Field(default=20_000, ge=1, description="vectors kept in memory")
    memo_capacity: int = Field(default=100_000, ge=0, description="memo entries kept")
    describer_options: dict[str, Any] = Field(
        default_factory=dict, description="options for describer_for(env, **options)"
    )


class LanguageAdapter(BaseAdapter):
    """State -> the environment's describer -> sentence -> encoder -> float32 vector.

    ``env``: the environment (instance or gymnasium id; its ``unwrapped`` is read).
    ``describer``: a :class:`~adapters.describers.Describer` (default
    ``describer_for(env, **describer_options)``). ``encoder`` / ``cache``: objects to
    share between adapters (default: the process-wide encoder and a new cache).
    Other settings: :class:`LanguageAdapterSettings`.
    """

    kind = "language"

    def __init__(
        self,
        env: Any,
        describer: Describer | None = None,
        encoder: MiniLMEncoder | None = None,
        cache: EmbeddingCache | None = None,
        **settings: Any,
    ) -> None:
        if isinstance(env, str):
            from langadapt.adapters.describers import _resolve_env

            env = _resolve_env(env)
        self.settings = LanguageAdapterSettings(**settings)
        if describer is None:
            describer = describer_for(env, **self.settings.describer_options)
        elif self.settings.describer_options:
            raise ValueError("pass describer= or describer_options=, not both")
        if not callable(describer):
            raise ValueError(f"describer={describer!r}: expected a Describer")
        self.describer = describer
        space, n_actions = env_spaces(env)
        uses_last = bool(getattr(describer, "uses_last_action", False))
        #: Whether the describer is given the last action (a plain function is not).
        self.uses_last_action = uses_last
        super().__init__(
            space,
            n_actions,
            encoder=encoder,
            encoder_name=self.settings.encoder_name,
            cache=cache,
            cache_path=self.settings.cache_path,
            cache_capacity=self.settings.cache_capacity,
            memo_capacity=self.settings.memo_capacity,
            history_key=last_action if uses_last else None,
        )

    def describe_one(
        self, state: np.ndarray, legal_moves: tuple[int, ...], history: Sequence[Any]
    ) -> str:
        """The describer's sentence (the last action passed when the describer uses it)."""
        action = last_action(history) if self.uses_last_action else None
        return self.describer(state, legal_moves, action)
