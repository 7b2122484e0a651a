"""Language state adapters: state (+ legal moves + history) -> text -> vector.

Public names: ``make``, ``register_adapter``, ``available_adapters``, ``RawAdapter``,
``LanguageAdapter``, ``BaseAdapter``, ``LanguageObservation``, ``MiniLMEncoder``,
``get_encoder``, ``EmbeddingCache``, ``describer_for``, ``register_describer``, the
describers, ``reachable_inputs``, ``last_action``, ``history_pairs``, and the LLM adapters
(``LLMAdapter``, ``OllamaAdapter``, ``LlamaCppAdapter``, ``make_llm_adapter``,
``DescriptionCache`` and their errors) from ``adapters.llm``.
"""

from langadapt.adapters.base import STAT_KEYS, Adapter, BaseAdapter
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
from langadapt.adapters.embedding_cache import EmbeddingCache, EmbeddingCacheError
from langadapt.adapters.encoder import MiniLMEncoder, get_encoder
from langadapt.adapters.history import history_pairs, last_action
from langadapt.adapters.language import LanguageAdapter, LanguageAdapterSettings
from langadapt.adapters.llm import (
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
from langadapt.adapters.prerender import reachable_inputs
from langadapt.adapters.raw import RawAdapter
from langadapt.adapters.registry import available_adapters, make, register_adapter
from langadapt.adapters.wrapper import LanguageObservation

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

