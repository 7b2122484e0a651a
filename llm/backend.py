"""`LLMBackend`: the base of every LLM source — cache, retries, deadline, circuit breaker,
counters (docs/llm.md says what each does and what it costs); the checks of requests and
replies are in `langadapt.llm.replies`.

A backend is a frozen pydantic model of settings; what changes while it runs lives in one
`BackendRuntime` (``backend.runtime``), and a copy of a backend starts with a fresh one.
``chat(messages, schema=None, max_tokens=None, *, seed=None)`` generates (``complete`` is
its two-message form); ``score(messages, replies, *, seed=None)`` gives the natural-log
probability of each whole candidate reply (backends with ``supports_scoring``); the roles
call `langadapt.llm.scoring.decide`, which picks one of the two.

A subclass supplies ``generate(messages, schema, max_tokens, *, seed, deadline) -> str``
(one attempt; ``deadline`` is the ``time.monotonic()`` instant the call must end by; raise
`Transient` for a fault worth retrying, an `LLMError` for the others; a ``generate``
without ``seed`` / ``deadline`` is called without them), ``resolve_identity() -> str``
(the model's identity in cache keys), ``where() -> str`` (for messages) and, to score,
``compute_scores(messages, replies, *, seed, deadline) -> list[float]``.

Around it the base class answers from the cache (a failed call is never cached; a cache
that cannot be written costs one warning), retries `Transient` faults after the server's
``Retry-After`` or with exponential backoff, bounds the whole call by ``deadline``, sends
fewer requests at once after the server refused one for want of room (HTTP 429 / 503:
`BackendRuntime.sending`; such a refusal while its other requests are answered is waited
out, not counted as a failed attempt), checks
every reply (size, non-empty, JSON that fits the schema), opens a circuit breaker after
``breaker_failures`` outages in a row, throttles failure warnings, and counts
(`STATS_KEYS`).
"""

from __future__ import annotations

import inspect
import json
import logging
import operator
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from .cache import answer_key, default_cache_path, export_answers, import_answers, score_key
from .errors import LLMError, LLMReplyError, LLMUnavailableError, NativeBuildError
from .replies import check_messages, check_replies, check_reply, check_scores
from .runtime import STATS_KEYS, WARN_EVERY_S, BackendRuntime
from .schema import MAX_REPLY_CHARS, check_schema
from .store import CacheError, SQLiteStore, open_store

__all__ = ["LLMBackend", "STATS_KEYS", "WARN_EVERY_S", "Transient", "check_messages",
           "check_replies"]

logger = logging.getLogger("langadapt.llm")

_SEED_MAX = 2**31 - 1
#: Per-call keywords the base class passes to ``generate`` when it takes them.
_CALL_KEYWORDS = ("seed", "deadline")
#: When this thread's outermost `chat` / `score` started: ``deadline`` counts from there, so
#: it covers the identity lookup of a first call too.
_CALL = threading.local()
_ACCEPTED: dict[type, tuple[str, ...]] = {}


class Transient(Exception):
    """A fault worth retrying; ``final`` is the error to raise when the retries run out
    (the base class adds the number of attempts), ``retry_after`` the seconds the server
    asked to wait before the next attempt (its ``Retry-After``), if it said;
    ``server_full``: the server refused for want of room (HTTP 429 or 503), so fewer
    requests go out at once from now on (`BackendRuntime.sending`)."""

    def __init__(self, final: LLMError, retry_after: float | None = None,
                 server_full: bool = False) -> None:
        super().__init__(str(final))
        self.final = final
        self.retry_after = retry_after
        self.server_full = server_full


