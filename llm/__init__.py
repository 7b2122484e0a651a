"""The LLM layer: one call to any LLM source, cached, retried, with structured output.

    from langadapt.llm import make_backend
    backend = make_backend("llamacpp")             # the packaged SmolLM2-135M, in process
    backend = make_backend({"backend": "ollama", "model": "llama3.2"})
    backend = make_backend({"backend": "openai", "base_url": "http://127.0.0.1:8000/v1",
                            "model": "smollm2", "api_key_env": None})  # OpenAI-compatible
    backend.complete("You are terse.", "Name a colour.")            # -> str
    backend.chat(messages, schema={"type": "object", ...})          # -> JSON text valid for it
    backend.chat(messages, seed=7)                                  # this call's own seed
    backend.stats()                                                 # counters
    decide(backend, messages, schema)   # a choice among known replies: scored or generated

Every answer is cached by (backend, model identity, options incl. the call's seed, schema,
messages); see `LLMBackend` for retries (Retry-After), the deadline, reply limits, the
circuit breaker and the counters, and `BackendRuntime` for the state a backend keeps.
`parse_json_reply` is the bounded JSON parse every reply goes through.
"""

from .backend import STATS_KEYS, LLMBackend, Transient, check_messages
from .cache import answer_key, default_cache_path, file_sha256
from .errors import (
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    ModelNotFoundError,
    NativeBuildError,
    StructuredOutputError,
)
from .factory import BACKENDS, backend_fields, make_backend
from .gguf_check import check_gguf, default_gguf_path
from .llamacpp import LlamaCppBackend
from .ollama import OllamaBackend, default_host
from .openai_backend import OpenAIBackend
from .runtime import BackendRuntime
from .schema import (
    MAX_JSON_DEPTH,
    MAX_REPLY_CHARS,
    enumerate_replies,
    parse_json_reply,
    quote_reply,
    reply_text,
    schema_errors,
)
from .scoring import Decision, decide
from .store import CacheError, SQLiteStore, open_store
from .transformers_backend import TransformersBackend

__all__ = [
    "BACKENDS",
    "MAX_JSON_DEPTH",
    "MAX_REPLY_CHARS",
    "STATS_KEYS",
    "BackendRuntime",
    "CacheError",
    "Decision",
    "LLMBackend",
    "LLMError",
    "LLMReplyError",
    "LLMUnavailableError",
    "NativeBuildError",
    "LlamaCppBackend",
    "ModelNotFoundError",
    "OllamaBackend",
    "OpenAIBackend",
    "SQLiteStore",
    "StructuredOutputError",
    "TransformersBackend",
    "Transient",
    "answer_key",
    "backend_fields",
    "check_gguf",
    "check_messages",
    "decide",
    "default_cache_path",
    "open_store",
    "default_gguf_path",
    "default_host",
    "enumerate_replies",
    "file_sha256",
    "make_backend",
    "parse_json_reply",
    "quote_reply",
    "reply_text",
    "schema_errors",
]
