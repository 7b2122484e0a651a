"""`LLMBackend`: the base of every LLM source — cache, retries, circuit breaker, counters.

A backend is a pydantic model (its settings, validated on construction and then fixed).
``chat(messages, schema=None, max_tokens=None) -> str`` is the one call; ``complete(system,
user, ...)`` is its two-message form. A subclass supplies three things:

- ``generate(messages, schema, max_tokens) -> str``: one attempt; raise `Transient` for a
  fault worth retrying (transport error, timeout, HTTP 5xx), an `LLMError` for the others;
- ``resolve_identity() -> str``: the model's identity in cache keys;
- ``where() -> str``: "Ollama at <host>, model <name>", for messages.

Around it the base class

- answers from the cache (key: backend, identity, options, schema, messages) — a failed
  call is never cached;
- retries `Transient` faults ``retries`` times with exponential backoff (``backoff`` s,
  doubling, capped at ``max_backoff``), then raises one plain error naming host and model;
- checks every reply: non-empty text, and with a schema valid JSON that fits it, else
  `StructuredOutputError` (never an unparsed reply);
- opens a circuit breaker after ``breaker_failures`` failed calls in a row: for
  ``breaker_cooldown`` seconds no request is sent and calls fail at once with
  `LLMUnavailableError` (counted in ``llm_breaker_skips``); then one call tries again;
- logs failures as aggregated warnings (one at once, then at most one a minute with the
  count of the failures in between, and one when the breaker opens);
- counts: ``llm_calls`` (requests made), ``llm_cache_hits``, ``llm_failures``,
  ``llm_fallbacks`` (answers its users replaced, see `record_fallback`), ``llm_seconds``,
  ``llm_breaker_skips``, ``llm_retries``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from langadapt.llm.cache import AnswerCache, answer_key, default_cache_path
from langadapt.llm.errors import (
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    StructuredOutputError,
)
from langadapt.llm.schema import check_schema, schema_errors

__all__ = ["LLMBackend", "STATS_KEYS", "Transient", "check_messages"]

logger = logging.getLogger("langadapt.llm")

STATS_KEYS: tuple[str, ...] = (
    "llm_calls", "llm_cache_hits", "llm_failures", "llm_fallbacks", "llm_seconds",
    "llm_breaker_skips", "llm_retries",
)
WARN_EVERY_S = 60.0
_ROLES = ("system", "user", "assistant")


class Transient(Exception):
    """A fault worth retrying; ``final`` is the error to raise when the retries run out."""

    def __init__(self, final: LLMError) -> None:
        super().__init__(str(final))
        self.final = final


def check_messages(messages: Any) -> list[dict[str, str]]:
    """``messages`` as a list of ``{"role", "content"}`` dicts, else ValueError."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages={messages!r}: expected a list of {{'role', 'content'}} dicts")
    out = []
    for message in messages:
        if (not isinstance(message, Mapping) or message.get("role") not in _ROLES
                or not isinstance(message.get("content"), str)):
            raise ValueError(
                f"message {message!r}: expected {{'role': one of {_ROLES}, 'content': str}}"
            )
        out.append({"role": message["role"], "content": message["content"]})
    if not out:
        raise ValueError("messages=[]: expected at least one message")
    return out