def _accepted_keywords(cls: type) -> tuple[str, ...]:
    """The per-call keywords (`_CALL_KEYWORDS`) ``cls.generate`` takes."""
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
    """Base of the LLM backends (see the module docstring); use a subclass or `make_backend`."""

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

    # The one piece of state the model holds: everything mutable is in the runtime.
    _runtime: BackendRuntime = PrivateAttr(default_factory=BackendRuntime)

    # ---- what a subclass supplies ----------------------------------------------------
    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int,
                 *, seed: int = 0, deadline: float | None = None) -> str:
        """One attempt at an answer (raise `Transient` for faults worth retrying)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement generate()")

    def compute_scores(self, messages: list[dict[str, str]], replies: list[str], *,
                       seed: int = 0, deadline: float | None = None) -> list[float]:
        """One attempt at scoring: the natural-log probability of each whole reply (its
        tokens, then the chat template's end of turn) after the chat prompt of ``messages``
        (backends with ``supports_scoring``; raise `Transient` for faults worth retrying)."""
        raise self._cannot_score()

    def _cannot_score(self) -> LLMError:
        return LLMError(
            f"{self.where()} cannot score replies: it gives no log-probabilities "
            "(check backend.supports_scoring first, or use langadapt.llm.decide, which "
            "generates with the schema instead)")

    def resolve_identity(self) -> str:
        """The model's identity in cache keys."""
        raise NotImplementedError(f"{type(self).__name__} does not implement resolve_identity()")

    def where(self) -> str:
        return f"{type(self).__name__}"

    def attempt_end(self, timeout: float, deadline: float | None) -> tuple[float, str]:
        """The ``time.monotonic()`` instant one attempt ends by — ``timeout`` s from now, or
        the call's ``deadline`` when that comes first — and that limit in words."""
        end = time.monotonic() + timeout
        if deadline is not None and deadline < end:
            return deadline, f"the call's deadline={self.deadline} s"
        return end, f"timeout={timeout} s"

    def check_schema_support(self, schema: dict) -> None:
        """Raise `StructuredOutputError` for a schema this backend cannot enforce (checked
        before the cache, and not counted as a failed call)."""

    # ---- state -----------------------------------------------------------------------
    @property
    def runtime(self) -> BackendRuntime:
        """This backend's mutable state (counters, breaker, cache handle, identity, ...)."""
        return self._runtime

    def __copy__(self) -> LLMBackend:
        """A copy is another backend: the same settings, a fresh runtime."""
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
        """The store of answers, ``cache_path`` (opened on first use, shared in the process
        with every other user of that file, e.g. an adapter's embeddings)."""
        return self.runtime.once("cache", lambda: open_store(
            self.cache_path, self.cache_capacity, what="LLM answer cache"))

    def options(self, max_tokens: int | None = None, seed: int | None = None
                ) -> dict[str, Any]:
        """The generation options that shape an answer (part of every cache key); ``None``
        takes the setting."""
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
        """The answer to ``messages`` (from the cache when asked before).

        With ``schema`` (a JSON-schema dict) the answer is JSON text valid against it, else
        `StructuredOutputError`. ``max_tokens`` and ``seed`` override the backend's settings
        for this call (both are part of the cache key).
        """
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
        """The natural-log probability of each whole reply in ``replies`` (its tokens, then
        the end-of-turn token(s) of the chat template) as the assistant's answer to
        ``messages`` — from the cache when asked before (key: backend, identity,
        `score_options`, the replies, the messages; stored as JSON text).

        One evaluation of the shared prompt per call. Counted like `chat` (``llm_calls``,
        ``llm_cache_hits``, ``llm_seconds``, failures, breaker); a failed call is never
        cached. NaN, +inf, or every reply at -inf is an `LLMReplyError` naming the backend.
        A backend without ``supports_scoring`` raises an `LLMError` before any request.
        """
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
        """The value stored under ``key`` (``read`` from its text; an entry that cannot be
        read is asked again, not overwritten), else ``ask()``, stored as ``write(value)``
        with ``meta`` and this backend's name, identity and model."""
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
        """The options in a scoring request's cache key: the call's seed (None: the
        setting) and ``context_length`` — temperature and ``max_tokens`` do not shape
        log-probabilities."""
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
        """Cache an answer; a cache that fails to store it costs a warning, not the answer."""
        try:
            self.cache.put(key, text, meta)
        except CacheError as error:
            if self.runtime.first("cache write failed"):
                    logger.warning("%s: could not store an answer in the LLM answer cache (%s); "
                               "the answer is used, not cached", self.where(), error)

    def model_label(self) -> str:
        """The model's name for people (JSONL exports, messages)."""
        return str(getattr(self, "model", "") or self.identity)

    def _ask(self, messages: list[dict[str, str]], schema: dict | None, n: int,
             seed: int) -> str:
        return self._call(lambda extra: self.generate(messages, schema, n, **extra),
                          lambda text: check_reply(text, schema, n, self.where(),
                                                   self.max_reply_chars,
                                                   self.structured_output_hint()), seed)

    def _call(self, attempt: Any, check: Any, seed: int, always: bool = False) -> Any:
        """One request: breaker, retries of ``attempt(extra keywords)``, then ``check`` of
        its result; counted. ``always``: pass ``seed`` and ``deadline`` whatever the
        signature (new hooks), else only those ``generate`` takes."""
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
        """The ``time.monotonic()`` instant the current call must end by (``deadline`` s
        from the start of this thread's outermost `chat` / `score`), None without one."""
        if self.deadline is None:
            return None
        return (getattr(_CALL, "started", None) or time.monotonic()) + self.deadline

    def _with_retries(self, request: Any, seed: int, always: bool = False) -> Any:
        """``request(extra keywords)``, retried after a `Transient` fault up to ``retries``
        times; a refusal for want of room while this backend's other requests were being
        answered (``server_full``) is waited out without counting as a failed attempt."""
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
        raise AssertionError("unreachable")  # pragma: no cover

    def _retry_delay(self, fault: Transient, attempt: int) -> float:
        """Seconds before retry ``attempt``: the server's Retry-After (at most
        ``max_retry_after``), else exponential backoff (at most ``max_backoff``)."""
        if fault.retry_after is not None:
            return min(max(float(fault.retry_after), 0.0), self.max_retry_after)
        return min(self.backoff * 2 ** (attempt - 1), self.max_backoff)

    def structured_output_hint(self) -> str:
        """How to get schema-true replies from this backend (for error messages)."""
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
        """Count answers a caller replaced by its own fallback (``llm_fallbacks``)."""
        self.runtime.count("llm_fallbacks", count)

    def stats(self) -> dict[str, float | int]:
        """The counters (see the module docstring); ``llm_seconds`` is a float."""
        return self.runtime.stats()

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker currently refuses to send requests."""
        return self.runtime.breaker_open

    # ---- sharing ---------------------------------------------------------------------
    def export_jsonl(self, path: str | Path) -> int:
        """Write the stored answers to JSONL; return the number of lines (see
        `langadapt.llm.cache.export_answers`)."""
        return export_answers(self.cache, path)

    def import_jsonl(self, path: str | Path) -> int:
        """Load answers from JSONL; return how many were new (see
        `langadapt.llm.cache.import_answers`)."""
        return import_answers(self, path)


@contextmanager
def _call_clock() -> Iterator[None]:
    """Marks the start of this thread's outermost call (see `_CALL`)."""
    outer = getattr(_CALL, "started", None)
    if outer is None:
        _CALL.started = time.monotonic()
    try:
        yield
    finally:
        if outer is None:
            _CALL.started = None
