"""HTTP pieces of the Ollama backend: a time limit on a whole request, and ``Retry-After``.

httpx's timeouts bound each network operation (connect, one read, one write), not a
request: a server that trickles its reply one byte a second never trips a 120 s read
timeout. `DeadlineTransport` wraps httpx's transport and ends a request at an instant
(``time.monotonic()``) set per thread with `DeadlineTransport.until`: every operation
waits at most the time left, and reading the reply stops with `httpx.ReadTimeout` once
the instant has passed (checked after each piece of the body). The deadline reaches the
socket too: every read and write of the connection waits at most the time left, so a
server trickling its *headers* is cut off as well. ``until`` also takes a byte cap
(`reply_byte_cap`): a reply body, declared or read, past it raises `ReplyTooLarge` before
more is read, so the memory a reply takes stays bounded by the cap.

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

__all__ = ["DeadlineTransport", "ReplyTooLarge", "deadline_transport_class", "reply_byte_cap",
           "reply_too_large",
           "retry_after_from", "retry_after_seconds"]


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


def reply_byte_cap(max_reply_chars: int) -> int:
    """Bytes of HTTP body read for a reply of at most ``max_reply_chars`` characters: 8 per
    character (JSON escapes one as ``\\uXXXX``, 6 bytes; a stream adds its framing) plus
    64 KiB for the envelope."""
    return 8 * max_reply_chars + 65_536


class ReplyTooLarge(Exception):
    """A reply's body passed the byte cap set with `DeadlineTransport.until`."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the reply passed {limit:,} bytes")
        self.limit = limit


def reply_too_large(error: BaseException) -> ReplyTooLarge | None:
    """The `ReplyTooLarge` behind ``error`` (itself, its cause or context), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ReplyTooLarge):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class _Limits(threading.local):
    instant: float | None = None
    max_bytes: int | None = None
    per_line: bool = False


@functools.cache
def deadline_transport_class(http: Any = httpx) -> type:
    """`DeadlineTransport` for the HTTP module ``http`` (httpx, or another module with
    httpx's transport API, such as the one a newer openai client ships with)."""
    import httpcore  # httpx's own network layer

    class DeadlineNetworkStream(httpcore.NetworkStream):
        """A socket whose every read and write waits at most until the thread's instant:
        a server trickling its headers is cut off too, not only one trickling its body."""

        def __init__(self, inner: Any, limits: _Limits) -> None:
            self.inner, self.limits = inner, limits

        def _left(self, timeout: float | None) -> float | None:
            instant = self.limits.instant
            if instant is None:
                return timeout
            left = instant - time.monotonic()
            if left <= 0:
                raise httpcore.ReadTimeout("the time for this request ran out")
            return left if timeout is None else min(timeout, left)

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self.inner.read(max_bytes, self._left(timeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.inner.write(buffer, self._left(timeout))

        def close(self) -> None:
            self.inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                      timeout: float | None = None) -> Any:
            return DeadlineNetworkStream(self.inner.start_tls(
                ssl_context, server_hostname, self._left(timeout)), self.limits)

        def get_extra_info(self, info: str) -> Any:
            return self.inner.get_extra_info(info)

    class DeadlineNetworkBackend(httpcore.NetworkBackend):
        def __init__(self, inner: Any, limits: _Limits) -> None:
            self.inner, self.limits = inner, limits

        def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
            return DeadlineNetworkStream(self.inner.connect_tcp(*args, **kwargs), self.limits)

        def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
            return DeadlineNetworkStream(self.inner.connect_unix_socket(*args, **kwargs),
                                         self.limits)

        def sleep(self, seconds: float) -> None:
            self.inner.sleep(seconds)

    class DeadlineStream(http.SyncByteStream):
        def __init__(self, inner: Any, instant: float | None, max_bytes: int | None,
                     per_line: bool, request: Any) -> None:
            self.inner, self.instant, self.max_bytes = inner, instant, max_bytes
            self.per_line, self.request = per_line, request

        def __iter__(self) -> Iterator[bytes]:
            size = 0
            for chunk in self.inner:
                if self.instant is not None and time.monotonic() > self.instant:
                    raise http.ReadTimeout("the time for this request ran out while the "
                                           "reply was arriving", request=self.request)
                newline = chunk.rfind(b"\n") if self.per_line else -1
                size = size + len(chunk) if newline < 0 else len(chunk) - newline - 1
                if self.max_bytes is not None and size > self.max_bytes:
                    raise ReplyTooLarge(self.max_bytes)
                yield chunk

        def close(self) -> None:
            close = getattr(self.inner, "close", None)
            if close is not None:
                close()

    class DeadlineTransport(http.BaseTransport):
        """An HTTP transport whose requests end by the instant set with `until`, and whose
        replies stop at the byte cap set there (see the module docstring); without them,
        requests pass through unchanged."""

        def __init__(self, inner: Any = None) -> None:
            self.inner = inner if inner is not None else http.HTTPTransport()
            self._local = _Limits()
            pool = getattr(self.inner, "_pool", None)  # httpx's own connection pool
            if pool is not None and hasattr(pool, "_network_backend"):
                pool._network_backend = DeadlineNetworkBackend(pool._network_backend,
                                                               self._local)

        @contextmanager
        def until(self, instant: float | None, max_bytes: int | None = None,
                  per_line: bool = False) -> Iterator[None]:
            """Requests this thread makes inside the block end by ``instant``
            (``time.monotonic()``; None: no limit), their reply bodies stop with
            `ReplyTooLarge` past ``max_bytes`` (None: no cap) — in all, or with
            ``per_line`` in one line (a stream read line by line: memory holds one line,
            the whole is bounded by ``instant``)."""
            local = self._local
            previous = local.instant, local.max_bytes, local.per_line
            local.instant, local.max_bytes, local.per_line = instant, max_bytes, per_line
            try:
                yield
            finally:
                local.instant, local.max_bytes, local.per_line = previous

        def handle_request(self, request: Any) -> Any:
            instant, max_bytes, per_line = (self._local.instant, self._local.max_bytes,
                                            self._local.per_line)
            if instant is None and max_bytes is None:
                return self.inner.handle_request(request)
            if instant is not None:
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
            declared = response.headers.get("content-length", "")
            if (max_bytes is not None and not per_line and declared.isdigit()
                    and int(declared) > max_bytes):
                response.close()
                raise ReplyTooLarge(max_bytes)
            response.stream = DeadlineStream(response.stream, instant, max_bytes, per_line,
                                             request)
            return response

        def close(self) -> None:
            self.inner.close()

    return DeadlineTransport


#: The httpx transport the Ollama backend uses.
DeadlineTransport = deadline_transport_class(httpx)
