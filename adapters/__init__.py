"""State adapters: state (+ legal moves + history) -> text -> vector (docs/adapters.md).

``make(name, env, **settings)`` builds ``raw``, ``language`` or ``llm``; each subclasses
`BaseAdapter`; `LanguageObservation` is the gymnasium wrapper.
"""

from typing import Any

from ..llm import CacheError, LLMError, LLMReplyError, LLMUnavailableError
from .base import STAT_KEYS, AdapterInput, BaseAdapter, Memo
from .embedding_cache import EmbeddingCache
from .encoder import MiniLMEncoder, get_encoder
from .history import history_pairs, last_action
from .language import LanguageAdapter
from .llm import LlamaCppAdapter, LLMAdapter, OllamaAdapter, make_llm_adapter
from .prerender import reachable_inputs
from .raw import RawAdapter
from .wrapper import LanguageObservation

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


__all__ = ["ADAPTERS", "STAT_KEYS", "AdapterInput", "BaseAdapter", "CacheError", "EmbeddingCache",
           "LLMAdapter", "LLMError", "LLMReplyError", "LLMUnavailableError", "LanguageAdapter",
           "LanguageObservation", "LlamaCppAdapter", "Memo", "MiniLMEncoder", "OllamaAdapter",
           "RawAdapter", "available_adapters", "get_encoder", "history_pairs", "last_action",
           "make", "make_llm_adapter", "reachable_inputs"]
