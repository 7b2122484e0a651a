"""`LLMBackend`: the base of every LLM source: cache, retries, deadline, circuit breaker,
reply checks, counters. A subclass supplies one attempt (`generate`), `resolve_identity`,
`where` and, to score, `compute_scores`. See docs/llm.md, "Your own backend".
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import operator
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from .cache import answer_key, default_cache_path, export_answers, import_answers, score_key
from .errors import (
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    NativeBuildError,
    StructuredOutputError,
)
from .replies import (
    MAX_JSON_DEPTH,
    MAX_REPLY_CHARS,
    check_schema,
    parse_json_reply,
    quote_reply,
    schema_errors,
)
from .runtime import BackendRuntime
from .store import CacheError, SQLiteStore, open_store

logger = logging.getLogger("langadapt.llm")

_SEED_MAX = 2**31 - 1
_CALL_KEYWORDS = ("seed", "deadline")  # passed to ``generate`` when it takes them
#: When this thread's outermost `chat` / `score` started: ``deadline`` counts from there
#: (the identity lookup of a first call included).
_CALL = threading.local()
_ACCEPTED: dict[type, tuple[str, ...]] = {}
_ROLES = ("system", "user", "assistant")


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


def check_replies(replies: Any) -> list[str]:
    """``replies`` as a non-empty list of non-empty strings, else ValueError."""
    if isinstance(replies, (str, bytes, Mapping)) or not isinstance(replies, Sequence):
        raise ValueError(f"replies={replies!r}: expected a list of candidate reply strings")
    out = list(replies)
    if not out or any(not isinstance(r, str) or not r for r in out):
        raise ValueError(f"replies={replies!r}: expected a non-empty list of non-empty strings")
    return out


def check_reply(text: Any, schema: dict | None, n: int, where: str, max_reply_chars: int,
                hint: str) -> str:
    """``text`` as a reply: a string of at most ``max_reply_chars``, not empty, and with
    ``schema`` JSON valid against it (``n``: the call's max_tokens, ``hint``: how to get
    schema-true replies from the backend), else `LLMReplyError` / `StructuredOutputError`."""
    if not isinstance(text, str):
        raise LLMReplyError(f"{where} returned {type(text).__name__} "
                            f"{quote_reply(text)}; expected text")
    if len(text) > max_reply_chars:
        raise LLMReplyError(
            f"{where} returned {len(text):,} characters, more than "
            f"max_reply_chars={max_reply_chars:,}: {quote_reply(text)}")
    if not text.strip():
        raise LLMReplyError(f"{where} returned an empty answer")
    if schema is None:
        return text.strip()
    try:
        value = parse_json_reply(text, max_chars=max_reply_chars,
                                 max_depth=MAX_JSON_DEPTH, source=where)
    except StructuredOutputError as error:
        cause = error.__cause__
        if not isinstance(cause, ValueError) or not hasattr(cause, "pos"):
            raise
        cut = cause.pos >= len(text.rstrip()) - 1
        fix = (f"the reply was cut at max_tokens={n}; raise max_tokens or bound the schema "
               "(maxLength, maxItems)") if cut else hint
        raise StructuredOutputError(
            f"{where} did not return JSON for the schema ({cause.msg} at "
            f"character {cause.pos} of {quote_reply(text)}); {fix}"
        ) from None
    problems = schema_errors(value, schema)
    if problems:
        raise StructuredOutputError(
            f"{where} returned JSON that breaks the schema: {'; '.join(problems[:3])}"
            f"; {hint}"
        )
    return text


def check_scores(result: Any, replies: list[str], where: str) -> list[float]:
    """``result`` as one finite-or--inf float per reply, else `LLMReplyError`."""
    try:
        scores = [float(v) for v in result]
    except (TypeError, ValueError):
        scores = None
    if scores is None or len(scores) != len(replies):
        raise LLMReplyError(f"{where} returned {quote_reply(result)} as the scores "
                            f"of {len(replies)} replies; expected {len(replies)} numbers")
    bad = [r for r, v in zip(replies, scores, strict=True) if math.isnan(v) or v == math.inf]
    if bad:
        raise LLMReplyError(f"{where} returned NaN or +inf log-probabilities for "
                            f"{quote_reply(bad)}: the model's output is broken")
    if all(v == -math.inf for v in scores):
        raise LLMReplyError(f"{where} gave every one of the {len(replies)} replies "
                            "log-probability -inf: no choice can be made from them")
    return scores


class Transient(Exception):
    """A fault worth retrying: ``final`` is raised when the retries run out; ``retry_after``:
    the server's wait; ``server_full`` (HTTP 429 / 503): fewer requests at once from now on."""

    def __init__(self, final: LLMError, retry_after: float | None = None,
                 server_full: bool = False) -> None:
        super().__init__(str(final))
        self.final = final
        self.retry_after = retry_after
        self.server_full = server_full


