"""`OllamaAdapter`: descriptions from an Ollama server, through the official `ollama` client.

The first request checks the server and the model (``POST /api/show``): nothing listening
raises `LLMUnavailableError` naming the host and how to start Ollama; an unknown model raises
`ModelNotFoundError` naming the model and ``ollama pull <model>``. Chat requests that time out
or get a 5xx answer are retried ``retries`` times with exponential backoff (``backoff`` s,
doubling, capped at ``max_backoff`` s), then reported plainly. An empty, malformed or non-text
reply is an `LLMReplyError` and nothing is cached.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, ClassVar

import httpx
import ollama
import pydantic
from pydantic import Field, PrivateAttr

from langadapt.adapters.llm.base import LLMAdapter
from langadapt.adapters.llm.errors import LLMError, LLMReplyError, LLMUnavailableError, ModelNotFoundError

logger = logging.getLogger(__name__)

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_OLLAMA_MODEL = "llama3.2"


def default_host() -> str:
    """``$OLLAMA_HOST`` when set, else ``http://127.0.0.1:11434``."""
    return os.environ.get("OLLAMA_HOST") or DEFAULT_HOST


def _start_hint(host: str) -> str:
    return (
        f"no Ollama server is answering at {host}. Start one with `ollama serve` (install it "
        "from https://ollama.com/download), or point OLLAMA_HOST / host= at a running server, "
        "or use backend='llamacpp' for the embedded model"
    )


