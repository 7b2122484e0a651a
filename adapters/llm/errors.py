"""Errors raised by the LLM adapters. All are `LLMError`s, itself a `RuntimeError`."""

from __future__ import annotations


class LLMError(RuntimeError):
    """An LLM backend could not produce a description."""


class LLMUnavailableError(LLMError):
    """The backend cannot be reached (nothing listening at the Ollama host, no GGUF file)."""


class ModelNotFoundError(LLMError):
    """The backend is there but does not have the requested model."""


class LLMReplyError(LLMError):
    """The backend answered, but not with usable text (empty, malformed, non-text)."""