class LLMBackend(BaseModel):
    """Base of the LLM backends (see the module docstring); use a subclass or `make_backend`."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    name: ClassVar[str] = ""
    supports_concurrency: ClassVar[bool] = False

    temperature: float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="sampling seed")
    context_length: int = Field(2048, ge=64, le=1 << 20, description="context window, tokens")
    max_tokens: int = Field(256, ge=1, le=1 << 20, description="default longest answer, tokens")
    cache_path: Path | None = Field(
        default_factory=default_cache_path,
        description="SQLite answer cache shared across runs; None = memory only",
    )
    cache_capacity: int = Field(100_000, ge=1, le=10**8, description="answers kept in memory")
    retries: int = Field(3, ge=0, le=20, description="retries after a transient fault")
    backoff: float = Field(0.5, ge=0, le=600, description="first retry delay, s (doubles)")
    max_backoff: float = Field(8.0, ge=0, le=3600, description="longest retry delay, s")
    breaker_failures: int = Field(
        5, ge=1, le=10**6, description="failed calls in a row that open the circuit breaker"
    )
    breaker_cooldown: float = Field(
        30.0, ge=0, le=86_400, description="seconds the open breaker sends no request"
    )

    _cache: AnswerCache | None = PrivateAttr(default=None)
    _identity: str | None = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.RLock)
    _counters: dict[str, float] = PrivateAttr(
        default_factory=lambda: dict.fromkeys(STATS_KEYS, 0)
    )
    _in_row: int = PrivateAttr(default=0)
    _open_until: float = PrivateAttr(default=0.0)
    _last_error: str = PrivateAttr(default="")
    _last_warning: float = PrivateAttr(default=-1e18)
    _unwarned: int = PrivateAttr(default=0)
    _choice_reason: str | None = PrivateAttr(default=None)

    # ---- what a subclass supplies ----------------------------------------------------
    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int) -> str:
        """One attempt at an answer (raise `Transient` for faults worth retrying)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement generate()")

    def resolve_identity(self) -> str:
        """The model's identity in cache keys."""
        raise NotImplementedError(f"{type(self).__name__} does not implement resolve_identity()")

    def where(self) -> str:
        return f"{type(self).__name__}"

    def check_schema_support(self, schema: dict) -> None:
        """Raise `StructuredOutputError` for a schema this backend cannot enforce (checked
        before the cache, and not counted as a failed call)."""

    # ---- identity, options, cache ---------------------------------------------------
    @property
    def identity(self) -> str:
        """The model's identity in cache keys (resolved once, on first use)."""
        if self._identity is None:
            with self._lock:
                if self._identity is None:
                    self._identity = self.resolve_identity()
        return self._identity

    @property
    def choice_reason(self) -> str | None:
        """Why ``make_backend("auto")`` picked this backend (None when not chosen by auto)."""
        return self._choice_reason

    @property
    def cache(self) -> AnswerCache:
        """The answer cache (opened on first use)."""
        if self._cache is None:
            with self._lock:
                if self._cache is None:
                    self._cache = AnswerCache(self.cache_path, self.cache_capacity)
        return self._cache

    def options(self, max_tokens: int | None = None) -> dict[str, Any]:
        """The generation options that shape an answer (part of every cache key)."""
        return {"temperature": self.temperature, "seed": self.seed,
                "context_length": self.context_length,
                "max_tokens": self.max_tokens if max_tokens is None else max_tokens}

    def request_key(self, messages: Sequence[Mapping[str, str]], schema: dict | None = None,
                    max_tokens: int | None = None) -> str:
        """The cache key of one request."""
        return answer_key(self.name, self.identity, self.options(max_tokens), schema, messages)

    # ---- the calls -------------------------------------------------------------------
    def complete(self, system: str, user: str, *, schema: dict | None = None,
                 max_tokens: int | None = None) -> str:
        """The answer to a system prompt and one user message."""
        return self.chat([{"role": "system", "content": system},
                          {"role": "user", "content": user}],
                         schema=schema, max_tokens=max_tokens)

    def chat(self, messages: Sequence[Mapping[str, str]], *, schema: dict | None = None,
             max_tokens: int | None = None) -> str:
        """The answer to ``messages`` (from the cache when asked before).

        With ``schema`` (a JSON-schema dict) the answer is JSON text valid against it, else
        `StructuredOutputError`. ``max_tokens`` overrides the backend's default.
        """
        messages = check_messages(messages)
        if schema is not None:
            self.check_schema_support(check_schema(schema))
        if max_tokens is not None and (isinstance(max_tokens, bool)
                                       or not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValueError(f"max_tokens={max_tokens!r}: expected a positive int")
        n = self.max_tokens if max_tokens is None else max_tokens
        key = self.request_key(messages, schema, n)
        hit = self.cache.get(key)
        if hit is not None:
            self._count("llm_cache_hits")
            return hit
        text = self._ask(messages, schema, n)
        self.cache.put(key, text, {
            "backend": self.name, "identity": self.identity, "model": self.model_label(),
            "options": self.options(n), "schema": schema, "messages": messages,
        })
        return text

    def model_label(self) -> str:
        """The model's name for people (JSONL exports, messages)."""
        return str(getattr(self, "model", "") or self.identity)

    def _ask(self, messages: list[dict[str, str]], schema: dict | None, n: int) -> str:
        now = time.monotonic()
        with self._lock:
            if now < self._open_until:
                self._counters["llm_breaker_skips"] += 1
                raise LLMUnavailableError(
                    f"{self.where()}: {self._in_row} failed calls in a row; not asking it "
                    f"again for {self._open_until - now:.0f} s (circuit breaker; last error: "
                    f"{self._last_error})"
                )
            self._counters["llm_calls"] += 1
        start = time.perf_counter()
        try:
            text = self._with_retries(messages, schema, n)
            text = self._check_reply(text, schema, n)
        except LLMError as error:
            self._failed(error)
            raise
        finally:
            self._count("llm_seconds", time.perf_counter() - start)
        with self._lock:
            self._in_row = 0
        return text

    def _with_retries(self, messages: list[dict[str, str]], schema: dict | None, n: int) -> str:
        attempts = self.retries + 1
        for attempt in range(attempts):
            try:
                return self.generate(messages, schema, n)
            except Transient as fault:
                if attempt + 1 == attempts:
                    raise fault.final from fault.__cause__
                delay = min(self.backoff * 2**attempt, self.max_backoff)
                logger.info("%s: %s; retry %d in %.2f s", self.where(), fault, attempt + 1, delay)
                self._count("llm_retries")
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_reply(self, text: Any, schema: dict | None, n: int) -> str:
        if not isinstance(text, str):
            raise LLMReplyError(f"{self.where()} returned {type(text).__name__} {text!r}; "
                                "expected text")
        if not text.strip():
            raise LLMReplyError(f"{self.where()} returned an empty answer")
        if schema is None:
            return text.strip()
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            cut = error.pos >= len(text.rstrip()) - 1
            fix = (f"the reply was cut at max_tokens={n}; raise max_tokens or bound the schema "
                   "(maxLength, maxItems)") if cut else self.structured_output_hint()
            raise StructuredOutputError(
                f"{self.where()} did not return JSON for the schema ({error.msg} at "
                f"character {error.pos} of {text[:120]!r}); {fix}"
            ) from None
        problems = schema_errors(value, schema)
        if problems:
            raise StructuredOutputError(
                f"{self.where()} returned JSON that breaks the schema: {'; '.join(problems[:3])}"
                f"; {self.structured_output_hint()}"
            )
        return text

    def structured_output_hint(self) -> str:
        """How to get schema-true replies from this backend (for error messages)."""
        return "this backend does not enforce the schema"

    # ---- failures, counters ----------------------------------------------------------
    def _failed(self, error: LLMError) -> None:
        now = time.monotonic()
        with self._lock:
            self._counters["llm_failures"] += 1
            self._in_row += 1
            self._last_error = str(error)
            opened = self._in_row >= self.breaker_failures and self.breaker_cooldown > 0
            if opened:
                self._open_until = now + self.breaker_cooldown
            if not opened and now - self._last_warning < WARN_EVERY_S:
                self._unwarned += 1
                return
            more = (f" ({self._unwarned} more failure(s) since the last warning)"
                    if self._unwarned else "")
            self._unwarned = 0
            self._last_warning = now
        if opened:
            logger.warning("%s: %d failed calls in a row, the last: %s%s; circuit breaker open: "
                           "no request for %g s", self.where(), self._in_row, error, more,
                           self.breaker_cooldown)
        else:
            logger.warning("LLM call failed: %s%s", error, more)

    def _count(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._counters[name] += amount

    def record_fallback(self, count: int = 1) -> None:
        """Count answers a caller replaced by its own fallback (``llm_fallbacks``)."""
        self._count("llm_fallbacks", count)

    def stats(self) -> dict[str, float | int]:
        """The counters (see the module docstring); ``llm_seconds`` is a float."""
        with self._lock:
            out: dict[str, float | int] = {k: int(v) for k, v in self._counters.items()}
            out["llm_seconds"] = float(self._counters["llm_seconds"])
        return out

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker currently refuses to send requests."""
        return time.monotonic() < self._open_until

    # ---- sharing ---------------------------------------------------------------------
    def export_jsonl(self, path: str | Path) -> int:
        """Write the persistent answer cache to JSONL; return the number of lines."""
        return self.cache.export_jsonl(path)

    def import_jsonl(self, path: str | Path) -> int:
        """Load answers from JSONL; return how many were new.

        Each line needs ``answer`` (or ``description``) and ``messages`` (or ``prompt``, the
        user message, with an optional ``system``); ``backend``, ``identity``, ``options``
        and ``schema`` default to this backend's, so a file of plain (prompt, answer) lines
        lands under this backend's keys.
        """
        src = Path(path)
        if not src.is_file():
            raise ValueError(f"JSONL file {str(src)!r} does not exist")
        with src.open(encoding="utf-8") as fh:
            return sum(self._import_line(line, f"{src}:{n}")
                       for n, line in enumerate(fh, start=1) if line.strip())

    def _import_line(self, line: str, where: str) -> int:
        try:
            record = _Record.model_validate_json(line)
        except ValidationError as error:
            first = error.errors()[0]
            if first["type"] == "json_invalid":
                raise ValueError(f"{where}: not valid JSON ({first['msg']})") from None
            field = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"{where}: field {field!r}: {first['msg']}") from None
        messages = record.messages or (
            ([{"role": "system", "content": record.system}] if record.system else [])
            + [{"role": "user", "content": record.prompt}])
        backend = record.backend or self.name
        identity = record.identity or self.identity
        options = record.options or self.options()
        key = answer_key(backend, identity, options, record.schema_, messages)
        new = self.cache.get(key) is None
        self.cache.put(key, record.answer, {
            "backend": backend, "identity": identity, "model": record.model or self.model_label(),
            "options": options, "schema": record.schema_, "messages": messages,
        }, created=record.created)
        return int(new)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class _Record(BaseModel):
    """One JSONL line of `LLMBackend.import_jsonl`."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    answer: str = Field(min_length=1, validation_alias=AliasChoices("answer", "description"),
                        pattern=r"\S")
    messages: list[_Message] | None = Field(None, min_length=1)
    prompt: str | None = Field(None, min_length=1)
    system: str | None = None
    backend: str | None = Field(None, min_length=1)
    identity: str | None = Field(None, min_length=1)
    model: str | None = Field(None, min_length=1)
    created: str | None = Field(None, min_length=1)
    options: dict[str, Any] | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")

    @model_validator(mode="after")
    def _question(self) -> _Record:
        if self.messages is None and self.prompt is None:
            raise ValueError("give messages (a list of role/content) or prompt (a string)")
        if self.messages is not None:
            self.messages = [m.model_dump() for m in self.messages]  # type: ignore[misc]
        return self
