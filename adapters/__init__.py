"""Language state adapters: state (+ legal moves + history) -> text -> vector.

Public names: ``make``, ``register_adapter``, ``available_adapters``, ``RawAdapter``,
``LanguageAdapter``, ``BaseAdapter``, ``LanguageObservation``, ``MiniLMEncoder``,
``get_encoder``, ``EmbeddingCache``, ``describer_for``, ``register_describer``, the
describers, ``reachable_inputs``, ``last_action``, ``history_pairs``, and the LLM adapters
(``LLMAdapter``, ``OllamaAdapter``, ``LlamaCppAdapter``, ``make_llm_adapter``,
``DescriptionCache`` and their errors) from ``adapters.llm``.
"""

from adapters.base import STAT_KEYS, Adapter, BaseAdapter
from adapters.describers import (
    CartPoleBins,
    CartPoleDescriber,
    Describer,
    MazeDescriber,
    SailingBins,
    SailingDescriber,
    describer_for,
    register_describer,
)
from adapters.embedding_cache import EmbeddingCache, EmbeddingCacheError
from adapters.encoder import MiniLMEncoder, get_encoder
from adapters.history import history_pairs, last_action
from adapters.language import LanguageAdapter, LanguageAdapterSettings
from adapters.llm import (
    DescriptionCache,
    LlamaCppAdapter,
    LLMAdapter,
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    ModelNotFoundError,
    OllamaAdapter,
    make_llm_adapter,
)
from adapters.prerender import reachable_inputs
from adapters.raw import RawAdapter
from adapters.registry import available_adapters, make, register_adapter
from adapters.wrapper import LanguageObservation

register_adapter("raw", RawAdapter)
register_adapter("language", LanguageAdapter)  # "llm" is registered by adapters.llm

__all__ = [
    "Adapter",
    "BaseAdapter",
    "STAT_KEYS",
    "CartPoleBins",
    "CartPoleDescriber",
    "Describer",
    "MazeDescriber",
    "SailingBins",
    "SailingDescriber",
    "describer_for",
    "register_describer",
    "EmbeddingCache",
    "EmbeddingCacheError",
    "MiniLMEncoder",
    "get_encoder",
    "history_pairs",
    "last_action",
    "LanguageAdapter",
    "LanguageAdapterSettings",
    "reachable_inputs",
    "RawAdapter",
    "available_adapters",
    "make",
    "register_adapter",
    "LanguageObservation",
    "DescriptionCache",
    "LLMAdapter",
    "LLMError",
    "LLMReplyError",
    "LLMUnavailableError",
    "LlamaCppAdapter",
    "ModelNotFoundError",
    "OllamaAdapter",
    "make_llm_adapter",
]

