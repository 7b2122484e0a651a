"""The LLM layer: one call to any LLM source — cached, retried, bounded, with structured
output — and `decide`, a choice among known replies, scored or generated (docs/llm.md).

    backend = make_backend({"backend": "ollama", "model": "llama3.2"})
    backend.chat(messages, schema={"type": "object", ...}, seed=7)  # JSON text valid for it
"""

from .backend import LLMBackend, Transient, check_messages
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
from .replies import (
    MAX_JSON_DEPTH,
    MAX_REPLY_CHARS,
    enumerate_replies,
    parse_json_reply,
    quote_reply,
    reply_text,
    schema_errors,
)
from .runtime import STATS_KEYS, BackendRuntime
from .scoring import Decision, decide
from .store import CacheError, SQLiteStore, open_store
from .transformers_backend import TransformersBackend

__all__ = ["BACKENDS", "MAX_JSON_DEPTH", "MAX_REPLY_CHARS", "STATS_KEYS", "BackendRuntime",
           "CacheError", "Decision", "LLMBackend", "LLMError", "LLMReplyError",
           "LLMUnavailableError", "NativeBuildError", "LlamaCppBackend", "ModelNotFoundError",
           "OllamaBackend", "OpenAIBackend", "SQLiteStore", "StructuredOutputError",
           "TransformersBackend", "Transient", "answer_key", "backend_fields", "check_gguf",
           "check_messages", "decide", "default_cache_path", "open_store", "default_gguf_path",
           "default_host", "enumerate_replies", "file_sha256", "make_backend", "parse_json_reply",
           "quote_reply", "reply_text", "schema_errors"]
