"""A local OpenAI-compatible stand-in server with a fixed latency and a fixed number of
parallel slots, for benchmarks and tests (standard library only).

`StandInServer` listens on 127.0.0.1 (a free port) in a background thread and answers
``GET /v1/models`` and ``POST /v1/chat/completions`` as an OpenAI-compatible server does.
Each chat request holds one of ``slots`` for ``latency`` seconds, then gets its answer:
``reply`` (a string, or a callable of the request body), else a description derived
from the last user message (distinct prompts, distinct texts; same prompt, same text).
A request that finds every slot taken waits for one (``when_full="queue"``, as
llama.cpp's server and vLLM do) or is refused at once with HTTP 429 and ``Retry-After``
(``when_full="429"``, as a rate-limited API does; ``retry_after`` seconds, sent as
``retry-after-ms`` and as whole seconds in ``Retry-After``).

It counts what a client did: ``chat_requests``, ``answered``, ``rejected`` (429s for a
full server), ``max_in_flight`` (the most chat requests it held at once, queued or
answered) and ``max_busy`` (the most slots taken at once) — `counts`, also served as JSON
at ``GET /stand-in/counts`` — and keeps every POST request's ``bodies``, arrival
``times`` and ``authorizations``.

Faults, for tests: ``faults`` (a deque) makes the next chat requests fail one each:
"401", "404", "404-model", "429:<Retry-After>", "500", "503", "slow:<s>" (answer after
that many seconds), "trickle:<s>" (send the reply one byte every so many seconds),
"ignore" (plain text, whatever the request's schema).

A test fixture, also the server of ``langadapt bench --only llm_concurrency`` (not part of
the installed package). ``python tests/standin_server.py --latency 0.2 --slots 32`` (or
`command`) serves one in a process of its own until interrupted or terminated (it prints
its base URL first).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["LoopbackServer", "StandInServer", "command"]


def described(body: dict[str, Any]) -> str:
    """The stand-in's answer to a chat request: a text naming a digest of the whole last
    user message and its first line."""
    user = next((m.get("content", "") for m in reversed(body.get("messages", []))
                 if m.get("role") == "user"), "")
    digest = hashlib.sha256(str(user).encode()).hexdigest()[:12]
    first = str(user).split("\n")[0][:200]
    return f"Stand-in description {digest}: {first}"


class LoopbackServer:
    """An HTTP server of ours on 127.0.0.1 (a free port), served in a background thread:
    `start` / `stop` or ``with``; a subclass gives its request handler class
    (`handler_class`) and its name in errors (``name``). ``_stopping`` is set while it
    stops, for handlers that wait."""

    name = "the server"

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError(f"{type(self).__name__} does not implement handler_class()")

    def start(self) -> Any:
        """Bind a free port on 127.0.0.1 and serve in a background thread; returns self."""
        if self._server is not None:
            raise RuntimeError(f"{self.name} is already running")
        server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler_class(),
                                     bind_and_activate=False)
        server.request_queue_size = 256  # the listen backlog: every client connects at once
        server.daemon_threads = True
        server.server_bind()
        server.server_activate()
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(target=server.serve_forever, name=type(self).__name__,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, release the port and end the serving thread (requests being
        answered are cut short)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"{self.name} is not running; call start() first")
        return int(self._server.server_address[1])


class StandInServer(LoopbackServer):
    """An OpenAI-compatible server on 127.0.0.1 (see the module docstring)."""

    name = "the stand-in server"

    def __init__(self, latency: float = 0.2, slots: int = 32, when_full: str = "queue",
                 retry_after: float = 0.2, model: str = "stand-in",
                 reply: str | Callable[[dict[str, Any]], str] | None = None) -> None:
        if not latency >= 0:
            raise ValueError(f"latency={latency!r}: expected seconds >= 0")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots={slots!r}: expected a positive int")
        if when_full not in ("queue", "429"):
            raise ValueError(f"when_full={when_full!r}: expected 'queue' or '429'")
        if not retry_after >= 0:
            raise ValueError(f"retry_after={retry_after!r}: expected seconds >= 0")
        self.latency, self.slots, self.when_full = float(latency), slots, when_full
        self.retry_after, self.model, self.reply = float(retry_after), model, reply
        self.faults: deque[str] = deque()
        self.bodies: list[dict[str, Any]] = []
        self.times: list[float] = []
        self.authorizations: list[str | None] = []
        self.chat_requests = self.answered = self.rejected = 0
        self.in_flight = self.max_in_flight = self.busy = self.max_busy = 0
        self._free = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        super().__init__()

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    @property
    def base_url(self) -> str:
        """The API root to give a client, e.g. ``http://127.0.0.1:43117/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def capacity(self) -> float:
        """Answers per second the server can give at most: ``slots / latency``."""
        return float("inf") if self.latency == 0 else self.slots / self.latency

    def counts(self) -> dict[str, int]:
        """The counters (see the module docstring)."""
        with self._lock:
            return {"chat_requests": self.chat_requests, "answered": self.answered,
                    "rejected": self.rejected, "max_in_flight": self.max_in_flight,
                    "max_busy": self.max_busy}

    def reset_counts(self) -> None:
        """Set the counters to zero (e.g. between the parts of a benchmark)."""
        with self._lock:
            self.chat_requests = self.answered = self.rejected = 0
            self.max_in_flight, self.max_busy = self.in_flight, self.busy

    # ---- one chat request ------------------------------------------------------------
    def _arrived(self, body: dict[str, Any], authorization: str | None) -> None:
        """Keep a POST request's body, arrival time and authorization."""
        with self._lock:
            self.bodies.append(body)
            self.times.append(time.monotonic())
            self.authorizations.append(authorization)

    def _chat_in(self) -> str:
        """Count a chat request in; the fault it plays ("" for none)."""
        with self._lock:
            self.chat_requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.faults.popleft() if self.faults else ""

    def _take_slot(self) -> bool:
        """Take a slot (waiting for one with ``when_full="queue"``); False: refused."""
        if self.when_full == "429":
            if not self._free.acquire(blocking=False):
                with self._lock:
                    self.rejected += 1
                return False
        else:
            while not self._free.acquire(timeout=0.05):
                if self._stopping.is_set():
                    return False
        with self._lock:
            self.busy += 1
            self.max_busy = max(self.max_busy, self.busy)
        return True

    def _free_slot(self) -> None:
        with self._lock:
            self.busy -= 1
        self._free.release()

    def _left(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def answer_text(self, body: dict[str, Any]) -> str:
        """The content of the answer to ``body``."""
        if self.reply is None:
            return described(body)
        return self.reply if isinstance(self.reply, str) else self.reply(body)


def _handler(stand_in: StandInServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # the headers and the body are two writes: without this, Nagle's algorithm and the
        # client's delayed ACK hold every reply back about 40 ms
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def leave(self) -> None:
            """The chat request is no longer in flight (once): before its reply is
            written, since the client may send its next request as soon as it has read it."""
            if getattr(self, "in_flight", False):
                self.in_flight = False
                stand_in._left()

        def send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
                 trickle: float = 0.0) -> None:
            self.leave()
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if not trickle:
                self.wfile.write(body)
                return
            for byte in body:
                if stand_in._stopping.is_set():
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(trickle)

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path.rstrip("/") == "/v1/models":
                self.send(200, {"object": "list", "data": [
                    {"id": stand_in.model, "object": "model", "owned_by": "stand-in"}]})
            elif self.path == "/stand-in/counts":
                self.send(200, stand_in.counts())
            else:
                self.send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            stand_in._arrived(body, self.headers.get("Authorization"))
            if self.path != "/v1/chat/completions":
                self.send(404, {"detail": "Not Found"})
                return
            fault = stand_in._chat_in()
            self.in_flight = True
            try:
                self.play(body, fault)
            finally:
                self.leave()

        def play(self, body: dict[str, Any], fault: str) -> None:
            kind, _, arg = fault.partition(":")
            error = {"message": "", "type": "error", "code": None}
            if kind == "401":
                error["message"] = (f"Incorrect API key provided: "
                                    f"{self.headers.get('Authorization', '')[7:]}")
                self.send(401, {"error": error})
            elif kind == "404":
                self.send(404, {"detail": "Not Found"})
            elif kind == "404-model":
                error.update(message=f"The model `{body['model']}` does not exist.",
                             code="model_not_found")
                self.send(404, {"error": error})
            elif kind in ("429", "500", "503"):
                error["message"] = f"fault {kind}"
                self.send(int(kind), {"error": error}, {"Retry-After": arg} if arg else None)
            elif not stand_in._take_slot():
                wait = stand_in.retry_after
                error.update(message="all slots are busy", type="rate_limit_error")
                self.send(429, {"error": error}, {"Retry-After": str(max(1, round(wait))),
                                                  "retry-after-ms": str(round(wait * 1000))})
            else:
                try:
                    stand_in._stopping.wait(float(arg) if kind == "slow" else stand_in.latency)
                    content = ("Sure! I would go up." if kind == "ignore"
                               else stand_in.answer_text(body))
                finally:
                    stand_in._free_slot()
                if stand_in._stopping.is_set():  # stopped while answering: no answer
                    self.close_connection = True
                    return
                with stand_in._lock:
                    stand_in.answered += 1
                self.send(200, {
                    "id": "chatcmpl-stand-in", "object": "chat.completion", "created": 0,
                    "model": body.get("model", stand_in.model), "choices": [{
                        "index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
                    trickle=float(arg) if kind == "trickle" else 0.0)

    return Handler


def command(*args: str) -> list[str]:
    """The command that serves a stand-in in a process of its own until terminated
    (``args``: `main`'s options). It runs this file alone (``python -P``: the package is not
    imported, the file needs only the standard library), so it starts in a fraction of the
    time ``python -m`` takes."""
    return [sys.executable, "-P", str(Path(__file__).resolve()), *args]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve an OpenAI-compatible stand-in on "
                                     "127.0.0.1 until interrupted.")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per request")
    parser.add_argument("--slots", type=int, default=32, help="requests answered at once")
    parser.add_argument("--when-full", choices=("queue", "429"), default="queue")
    parser.add_argument("--retry-after", type=float, default=0.2,
                        help="seconds a 429 asks to wait")
    args = parser.parse_args(argv)
    server = StandInServer(args.latency, args.slots, args.when_full, args.retry_after).start()
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    print(server.base_url, flush=True)
    try:
        while server.running:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
