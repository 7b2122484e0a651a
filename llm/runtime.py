"""`BackendRuntime`: the mutable state of one backend under one lock; a copy or pickle is a
fresh one (docs/llm.md, "Settings and state").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["STATS_KEYS", "WARN_EVERY_S", "BackendRuntime"]

T = TypeVar("T")

STATS_KEYS: tuple[str, ...] = (
    "llm_calls", "llm_cache_hits", "llm_failures", "llm_fallbacks", "llm_seconds",
    "llm_breaker_skips", "llm_retries", "llm_scored", "llm_generated", "llm_prompt_tokens",
    "llm_prompt_tokens_reused",
)
#: Seconds between two "LLM call failed" warnings of one backend.
WARN_EVERY_S = 60.0


class BackendRuntime:
    """See the module docstring; every method is thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.counters: dict[str, float] = dict.fromkeys(STATS_KEYS, 0)
        self.choice_reason: str | None = None
        # circuit breaker
        self.in_row = 0
        self.open_until = 0.0
        self.last_error = ""
        # warning throttle
        self.last_warning = float("-inf")
        self.unwarned = 0
        # requests in flight, and the most the server takes at once (None: not seen full)
        self.in_flight = 0
        self.room: int | None = None
        self._answers_at_room = 0
        self._room_changed = threading.Condition(self.lock)
        self._built: dict[str, Any] = {}
        self._seen: set[str] = set()

    def __reduce__(self) -> tuple[type[BackendRuntime], tuple[()]]:
        return (BackendRuntime, ())

    def __repr__(self) -> str:
        return (f"BackendRuntime(calls={int(self.counters['llm_calls'])}, "
                f"failures_in_row={self.in_row}, built={sorted(self._built)})")

    # ---- things built once -------------------------------------------------------------
    def once(self, name: str, build: Callable[[], T]) -> T:
        """What ``build()`` returned on the first call with this name (built once)."""
        try:
            return self._built[name]
        except KeyError:
            pass
        with self.lock:
            if name not in self._built:
                self._built[name] = build()
            return self._built[name]

    def first(self, event: str) -> bool:
        """True the first time it is asked about ``event``, False ever after."""
        with self.lock:
            if event in self._seen:
                return False
            self._seen.add(event)
            return True

    def built(self, name: str) -> Any:
        """What `once` built under ``name``, else None."""
        return self._built.get(name)

    # ---- counters ----------------------------------------------------------------------
    def count(self, name: str, amount: float = 1) -> None:
        with self.lock:
            self.counters[name] += amount

    def stats(self) -> dict[str, float | int]:
        """The counters: ints, but ``llm_seconds``."""
        with self.lock:
            out: dict[str, float | int] = {k: int(v) for k, v in self.counters.items()}
            out["llm_seconds"] = float(self.counters["llm_seconds"])
        return out

    # ---- requests in flight ------------------------------------------------------------
    @contextmanager
    def sending(self, until: float | None = None) -> Iterator[None]:
        """Hold a place among the requests in flight (waiting for ``room`` until ``until``)."""
        with self._room_changed:
            while self.room is not None and self.in_flight >= self.room:
                left = None if until is None else until - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._room_changed.wait(left)
            self.in_flight += 1
        try:
            yield
        finally:
            with self._room_changed:
                self.in_flight -= 1
                self._room_changed.notify()

    def server_full(self) -> bool:
        """A refusal for want of room: one fewer in flight from now on; True if others were out."""
        with self.lock:
            room = max(1, self.in_flight - 1)
            self.room = room if self.room is None else min(self.room, room)
            self._answers_at_room = 0
            return self.in_flight > 1

    def server_answered(self) -> None:
        """An answer: after ``room`` answers in a row, one more may go out at once."""
        with self._room_changed:
            if self.room is None:
                return
            self._answers_at_room += 1
            if self._answers_at_room >= self.room:
                self.room += 1
                self._answers_at_room = 0
                self._room_changed.notify()

    # ---- circuit breaker ---------------------------------------------------------------
    def admit(self) -> float:
        """0.0 when a request may go, else the seconds the open breaker still refuses."""
        now = time.monotonic()
        with self.lock:
            if now < self.open_until:
                self.counters["llm_breaker_skips"] += 1
                return self.open_until - now
            self.counters["llm_calls"] += 1
            return 0.0

    def succeeded(self) -> None:
        with self.lock:
            self.in_row = 0

    def failed(self, error: str, breaker_failures: int, breaker_cooldown: float,
               outage: bool = True) -> tuple[str, int, int]:
        """Count a failed call (an ``outage`` toward the breaker); ``(what, in a row,
        unwarned)``, what: "breaker" (opened now), "warn" or ""."""
        now = time.monotonic()
        with self.lock:
            self.counters["llm_failures"] += 1
            if outage:
                self.in_row += 1
            self.last_error = error
            opened = outage and self.in_row >= breaker_failures and breaker_cooldown > 0
            if opened:
                self.open_until = now + breaker_cooldown
            if not opened and now - self.last_warning < WARN_EVERY_S:
                self.unwarned += 1
                return "", self.in_row, self.unwarned
            unwarned, self.unwarned = self.unwarned, 0
            self.last_warning = now
            return ("breaker" if opened else "warn"), self.in_row, unwarned

    @property
    def breaker_open(self) -> bool:
        return time.monotonic() < self.open_until
