"""`OllamaBackend`: answers from an Ollama server through the official `ollama` client.

Generation options are sent as Ollama's ``temperature``, ``seed``, ``num_ctx`` and
``num_predict`` (Ollama is not reproducible without a fixed ``num_ctx``). Structured output
uses the ``format`` parameter with the JSON schema (Ollama 0.5 or newer).

Model identity: the digest the server reports for the model (``/api/tags``), read once per
backend object on first use; when the server cannot be reached then, the model name is used
(answers cached under the digest are found again once the server answers).

Faults: every transport error of the client (connection refused or reset, the server dying
mid-request, timeouts) and HTTP 5xx answers are retried, then reported with host and model.
A missing model is a `ModelNotFoundError` naming ``ollama pull <model>``.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, ClassVar

import pydantic
from pydantic import Field, PrivateAttr

from langadapt.llm.backend import LLMBackend, Transient
from langadapt.llm.errors import (
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    ModelNotFoundError,
    StructuredOutputError,
)

__all__ = ["DEFAULT_HOST", "DEFAULT_OLLAMA_MODEL", "OllamaBackend", "default_host"]

if TYPE_CHECKING:
    import ollama

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_OLLAMA_MODEL = "llama3.2"


def default_host() -> str:
    """``$OLLAMA_HOST`` when set, else ``http://127.0.0.1:11434``."""
    return os.environ.get("OLLAMA_HOST") or DEFAULT_HOST


def _tagged(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


class OllamaBackend(LLMBackend):
    """An Ollama server (local or remote); see the module docstring."""

    name: ClassVar[str] = "ollama"
    supports_concurrency: ClassVar[bool] = True

    model: str = Field(DEFAULT_OLLAMA_MODEL, min_length=1, description="Ollama model name")
    host: str = Field(default_factory=default_host, min_length=1, description="server URL")
    timeout: float = Field(120.0, gt=0, le=86_400, description="seconds per HTTP request")
    keep_alive: str | float | None = Field(
        "5m", description="how long the server keeps the model loaded after a request"
    )
    stream: bool = Field(False, description="stream the answer (NDJSON) instead of one reply")

    _client: Any = PrivateAttr(default=None)

    @property
    def client(self) -> ollama.Client:
        """The `ollama.Client` for ``host`` (created on first use). The client and httpx are
        imported then, not with this module (httpx's import draws from the global `random`)."""
        if self._client is None:
            import ollama

            self._client = ollama.Client(host=self.host, timeout=self.timeout)
        return self._client

    def where(self) -> str:
        return f"Ollama at {self.host} (model {self.model!r})"

    def structured_output_hint(self) -> str:
        return ("Ollama enforces a JSON schema given as `format` from version 0.5 on: upgrade "
                "the server (`ollama --version`), or use the llamacpp backend")

    def ollama_options(self, max_tokens: int | None = None) -> dict[str, Any]:
        """The generation options in Ollama's names."""
        return {"temperature": self.temperature, "seed": self.seed, "num_ctx": self.context_length,
                "num_predict": self.max_tokens if max_tokens is None else max_tokens}

    def _unreachable(self, error: BaseException) -> LLMUnavailableError:
        import httpx

        if isinstance(error, httpx.TimeoutException):
            return LLMUnavailableError(
                f"{self.where()} did not answer within timeout={self.timeout} s, "
                f"{self.retries + 1} attempt(s) in total; is it overloaded?")
        if isinstance(error, (ConnectionError, httpx.ConnectError)):
            return LLMUnavailableError(
                f"no Ollama server is answering at {self.host} (model {self.model!r}). Start "
                "one with `ollama serve` (https://ollama.com/download), or point OLLAMA_HOST / "
                "host at a running server, or use the llamacpp backend")
        return LLMUnavailableError(
            f"{self.where()}: the connection failed ({type(error).__name__}: {error}), "
            f"{self.retries + 1} attempt(s) in total")

    def listed_digest(self) -> str | None:
        """The digest the server lists for the model (``""`` when it gives none), or None when
        no server answers. Raises `ModelNotFoundError` when the server lacks the model."""
        import httpx
        import ollama

        try:
            listed = self.client.list()
        except (ConnectionError, httpx.HTTPError, ollama.ResponseError,
                json.JSONDecodeError, pydantic.ValidationError):
            return None
        wanted = _tagged(self.model)
        for entry in listed.models:
            if _tagged(entry.model or "") == wanted:
                return entry.digest or ""
        raise ModelNotFoundError(
            f"the Ollama server at {self.host} does not have model {self.model!r}; download it "
            f"with `ollama pull {self.model}`")

    def resolve_identity(self) -> str:
        """``sha256:<digest>`` of the model as the server lists it; the model name when the
        server cannot be reached (or lists no digest)."""
        digest = self.listed_digest()
        if not digest:
            return self.model
        return digest if digest.startswith("sha256:") else f"sha256:{digest}"

    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int) -> str:
        """One chat request."""
        import httpx
        import ollama

        try:
            return self._chat_once(messages, schema, max_tokens)
        except (ConnectionError, httpx.TransportError) as error:
            raise Transient(self._unreachable(error)) from error
        except ollama.ResponseError as error:
            status = error.status_code
            if status >= 500:
                raise Transient(LLMError(
                    f"{self.where()} answered HTTP {status}: {error.error}, "
                    f"{self.retries + 1} attempt(s) in total; giving up")) from error
            if status == 404:
                raise ModelNotFoundError(
                    f"the Ollama server at {self.host} does not have model {self.model!r} "
                    f"({error.error}); download it with `ollama pull {self.model}`") from error
            if schema is not None and "format" in str(error.error).lower():
                raise StructuredOutputError(
                    f"{self.where()} rejected the JSON schema in `format` ({error.error}); "
                    f"{self.structured_output_hint()}") from error
            raise LLMError(f"{self.where()} rejected the request: {error.error} "
                           f"(HTTP {status})") from error
        except (json.JSONDecodeError, pydantic.ValidationError, httpx.DecodingError) as error:
            raise LLMReplyError(
                f"{self.where()} sent a reply that is not a valid chat response: "
                f"{type(error).__name__}: {str(error)[:200]}") from error

    def _chat_once(self, messages: list[dict[str, str]], schema: dict | None,
                   max_tokens: int) -> str:
        kwargs: dict[str, Any] = {
            "model": self.model, "messages": messages, "keep_alive": self.keep_alive,
            "options": self.ollama_options(max_tokens), "stream": self.stream,
        }
        if schema is not None:
            kwargs["format"] = schema
        if self.stream:
            return "".join(self._content_of(chunk) for chunk in self.client.chat(**kwargs))
        return self._content_of(self.client.chat(**kwargs))

    def _content_of(self, reply: Any) -> str:
        content = getattr(getattr(reply, "message", None), "content", None)
        if content is None:
            return ""
        if not isinstance(content, str):
            raise LLMReplyError(f"{self.where()} sent message.content of type "
                                f"{type(content).__name__}; expected text")
        return content

