"""HTTP bounds httpx has no option for: a time limit on a whole request and a byte cap on a
reply (`DeadlineTransport`), and ``Retry-After`` (docs/llm.md, "Faults"). Imports httpx
(which draws from the global `random`): imported on first use.
"""

from __future__ import annotations

import email.utils
import functools
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timezone
from typing import Any

import httpx

__all__ = ["DeadlineTransport", "ReplyTooLarge", "cause_of", "deadline_transport_class",
           "reply_byte_cap", "retry_after", "retry_after_seconds"]


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds >= 0 a ``Retry-After`` value (seconds or an HTTP date) asks to wait, else None."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def retry_after(headers: Any) -> float | None:
    """Seconds the ``retry-after-ms`` / ``Retry-After`` headers ask to wait, None without."""
    if headers is None:
        return None
    millis = retry_after_seconds(headers.get("retry-after-ms"))
    return millis / 1000.0 if millis is not None else retry_after_seconds(
        headers.get("retry-after"))


def cause_of(error: BaseException, kind: type | tuple[type, ...]) -> Any:
    """The first exception of ``kind`` in ``error``'s chain (itself, causes, contexts)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def reply_byte_cap(max_reply_chars: int) -> int:
    """Bytes of body read for a reply of ``max_reply_chars`` characters: 8 a character (a
    JSON escape takes 6, a stream adds framing) plus 64 KiB of envelope."""
    return 8 * max_reply_chars + 65_536


class ReplyTooLarge(Exception):
    """A reply's body passed the byte cap set with `DeadlineTransport.until`."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the reply passed {limit:,} bytes")
        self.limit = limit


class _Limits(threading.local):
    instant: float | None = None
    max_bytes: int | None = None
    per_line: bool = False


@functools.cache
def deadline_transport_class(http: Any = httpx) -> type:
    """`DeadlineTransport` for ``http`` (httpx, or the httpx2 the openai client ships)."""
    import httpcore

    class DeadlineNetworkStream:
        """A socket whose every read and write waits at most until the thread's instant,
        so trickled headers are cut off too."""

        def __init__(self, inner: Any, limits: _Limits) -> None:
            self.inner, self.limits = inner, limits

        def _left(self, timeout: float | None) -> float | None:
            if self.limits.instant is None:
                return timeout
            left = self.limits.instant - time.monotonic()
            if left <= 0:
                raise httpcore.ReadTimeout("the time for this request ran out")
            return left if timeout is None else min(timeout, left)

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self.inner.read(max_bytes, self._left(timeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.inner.write(buffer, self._left(timeout))

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                      timeout: float | None = None) -> Any:
            return DeadlineNetworkStream(self.inner.start_tls(
                ssl_context, server_hostname, self._left(timeout)), self.limits)

        def close(self) -> None:
            self.inner.close()

        def get_extra_info(self, info: str) -> Any:
            return self.inner.get_extra_info(info)

    class DeadlineNetworkBackend:
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
        def __init__(self, inner: Any, limits: tuple, request: Any) -> None:
            self.inner, self.request = inner, request
            self.instant, self.max_bytes, self.per_line = limits

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
            if hasattr(self.inner, "close"):
                self.inner.close()

    class DeadlineTransport(http.BaseTransport):
        """httpx's transport, with this thread's requests ending by the instant and their
        bodies stopping at the cap set with `until`."""

        def __init__(self) -> None:
            self.inner = http.HTTPTransport()
            self._local = _Limits()
            # no public option reaches the socket: wrap the pool's network backend
            pool = self.inner._pool
            pool._network_backend = DeadlineNetworkBackend(pool._network_backend, self._local)

        @contextmanager
        def until(self, instant: float | None, max_bytes: int | None = None,
                  per_line: bool = False) -> Iterator[None]:
            """This thread's requests in the block end by ``instant`` and raise `ReplyTooLarge`
            past ``max_bytes`` of body (``per_line``: of one line of a stream)."""
            local = self._local
            previous = local.instant, local.max_bytes, local.per_line
            local.instant, local.max_bytes, local.per_line = instant, max_bytes, per_line
            try:
                yield
            finally:
                local.instant, local.max_bytes, local.per_line = previous

        def handle_request(self, request: Any) -> Any:
            limits = instant, max_bytes, per_line = (
                self._local.instant, self._local.max_bytes, self._local.per_line)
            if instant is not None:
                left = instant - time.monotonic()
                if left <= 0:
                    raise http.ReadTimeout("the time for this request ran out before it was "
                                           "sent", request=request)
                given = request.extensions.get("timeout") or {}
                request.extensions["timeout"] = {
                    name: left if given.get(name) is None else min(float(given[name]), left)
                    for name in ("connect", "read", "write", "pool")}
            response = self.inner.handle_request(request)
            declared = response.headers.get("content-length", "")
            if (max_bytes is not None and not per_line and declared.isdigit()
                    and int(declared) > max_bytes):
                response.close()
                raise ReplyTooLarge(max_bytes)
            if instant is not None or max_bytes is not None:
                response.stream = DeadlineStream(response.stream, limits, request)
            return response

        def close(self) -> None:
            self.inner.close()

    return DeadlineTransport


#: The httpx transport the Ollama backend uses.
DeadlineTransport = deadline_transport_class(httpx)