def _accepted_keywords(cls: type) -> tuple[str, ...]:
    found = _ACCEPTED.get(cls)
    if found is None:
        params = inspect.signature(cls.generate).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            found = _CALL_KEYWORDS
        else:
            names = {p.name for p in params if p.kind is not p.POSITIONAL_ONLY}
            found = tuple(k for k in _CALL_KEYWORDS if k in names)
        _ACCEPTED[cls] = found
    return found


def _with_note(error: LLMError, note: str) -> LLMError:
    """``error`` with ``note`` appended to its message (same type)."""
    try:
        return type(error)(f"{error}, {note}")
    except TypeError:  # an error class with another constructor: keep it as it is
        return error


class LLMBackend(BaseModel):
    """Base of the LLM backends; use a subclass or `make_backend`."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    name: ClassVar[str] = ""
    supports_concurrency: ClassVar[bool] = False
    #: Whether `score` works: the backend can give the log-probability of a whole reply.
    supports_scoring: ClassVar[bool] = False

    temperature: float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature")
    seed: int = Field(0, ge=0, le=_SEED_MAX,
                      description="sampling seed (a call may give its own: chat(..., seed=))")
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
    max_retry_after: float = Field(
        60.0, ge=0, le=3600,
        description="longest wait a server's Retry-After gets before the next attempt, s")
    deadline: float | None = Field(
        None, gt=0, le=7 * 86_400,
        description="seconds one call may take in all, retries and waits included; "
                    "None = no bound beyond the per-attempt timeout")
    max_reply_chars: int = Field(
        MAX_REPLY_CHARS, ge=1, le=10**9,
        description="longest reply accepted, characters (longer: LLMReplyError, not cached)")
    breaker_failures: int = Field(
        5, ge=1, le=10**6, description="failed calls in a row that open the circuit breaker"
    )
    breaker_cooldown: float = Field(
        30.0, ge=0, le=86_400, description="seconds the open breaker sends no request"
    )

    _runtime: BackendRuntime = PrivateAttr(default_factory=BackendRuntime)

    # ---- what a subclass supplies ----------------------------------------------------
    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int,
                 *, seed: int = 0, deadline: float | None = None) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement generate()")

    def compute_scores(self, messages: list[dict[str, str]], replies: list[str], *,
                       seed: int = 0, deadline: float | None = None) -> list[float]:
        raise self._cannot_score()

    def _cannot_score(self) -> LLMError:
        return LLMError(
            f"{self.where()} cannot score replies: it gives no log-probabilities "
            "(check backend.supports_scoring first, or use langadapt.llm.decide, which "
            "generates with the schema instead)")

    def resolve_identity(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement resolve_identity()")

    def where(self) -> str:
        return f"{type(self).__name__}"

    def probe(self, timeout: float = 5.0) -> None:
        """One cheap request to the backend's server within ``timeout`` seconds (listing its
        models), an `LLMError` naming the server when it cannot be reached or refuses;
        nothing for a backend that runs in this process. Sends no prompt."""

    def attempt_end(self, timeout: float, deadline: float | None) -> tuple[float, str]:
        """When one attempt ends (``timeout`` or ``deadline``, the first) and that in words."""
        end = time.monotonic() + timeout
        if deadline is not None and deadline < end:
            return deadline, f"the call's deadline={self.deadline} s"
        return end, f"timeout={timeout} s"

    def check_schema_support(self, schema: dict) -> None:
        """Raise `StructuredOutputError` for a schema this backend cannot enforce."""

    # ---- state -----------------------------------------------------------------------
    @property
    def runtime(self) -> BackendRuntime:
        return self._runtime

    def __copy__(self) -> LLMBackend:
        copied = super().__copy__()
        copied._runtime = BackendRuntime()
        return copied

    # ---- identity, options, cache ---------------------------------------------------
    @property
    def identity(self) -> str:
        """The model's identity in cache keys (resolved once, on first use)."""
        return self.runtime.once("identity", self.resolve_identity)

    @property
    def choice_reason(self) -> str | None:
        """Why ``make_backend("auto")`` picked this backend (None when not chosen by auto)."""
        return self.runtime.choice_reason

    @property
    def cache(self) -> SQLiteStore:
        """The answer store at ``cache_path`` (opened on first use, shared in the process)."""
        return self.runtime.once("cache", lambda: open_store(
            self.cache_path, self.cache_capacity, what="LLM answer cache"))

    def options(self, max_tokens: int | None = None, seed: int | None = None
                ) -> dict[str, Any]:
        """The generation options in every cache key (``None``: the setting)."""
        return {"temperature": self.temperature,
                "seed": self.seed if seed is None else seed,
                "context_length": self.context_length,
                "max_tokens": self.max_tokens if max_tokens is None else max_tokens}

    def request_key(self, messages: Sequence[Mapping[str, str]], schema: dict | None = None,
                    max_tokens: int | None = None, seed: int | None = None) -> str:
        """The cache key of one request."""
        return answer_key(self.name, self.identity, self.options(max_tokens, seed), schema,
                          messages)

    # ---- the calls -------------------------------------------------------------------
    def complete(self, system: str, user: str, schema: dict | None = None,
                 max_tokens: int | None = None, *, seed: int | None = None) -> str:
        """The answer to a system prompt and one user message."""
        return self.chat([{"role": "system", "content": system},
                          {"role": "user", "content": user}],
                         schema=schema, max_tokens=max_tokens, seed=seed)

    def chat(self, messages: Sequence[Mapping[str, str]], schema: dict | None = None,
             max_tokens: int | None = None, *, seed: int | None = None) -> str:
        """The answer to ``messages`` (cached): with ``schema``, JSON text valid against it."""
        messages = check_messages(messages)
        if schema is not None:
            self.check_schema_support(check_schema(schema))
        n = self._call_max_tokens(max_tokens)
        seed = self._call_seed(seed)
        with _call_clock():
            return self._cached(
                self.request_key(messages, schema, n, seed),
                lambda: self._ask(messages, schema, n, seed),
                {"options": self.options(n, seed), "schema": schema, "messages": messages})

    def score(self, messages: Sequence[Mapping[str, str]], replies: Sequence[str], *,
              seed: int | None = None) -> list[float]:
        """The log-probability of each whole reply (then end of turn) to ``messages``, cached
        and counted like `chat` (docs/llm.md, "Scoring known replies")."""
        messages = check_messages(messages)
        replies = check_replies(replies)
        if not self.supports_scoring:
            raise self._cannot_score()
        seed = self._call_seed(seed)
        options = self.score_options(seed)
        with _call_clock():
            return self._cached(
                score_key(self.name, self.identity, options, replies, messages),
                lambda: self._call(lambda extra: self.compute_scores(messages, replies, **extra),
                                   lambda result: check_scores(result, replies, self.where()),
                                   seed, always=True),
                {"options": options, "replies": replies, "messages": messages},
                read=lambda text: check_scores(json.loads(text), replies, self.where()),
                write=json.dumps)

    def _cached(self, key: str, ask: Any, meta: dict[str, Any], read: Any = None,
                write: Any = None) -> Any:
        """The value stored under ``key`` (unreadable: asked again), else ``ask()``, stored."""
        hit = self.cache.get(key)
        if hit is not None:
            try:
                value = hit if read is None else read(hit)
            except (ValueError, LLMError):
                value = None
            if value is not None:
                self.runtime.count("llm_cache_hits")
                return value
        value = ask()
        self._store(key, value if write is None else write(value), {
            "backend": self.name, "identity": self.identity, "model": self.model_label(),
            **meta})
        return value

    def score_options(self, seed: int | None = None) -> dict[str, Any]:
        """The options that shape log-probabilities: seed and ``context_length``."""
        return {"seed": self.seed if seed is None else seed,
                "context_length": self.context_length}

    def _call_max_tokens(self, max_tokens: Any) -> int:
        if max_tokens is None:
            return self.max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens!r}: expected a positive int")
        return int(max_tokens)

    def _call_seed(self, seed: Any) -> int:
        if seed is None:
            return self.seed
        try:
            value = None if isinstance(seed, bool) else operator.index(seed)
        except TypeError:
            value = None
        if value is None or not 0 <= value <= _SEED_MAX:
            raise ValueError(f"seed={seed!r}: expected an int from 0 to {_SEED_MAX}")
        return value

    def _store(self, key: str, text: str, meta: dict[str, Any]) -> None:
        try:
            self.cache.put(key, text, meta)
        except CacheError as error:
            if self.runtime.first("cache write failed"):
                logger.warning("%s: could not store an answer in the LLM answer cache (%s); "
                               "the answer is used, not cached", self.where(), error)

    def model_label(self) -> str:
        return str(getattr(self, "model", "") or self.identity)

    def _ask(self, messages: list[dict[str, str]], schema: dict | None, n: int,
             seed: int) -> str:
        return self._call(lambda extra: self.generate(messages, schema, n, **extra),
                          lambda text: check_reply(text, schema, n, self.where(),
                                                   self.max_reply_chars,
                                                   self.structured_output_hint()), seed)

    def _call(self, attempt: Any, check: Any, seed: int, always: bool = False) -> Any:
        """Breaker, retries of ``attempt(keywords)``, ``check`` of its result; counted."""
        runtime = self.runtime
        closed_for = runtime.admit()
        if closed_for:
            raise LLMUnavailableError(
                f"{self.where()}: {runtime.in_row} failed calls in a row; not asking it "
                f"again for {closed_for:.0f} s (circuit breaker; last error: "
                f"{runtime.last_error})"
            )
        start = time.perf_counter()
        try:
            try:
                result = self._with_retries(attempt, seed, always)
            except LLMError as error:
                self._failed(error, outage=not isinstance(error, LLMReplyError))
                raise
            runtime.succeeded()  # the server answered: it is up, whatever the reply holds
            try:
                return check(result)
            except LLMError as error:
                self._failed(error, outage=False)
                raise
        finally:
            runtime.count("llm_seconds", time.perf_counter() - start)

    def call_deadline(self) -> float | None:
        """When this thread's outermost call must end (None: no deadline)."""
        if self.deadline is None:
            return None
        return (getattr(_CALL, "started", None) or time.monotonic()) + self.deadline

    def _with_retries(self, request: Any, seed: int, always: bool = False) -> Any:
        """``request(keywords)``, retried after `Transient` faults (docs/llm.md, "Faults")."""
        started = getattr(_CALL, "started", None) or time.monotonic()
        deadline = self.call_deadline()
        wanted = _CALL_KEYWORDS if always else _accepted_keywords(type(self))
        extra: dict[str, Any] = {}
        if "seed" in wanted:
            extra["seed"] = seed
        if "deadline" in wanted:
            extra["deadline"] = deadline
        attempts, attempt, sent = self.retries + 1, 0, 0
        runtime = self.runtime
        while True:
            crowded = False
            try:
                sent += 1
                with runtime.sending(deadline):
                    try:
                        result = request(extra)
                    except Transient as fault:
                        crowded = fault.server_full and runtime.server_full()
                        raise
                runtime.server_answered()
                return result
            except Transient as fault:
                # a server full of this backend's other requests: a wait, not a failure
                attempt += 0 if crowded else 1
                if attempt == attempts:
                    raise _with_note(fault.final, f"{sent} attempt(s) in total; giving up"
                                     ) from fault.__cause__
                delay = self._retry_delay(fault, max(attempt, 1))
                if deadline is not None and time.monotonic() + delay >= deadline:
                    asked = ("the server asked to wait " if fault.retry_after is not None
                             else "the next retry is due in ")
                    raise _with_note(fault.final, (
                        f"{sent} attempt(s) in {time.monotonic() - started:.1f} s; giving "
                        f"up: {asked}{delay:.3g} s, past deadline={self.deadline} s"
                    )) from fault.__cause__
                logger.info("%s: %s; retry %d in %.2f s", self.where(), fault, sent, delay)
                self.runtime.count("llm_retries")
                time.sleep(delay)

    def _retry_delay(self, fault: Transient, attempt: int) -> float:
        if fault.retry_after is not None:
            return min(max(float(fault.retry_after), 0.0), self.max_retry_after)
        return min(self.backoff * 2 ** (attempt - 1), self.max_backoff)

    def structured_output_hint(self) -> str:
        return "this backend does not enforce the schema"

    # ---- failures, counters ----------------------------------------------------------
    def _failed(self, error: LLMError, outage: bool = True) -> None:
        if isinstance(error, NativeBuildError):
            return  # fatal for the process: reported once, by whoever stops the run
        what, in_row, unwarned = self.runtime.failed(
            str(error), self.breaker_failures, self.breaker_cooldown, outage)
        more = f" ({unwarned} more failure(s) since the last warning)" if unwarned else ""
        if what == "breaker":
            logger.warning("%s: %d failed calls in a row, the last: %s%s; circuit breaker open: "
                           "no request for %g s", self.where(), in_row, error, more,
                           self.breaker_cooldown)
        elif what == "warn":
            logger.warning("LLM call failed: %s%s", error, more)

    def record_fallback(self, count: int = 1) -> None:
        """Count answers a caller replaced by its fallback (``llm_fallbacks``)."""
        self.runtime.count("llm_fallbacks", count)

    def stats(self) -> dict[str, float | int]:
        """The counters (`STATS_KEYS`)."""
        return self.runtime.stats()

    @property
    def breaker_open(self) -> bool:
        return self.runtime.breaker_open

    # ---- sharing ---------------------------------------------------------------------
    def export_jsonl(self, path: str | Path) -> int:
        """Write the stored answers to JSONL; the number of lines."""
        return export_answers(self.cache, path)

    def import_jsonl(self, path: str | Path) -> int:
        """Load answers from JSONL; how many were new."""
        return import_answers(self, path)


@contextmanager
def _call_clock() -> Iterator[None]:
    outer = getattr(_CALL, "started", None)
    if outer is None:
        _CALL.started = time.monotonic()
    try:
        yield
    finally:
        if outer is None:
            _CALL.started = None