class OllamaAdapter(LLMAdapter):
    """LLM adapter backed by an Ollama server (local or remote)."""

    backend_name: ClassVar[str] = "ollama"
    supports_concurrency: ClassVar[bool] = True

    model: str = Field(DEFAULT_OLLAMA_MODEL, min_length=1, description="Ollama model name")
    host: str = Field(default_factory=default_host, min_length=1, description="server URL")
    timeout: float = Field(120.0, gt=0, description="seconds per HTTP request")
    keep_alive: str | float | None = Field(
        "5m", description="how long the server keeps the model loaded after a request"
    )
    retries: int = Field(3, ge=0, le=20, description="retries after a timeout or 5xx")
    backoff: float = Field(0.5, ge=0, description="first retry delay in seconds (doubles)")
    max_backoff: float = Field(8.0, ge=0, description="longest retry delay in seconds")
    stream: bool = Field(False, description="stream the answer (NDJSON) instead of one reply")
    concurrency: int = Field(4, ge=1, le=64, description="parallel requests in prerender")

    _client: Any = PrivateAttr(default=None)
    _checked: bool = PrivateAttr(default=False)
    _check_lock: Any = PrivateAttr(default_factory=threading.Lock)
    _retries_done: int = PrivateAttr(default=0)

    @property
    def client(self) -> ollama.Client:
        """The `ollama.Client` for `host` (created on first use)."""
        if self._client is None:
            self._client = ollama.Client(host=self.host, timeout=self.timeout)
        return self._client

    @property
    def retries_done(self) -> int:
        """How many retries this adapter has made (timeouts and 5xx answers)."""
        return self._retries_done

    def ollama_options(self) -> dict[str, Any]:
        """The generation options in Ollama's names."""
        return {
            "temperature": self.temperature,
            "num_predict": self.max_tokens,
            "seed": self.seed,
            "num_ctx": self.context_length,
        }

    def check(self) -> None:
        """Check that the server answers and has the model (done once, before the first chat)."""
        if self._checked:
            return
        with self._check_lock:
            if self._checked:
                return
            try:
                self.client.show(self.model)
            except (ConnectionError, httpx.ConnectError) as error:
                raise LLMUnavailableError(_start_hint(self.host)) from error
            except httpx.TimeoutException as error:
                raise LLMUnavailableError(
                    f"the Ollama server at {self.host} did not answer within {self.timeout} s "
                    "(timeout=); is it overloaded or is something else listening there?"
                ) from error
            except ollama.ResponseError as error:
                if error.status_code == 404:
                    raise ModelNotFoundError(self._missing_model_message(error)) from error
                raise LLMError(
                    f"the Ollama server at {self.host} refused to show model {self.model!r}: "
                    f"{error.error} (HTTP {error.status_code})"
                ) from error
            except (json.JSONDecodeError, pydantic.ValidationError) as error:
                raise LLMUnavailableError(
                    f"the server at {self.host} does not speak Ollama's API "
                    f"(bad /api/show reply: {error})"
                ) from error
            self._checked = True

    def _missing_model_message(self, error: Any) -> str:
        return (
            f"the Ollama server at {self.host} does not have model {self.model!r} "
            f"({getattr(error, 'error', error)}); download it with `ollama pull {self.model}`"
        )

    def generate(self, system: str, user: str) -> str:
        """One chat request (system + user message); retried on timeouts and 5xx."""
        self.check()
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        attempts = self.retries + 1
        for attempt in range(attempts):
            try:
                return self._chat_once(messages)
            except (httpx.TimeoutException, ollama.ResponseError) as error:
                retryable = isinstance(error, httpx.TimeoutException) or (
                    error.status_code >= 500
                )
                if isinstance(error, ollama.ResponseError) and error.status_code == 404:
                    raise ModelNotFoundError(self._missing_model_message(error)) from error
                if not retryable:
                    raise LLMError(
                        f"Ollama at {self.host} rejected the request for model {self.model!r}: "
                        f"{error.error} (HTTP {error.status_code})"
                    ) from error
                if attempt + 1 == attempts:
                    what = (
                        f"timed out after {self.timeout} s"
                        if isinstance(error, httpx.TimeoutException)
                        else f"answered HTTP {error.status_code}: {error.error}"
                    )
                    raise LLMError(
                        f"Ollama at {self.host} (model {self.model!r}) {what}, "
                        f"{attempts} attempt(s) in total; giving up"
                    ) from error
                delay = min(self.backoff * (2**attempt), self.max_backoff)
                logger.info("Ollama request failed (%s); retry %d in %.2f s", error,
                            attempt + 1, delay)
                self._retries_done += 1
                time.sleep(delay)
            except (ConnectionError, httpx.ConnectError) as error:
                raise LLMUnavailableError(_start_hint(self.host)) from error
        raise AssertionError("unreachable")  # pragma: no cover

    def _chat_once(self, messages: list[dict[str, str]]) -> str:
        try:
            if self.stream:
                parts = []
                for chunk in self.client.chat(
                    model=self.model, messages=messages, options=self.ollama_options(),
                    keep_alive=self.keep_alive, stream=True,
                ):
                    parts.append(self._content_of(chunk))
                text = "".join(parts)
            else:
                reply = self.client.chat(
                    model=self.model, messages=messages, options=self.ollama_options(),
                    keep_alive=self.keep_alive, stream=False,
                )
                text = self._content_of(reply)
        except (json.JSONDecodeError, pydantic.ValidationError, httpx.DecodingError) as error:
            raise LLMReplyError(
                f"Ollama at {self.host} sent a reply that is not a valid chat response for "
                f"model {self.model!r}: {type(error).__name__}: {str(error)[:200]}"
            ) from error
        if not text.strip():
            raise LLMReplyError(
                f"Ollama at {self.host} returned an empty answer for model {self.model!r}"
            )
        return text

    def _content_of(self, reply: Any) -> str:
        message = getattr(reply, "message", None)
        content = getattr(message, "content", None)
        if content is None:
            return ""
        if not isinstance(content, str):
            raise LLMReplyError(
                f"Ollama at {self.host} sent message.content of type "
                f"{type(content).__name__}; expected text"
            )
        return content


def ollama_has_model(host: str, model: str, timeout: float = 2.0) -> tuple[bool, str]:
    """Whether an Ollama server at `host` answers and has `model`, with a reason."""
    client = ollama.Client(host=host, timeout=timeout)
    try:
        client.show(model)
    except (ConnectionError, httpx.ConnectError):
        return False, f"no Ollama server at {host}"
    except httpx.HTTPError as error:
        return False, f"Ollama at {host} did not answer ({type(error).__name__})"
    except ollama.ResponseError as error:
        if error.status_code == 404:
            return False, f"Ollama at {host} has no model {model!r}"
        return False, f"Ollama at {host} answered HTTP {error.status_code}"
    except (json.JSONDecodeError, pydantic.ValidationError):
        return False, f"the server at {host} does not speak Ollama's API"
    finally:
        client.close()
    return True, f"Ollama at {host} has model {model!r}"
