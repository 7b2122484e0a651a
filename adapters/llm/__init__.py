"""LLM state adapters: state -> prompt -> LLM description (cached) -> MiniLM vector.

Public names: `LLMAdapter` (the abstract base; implement ``generate``), `OllamaAdapter`,
`LlamaCppAdapter`, `make_llm_adapter`, `DescriptionCache`, the errors (`LLMError`,
`LLMUnavailableError`, `ModelNotFoundError`, `LLMReplyError`) and `DEFAULT_BASE_PROMPT`.
Importing this package registers the ``"llm"`` adapter: ``adapters.make("llm", env,
backend="ollama" | "llamacpp" | "auto", model=..., host=..., ...)``.
"""

from langadapt.adapters.llm.base import LLMAdapter
from langadapt.adapters.llm.cache import DescriptionCache, default_cache_path, description_key
from langadapt.adapters.llm.errors import LLMError, LLMReplyError, LLMUnavailableError, ModelNotFoundError
from langadapt.adapters.llm.factory import BACKENDS, make_llm_adapter
from langadapt.adapters.llm.llamacpp_adapter import LlamaCppAdapter, default_gguf_path
from langadapt.adapters.llm.ollama_adapter import OllamaAdapter, default_host
from langadapt.adapters.llm.prompts import DEFAULT_BASE_PROMPT
from langadapt.adapters.registry import register_adapter

register_adapter("llm", make_llm_adapter)

__all__ = [
    "BACKENDS",
    "DEFAULT_BASE_PROMPT",
    "DescriptionCache",
    "LLMAdapter",
    "LLMError",
    "LLMReplyError",
    "LLMUnavailableError",
    "LlamaCppAdapter",
    "ModelNotFoundError",
    "OllamaAdapter",
    "default_cache_path",
    "default_gguf_path",
    "default_host",
    "description_key",
    "make_llm_adapter",
]
