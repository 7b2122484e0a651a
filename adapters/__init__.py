"""State adapters: state (+ legal moves + history) -> text -> vector.

``make(name, env, **settings)`` builds ``"raw"`` (`RawAdapter`), ``"language"``
(`LanguageAdapter`) or ``"llm"`` (`make_llm_adapter`: `OllamaAdapter` / `LlamaCppAdapter`).
Every adapter subclasses `BaseAdapter`; `LanguageObservation` is the gymnasium wrapper.
"""

from typing import Any

from langadapt.adapters.base import STAT_KEYS, AdapterInput, BaseAdapter, Memo
from langadapt.adapters.describers import (
    CartPoleBins,
    CartPoleDescriber,
    Describer,
    MazeDescriber,
    SailingBins,
    SailingDescriber,
    describer_for,
    register_describer,
)
from langadapt.adapters.embedding_cache import EmbeddingCache
from langadapt.adapters.encoder import MiniLMEncoder, get_encoder
from langadapt.adapters.history import history_pairs, last_action
from langadapt.adapters.language import LanguageAdapter
from langadapt.adapters.llm import LlamaCppAdapter, LLMAdapter, OllamaAdapter, make_llm_adapter
from langadapt.adapters.prerender import reachable_inputs
from langadapt.adapters.raw import RawAdapter
from langadapt.adapters.wrapper import LanguageObservation
from langadapt.llm import CacheError, LLMError, LLMReplyError, LLMUnavailableError

ADAPTERS: dict[str, Any] = {"raw": RawAdapter, "language": LanguageAdapter,
                            "llm": make_llm_adapter}


def available_adapters() -> list[str]:
    """The names `make` accepts."""
    return sorted(ADAPTERS)


def make(name: str, env: Any, **settings: Any) -> BaseAdapter:
    """The adapter ``name`` (raw, language, llm) for ``env`` (an instance or a gymnasium id)."""
    factory = ADAPTERS.get(name) if isinstance(name, str) else None
    if factory is None:
        raise ValueError(f"unknown adapter {name!r}; expected one of {available_adapters()}")
    return factory(env, **settings)


__all__ = [
    "ADAPTERS",
    "STAT_KEYS",
    "AdapterInput",
    "BaseAdapter",
    "CacheError",
    "CartPoleBins",
    "CartPoleDescriber",
    "Describer",
    "EmbeddingCache",
    "LLMAdapter",
    "LLMError",
    "LLMReplyError",
    "LLMUnavailableError",
    "LanguageAdapter",
    "LanguageObservation",
    "LlamaCppAdapter",
    "MazeDescriber",
    "Memo",
    "MiniLMEncoder",
    "OllamaAdapter",
    "RawAdapter",
    "SailingBins",
    "SailingDescriber",
    "available_adapters",
    "describer_for",
    "get_encoder",
    "history_pairs",
    "last_action",
    "make",
    "make_llm_adapter",
    "reachable_inputs",
    "register_describer",
]
