"""Errors of the LLM layer. All are `LLMError`s, itself a `RuntimeError`."""

from __future__ import annotations

__all__ = ["LLMError", "LLMReplyError", "LLMUnavailableError", "ModelNotFoundError",
           "StructuredOutputError"]


class LLMError(RuntimeError):
    """A backend could not produce an answer."""


class LLMUnavailableError(LLMError):
    """The backend cannot be reached (no server at the host, no GGUF file, breaker open)."""


class NativeBuildError(LLMUnavailableError):
    """The native LLM library cannot run on this CPU (a child process running it died with a
    signal). Never replaced by a fallback: no call of this process could succeed."""


class ModelNotFoundError(LLMError):
    """The backend is there but does not have the requested model."""


class LLMReplyError(LLMError):
    """The backend answered, but not with usable text (empty, malformed, non-text)."""


class StructuredOutputError(LLMReplyError):
    """A JSON schema was asked for and the backend cannot honour it (or its reply breaks it)."""
