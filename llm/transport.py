"""HTTP pieces of the Ollama backend: a time limit on a whole request, and ``Retry-After``.

httpx's timeouts bound each network operation (connect, one read, one write), not a
request: a server that trickles its reply one byte a second never trips a 120 s read
timeout. `DeadlineTransport` wraps httpx's transport and ends a request at an instant
(``time.monotonic()``) set per thread with `DeadlineTransport.until`: every operation
waits at most the time left, and reading the reply stops with `httpx.ReadTimeout` once
the instant has passed (checked after each piece of the body).

`retry_after_seconds` reads a ``Retry-After`` header (delay-seconds or an HTTP date).

This module imports httpx (whose import draws from the global `random`), so the Ollama
backend imports it on first use, not with the package.
"""

from __future__ import annotations

import email.utils
import functools
import math
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timezone
from typing import Any

import httpx

__all__ = ["DeadlineTransport", "deadline_transport_class", "retry_after_from",
           "retry_after_seconds"]


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header value asks to wait (RFC 9110: delay-seconds or an
    HTTP date; ``now`` is the Unix time to measure a date from, default the clock). None
    when there is no value or it cannot be read; never negative."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def retry_after_from(error: BaseException) -> float | None:
    """The ``Retry-After`` of the HTTP response behind ``error`` (an `httpx.HTTPStatusError`,
    or an exception raised while handling one, as the ollama client's `ResponseError`
    is), in seconds; None when there is none."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, httpx.HTTPStatusError):
            headers: Mapping[str, str] = current.response.headers
            return retry_after_seconds(headers.get("retry-after"))
        current = current.__cause__ or current.__context__
    return None


@functools.cache
def deadline_transport_class(http: Any = httpx) -> type:
    """`DeadlineTransport` for the HTTP module ``http`` (httpx, or another module with
    httpx's transport API, such as the one a newer openai client ships with)."""

    class DeadlineStream(http.SyncByteStream):
        def __init__(self, inner: Any, instant: float, request: Any) -> None:
            self.inner, self.instant, self.request = inner, instant, request

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.inner:
                if time.monotonic() > self.instant:
                    raise http.ReadTimeout("the time for this request ran out while the "
                                           "reply was arriving", request=self.request)
                yield chunk

        def close(self) -> None:
            close = getattr(self.inner, "close", None)
            if close is not None:
                close()

    class DeadlineTransport(http.BaseTransport):
        """An HTTP transport whose requests end by the instant set with `until` (see the
        module docstring); without one set, requests pass through unchanged."""

        def __init__(self, inner: Any = None) -> None:
            self.inner = inner if inner is not None else http.HTTPTransport()
            self._local = threading.local()

        @contextmanager
        def until(self, instant: float | None) -> Iterator[None]:
            """Requests this thread makes inside the block end by ``instant``
            (``time.monotonic()``; None: no limit)."""
            previous = getattr(self._local, "instant", None)
            self._local.instant = instant
            try:
                yield
            finally:
                self._local.instant = previous

        def handle_request(self, request: Any) -> Any:
            instant = getattr(self._local, "instant", None)
            if instant is None:
                return self.inner.handle_request(request)
            left = instant - time.monotonic()
            if left <= 0:
                raise http.ReadTimeout("the time for this request ran out before it was "
                                       "sent", request=request)
            given = request.extensions.get("timeout") or {}
            request.extensions["timeout"] = {
                name: left if given.get(name) is None else min(float(given[name]), left)
                for name in ("connect", "read", "write", "pool")
            }
            response = self.inner.handle_request(request)
            response.stream = DeadlineStream(response.stream, instant, request)
            return response

        def close(self) -> None:
            self.inner.close()

    return DeadlineTransport


#: The httpx transport the Ollama backend uses.
DeadlineTransport = deadline_transport_class(httpx)
