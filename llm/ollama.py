"""`OllamaBackend`: an Ollama server through the official `ollama` client (docs/llm.md)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, ClassVar

import pydantic
from pydantic import Field, field_validator

from ..errors import one_line
from .backend import LLMBackend, Transient
from .errors import (
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    ModelNotFoundError,
    StructuredOutputError,
)
from .urls import check_http_url

__all__ = ["DEFAULT_HOST", "DEFAULT_OLLAMA_MODEL", "OllamaBackend", "check_host", "default_host"]

if TYPE_CHECKING:
    import ollama

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_OLLAMA_MODEL = "llama3.2"


def default_host() -> str:
    """``$OLLAMA_HOST`` when set, else ``http://127.0.0.1:11434``."""
    return os.environ.get("OLLAMA_HOST") or DEFAULT_HOST


def _tagged(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


def check_host(host: str) -> str:
    """``host`` when the ollama client can use it, else ValueError naming it."""
    check_http_url(host, "host", "http://127.0.0.1:11434", default_scheme="http")
    return host


class OllamaBackend(LLMBackend):
    """An Ollama server (local or remote)."""

    name: ClassVar[str] = "ollama"
    supports_concurrency: ClassVar[bool] = True

    model: str = Field(DEFAULT_OLLAMA_MODEL, min_length=1, description="Ollama model name")
    host: str = Field(default_factory=default_host, min_length=1, validate_default=True,
                      description="server URL")
    timeout: float = Field(120.0, gt=0, le=86_400,
                           description="seconds one attempt may take in all (not per read)")
    keep_alive: str | float | None = Field(
        "5m", description="how long the server keeps the model loaded after a request"
    )
    stream: bool = Field(False, description="stream the answer (NDJSON) instead of one reply")

    @field_validator("host")
    @classmethod
    def _host_url(cls, value: str) -> str:
        return check_host(value)

    @property
    def client(self) -> ollama.Client:
        """The `ollama.Client` for ``host`` (created on first use, kept in the runtime)."""
        return self.runtime.once("client", self._new_client)

    def _new_client(self) -> ollama.Client:
        # Imported here, not with this module: httpx's import draws from the global `random`.
        import ollama

        from .transport import DeadlineTransport

        transport = self.runtime.once("transport", DeadlineTransport)
        # Redirects are not followed: the prompt would go elsewhere and the answer be cached
        # under host (docs/llm.md, "Redirects").
        return ollama.Client(host=self.host, timeout=self.timeout, transport=transport,
                             follow_redirects=False)

    def where(self) -> str:
        return f"Ollama at {self.host} (model {self.model!r})"

    def structured_output_hint(self) -> str:
        return ("Ollama enforces a JSON schema given as `format` from version 0.5 on: upgrade "
                "the server (`ollama --version`), or use the llamacpp backend")

    def ollama_options(self, max_tokens: int | None = None, seed: int | None = None
                       ) -> dict[str, Any]:
        """The generation options in Ollama's names (``None``: the setting)."""
        return {"temperature": self.temperature, "seed": self.seed if seed is None else seed,
                "num_ctx": self.context_length,
                "num_predict": self.max_tokens if max_tokens is None else max_tokens}

    def _unreachable(self, error: BaseException, limit: str) -> LLMUnavailableError:
        import httpx  # imported with the client already (see _new_client)

        if isinstance(error, httpx.TimeoutException):
            return LLMUnavailableError(f"{self.where()} did not answer within {limit}")
        if isinstance(error, (ConnectionError, httpx.ConnectError)):
            return LLMUnavailableError(
                f"no Ollama server is answering at {self.host} (model {self.model!r}). Start "
                "one with `ollama serve` (https://ollama.com/download), or point OLLAMA_HOST / "
                "host at a running server, or use the llamacpp backend")
        return LLMUnavailableError(
            f"{self.where()}: the connection failed ({type(error).__name__}: {error})")

    def listed_digest(self, timeout: float | None = None) -> str | None:
        """The digest the server lists for the model (``""``: none), None when no server
        answers in time; `ModelNotFoundError` when the server lacks the model."""
        import httpx  # imported with the client (see _new_client)
        import ollama  # imported with the client

        client = self.client
        from .transport import ReplyTooLarge, reply_byte_cap

        # a first call's lookup counts against its deadline
        end, _ = self.attempt_end(self.timeout if timeout is None else min(timeout, self.timeout),
                                  self.call_deadline())
        try:
            with self.runtime.built("transport").until(end, reply_byte_cap(self.max_reply_chars)):
                listed = client.list()
        except (ConnectionError, httpx.HTTPError, ollama.ResponseError, ReplyTooLarge,
                json.JSONDecodeError, RecursionError, pydantic.ValidationError):
            return None
        wanted = _tagged(self.model)
        for entry in listed.models:
            if _tagged(entry.model or "") == wanted:
                return entry.digest or ""
        raise ModelNotFoundError(
            f"the Ollama server at {self.host} does not have model {self.model!r}; download it "
            f"with `ollama pull {self.model}`")

    def probe(self, timeout: float = 5.0) -> None:
        """The server's model list within ``timeout``: an `LLMUnavailableError` when no server
        answers at ``host``, `ModelNotFoundError` when it lacks the model."""
        if self.listed_digest(timeout) is None:
            raise LLMUnavailableError(
                f"no Ollama server is answering at {self.host} (model {self.model!r}) within "
                f"{timeout:g} s; start one with `ollama serve`, or point OLLAMA_HOST / host "
                "at a running server")

    def resolve_identity(self) -> str:
        """``sha256:<digest>`` the server lists, else the model name."""
        return self.identity_of(self.listed_digest())

    def identity_of(self, digest: str | None) -> str:
        """The identity for a digest `listed_digest` returned."""
        if not digest:
            return self.model
        return digest if digest.startswith("sha256:") else f"sha256:{digest}"

    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int,
                 *, seed: int | None = None, deadline: float | None = None) -> str:
        """One chat request, ended by ``timeout`` or ``deadline``, whichever comes first."""
        import httpx  # imported with the client (see _new_client)
        import ollama  # imported with the client

        from .transport import ReplyTooLarge, cause_of, reply_byte_cap, retry_after

        client = self.client
        end, limit = self.attempt_end(self.timeout, deadline)
        try:
            # a stream is read line by line: the cap bounds one line (memory), the content
            # check in _chat_once and the deadline bound the whole
            with self.runtime.built("transport").until(
                    end, reply_byte_cap(self.max_reply_chars), per_line=self.stream):
                return self._chat_once(client, messages, schema, max_tokens, seed)
        except ReplyTooLarge as error:
            raise LLMReplyError(
                f"{self.where()} sent a reply of more than {error.limit:,} bytes (the cap for "
                f"max_reply_chars={self.max_reply_chars:,}); not read further") from None
        except (ConnectionError, httpx.TransportError) as error:
            raise Transient(self._unreachable(error, limit)) from error
        except ollama.ResponseError as error:
            status = error.status_code
            if status >= 500 or status == 429:
                http_error = cause_of(error, httpx.HTTPStatusError)
                wait = retry_after(http_error and http_error.response.headers)
                asked = "" if wait is None else f" (Retry-After: {wait:g} s)"
                raise Transient(LLMError(
                    f"{self.where()} answered HTTP {status}: {one_line(error.error, 200)}{asked}"),
                    wait, server_full=status in (429, 503)) from error
            if 300 <= status < 400:
                raise LLMError(
                    f"{self.where()} answered HTTP {status}, a redirect; redirects are not "
                    "followed (the prompt would go elsewhere and its answer be cached under "
                    "host): set host to the address the server names") from error
            if status == 404:
                raise ModelNotFoundError(
                    f"the Ollama server at {self.host} does not have model {self.model!r} "
                    f"({one_line(error.error, 200)}); download it with `ollama pull {self.model}`"
                ) from error
            if schema is not None and "format" in str(error.error).lower():
                raise StructuredOutputError(
                    f"{self.where()} rejected the JSON schema in `format` "
                    f"({one_line(error.error, 200)}); {self.structured_output_hint()}") from error
            raise LLMError(f"{self.where()} rejected the request: {one_line(error.error, 200)} "
                           f"(HTTP {status})") from error
        except (json.JSONDecodeError, RecursionError, pydantic.ValidationError,
                httpx.DecodingError) as error:
            raise LLMReplyError(
                f"{self.where()} sent a reply that is not a valid chat response: "
                f"{type(error).__name__}: {str(error)[:200]}") from error

    def _chat_once(self, client: ollama.Client, messages: list[dict[str, str]],
                   schema: dict | None, max_tokens: int, seed: int | None) -> str:
        kwargs: dict[str, Any] = {
            "model": self.model, "messages": messages, "keep_alive": self.keep_alive,
            "options": self.ollama_options(max_tokens, seed), "stream": self.stream,
        }
        if schema is not None:
            kwargs["format"] = schema
        if not self.stream:
            return self._content_of(client.chat(**kwargs))
        pieces, size = [], 0
        chunks = client.chat(**kwargs)
        try:
            for chunk in chunks:
                piece = self._content_of(chunk)
                pieces.append(piece)
                size += len(piece)
                if size > self.max_reply_chars:  # stop reading: the base class refuses it
                    break
        finally:
            chunks.close()
        return "".join(pieces)

    def _content_of(self, reply: Any) -> str:
        """The reply's text ("" when none): a str, as ollama's pydantic models check."""
        return getattr(getattr(reply, "message", None), "content", None) or ""

