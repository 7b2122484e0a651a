"""The LLM layer: one call to any LLM source, cached, retried, with structured output.

    from langadapt.llm import make_backend
    backend = make_backend("llamacpp")             # the packaged SmolLM2-135M, in process
    backend = make_backend({"backend": "ollama", "model": "llama3.2"})
    backend.complete("You are terse.", "Name a colour.")            # -> str
    backend.chat(messages, schema={"type": "object", ...})          # -> JSON text valid for it
    backend.stats()                                                 # counters

Every answer is cached by (backend, model identity, options, schema, messages); see
`LLMBackend` for retries, the circuit breaker and the counters.
"""

from langadapt.llm.backend import STATS_KEYS, LLMBackend, check_messages
from langadapt.llm.cache import AnswerCache, answer_key, default_cache_path, file_sha256
from langadapt.llm.errors import (
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    ModelNotFoundError,
    StructuredOutputError,
)
from langadapt.llm.factory import BACKENDS, backend_fields, make_backend
from langadapt.llm.llamacpp import LlamaCppBackend, default_gguf_path
from langadapt.llm.ollama import OllamaBackend, default_host
from langadapt.llm.schema import schema_errors
from langadapt.llm.store import CacheError, SQLiteStore

__all__ = [
    "BACKENDS",
    "STATS_KEYS",
    "AnswerCache",
    "CacheError",
    "LLMBackend",
    "LLMError",
    "LLMReplyError",
    "LLMUnavailableError",
    "LlamaCppBackend",
    "ModelNotFoundError",
    "OllamaBackend",
    "SQLiteStore",
    "StructuredOutputError",
    "answer_key",
    "backend_fields",
    "check_messages",
    "default_cache_path",
    "default_gguf_path",
    "default_host",
    "file_sha256",
    "make_backend",
    "schema_errors",
]
