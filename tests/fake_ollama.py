"""A local HTTP server that speaks Ollama's REST protocol, for the tests.

`FakeOllama` listens on 127.0.0.1 on a free port, in a background thread, and answers what
the official `ollama` client asks: ``GET /api/version``, ``GET /api/tags`` (the models,
each with a digest: ``digests`` or the SHA-256 of its name) and ``POST /api/chat``
(streamed NDJSON, or one JSON object with ``"stream": false``; HTTP 404 for a model it
does not have).

The reply: ``reply(request body)`` when given; else, for a JSON schema in ``format``, the
smallest JSON value that fits it (`example_for`); else ``answer``, a table (user message
-> reply, ``default_answer`` otherwise) or a callable ``(messages, options)``.
``structured`` plays servers of other ages: "schema" (honour ``format``), "ignore" (plain
text, as Ollama before 0.5) or "reject" (HTTP 400 for a schema in ``format``).

Faults: `queue_faults` makes the next chat requests fail one each ("429", "500", "502",
"503", optionally with a ``Retry-After`` value as "503:3" or "429:<HTTP date>"; "empty",
"malformed", "non_text"; "slow:<s>" delays the reply, "trickle:<s>" sends it one byte
every so many seconds); ``latency`` and ``mode`` apply to every request. The server counts
requests per path (``requests``), keeps the chat request bodies (``chat_bodies``) and the
most chats it had in flight at once (``max_in_flight``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from standin_server import LoopbackServer

Answer = Mapping[str, str] | Callable[[list[dict[str, Any]], dict[str, Any]], str]

_STATUSES = ("429", "500", "502", "503")
_MODES = ("normal", "empty", "malformed", "non_text")


def _tagged(name: str) -> str:
    """Ollama's naming: a model name without a tag means the ``latest`` tag."""
    return name if ":" in name else f"{name}:latest"


def example_for(schema: Any) -> Any:
    """The smallest JSON value that fits a (simple) JSON schema."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for word in ("anyOf", "oneOf"):
        if schema.get(word):
            return example_for(schema[word][0])
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {name: example_for(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [example_for(schema.get("items", {}))] * int(schema.get("minItems", 0))
    if kind == "string":
        return "x" * int(schema.get("minLength", 1))
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    return False if kind == "boolean" else None


class FakeOllama(LoopbackServer):
    """An Ollama-compatible HTTP server on 127.0.0.1 (see the module docstring)."""

    name = "FakeOllama"

    def __init__(self, models: Iterable[str] = ("llama3.2",), answer: Answer | None = None,
                 default_answer: str = "The agent stands in an open cell. It can move left "
                                       "or right.",
                 latency: float = 0.0, mode: str = "normal",
                 reply: Callable[[dict[str, Any]], str] | None = None,
                 structured: str = "schema", digests: Mapping[str, str] | None = None) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode={mode!r}: expected one of {_MODES}")
        if structured not in ("schema", "ignore", "reject"):
            raise ValueError(f"structured={structured!r}: expected schema, ignore or reject")
        self.models = [_tagged(m) for m in models]
        self.answer: Answer = answer if answer is not None else {}
        self.default_answer, self.latency, self.mode = default_answer, float(latency), mode
        self.reply, self.structured = reply, structured
        self.digests = {_tagged(k): v for k, v in (digests or {}).items()}
        self.requests: Counter[str] = Counter()
        self.chat_bodies: list[dict[str, Any]] = []
        self.in_flight = self.max_in_flight = 0
        self._faults: deque[str] = deque()
        self._lock = threading.Lock()
        super().__init__()

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    @property
    def host(self) -> str:
        """The base URL to give the client, e.g. ``http://127.0.0.1:43117``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def chat_requests(self) -> int:
        return self.requests["/api/chat"]

    def queue_faults(self, *faults: str) -> None:
        """Make the next chat requests fail, one fault each, in order (module docstring)."""
        for fault in faults:
            kind, _, value = fault.partition(":")
            if kind in ("slow", "trickle"):
                float(value)  # a ValueError for a bad number
            elif kind not in _STATUSES and (fault not in _MODES or fault == "normal"):
                raise ValueError(f"unknown fault {fault!r}; expected one of {_STATUSES} (with "
                                 f":<Retry-After>), {_MODES[1:]}, slow:<s> or trickle:<s>")
            with self._lock:
                self._faults.append(fault)

    def digest_of(self, model: str) -> str:
        """The digest ``/api/tags`` reports for ``model``."""
        name = _tagged(model)
        return self.digests.get(name) or hashlib.sha256(name.encode()).hexdigest()

    def reply_for(self, body: dict[str, Any]) -> str:
        """The text this server answers to a chat request."""
        if self.reply is not None:
            return str(self.reply(body))
        if isinstance(body.get("format"), dict) and self.structured == "schema":
            return json.dumps(example_for(body["format"]))
        messages = list(body.get("messages") or [])
        if callable(self.answer):
            return str(self.answer(messages, dict(body.get("options") or {})))
        user = next((m.get("content", "") for m in reversed(messages)
                     if m.get("role") == "user"), "")
        return self.answer.get(user, self.default_answer)

    def chat(self, body: dict[str, Any]) -> tuple[int, bytes, dict[str, str], float]:
        """``(status, body, headers, seconds per byte)`` of the answer to one chat request."""
        model = str(body.get("model") or "")
        with self._lock:
            self.chat_bodies.append(body)
            if not model or _tagged(model) not in self.models:
                return _error(404, f'model "{model}" not found, try pulling it first')
            fault = self._faults.popleft() if self._faults else None
        kind, _, value = (fault or "").partition(":")
        self._stopping.wait(self.latency + (float(value) if kind == "slow" else 0.0))
        if isinstance(body.get("format"), dict) and self.structured == "reject":
            return _error(400, "json: cannot unmarshal object into Go struct field "
                               "ChatRequest.format of type string")
        if kind in _STATUSES:
            return _error(int(kind), f"simulated server error {kind}",
                          {"Retry-After": value} if value else {})
        mode = fault if fault in _MODES else self.mode
        if mode == "malformed":
            return 200, b"<html>this is not JSON", {}, 0.0
        content: Any = {"empty": "", "non_text": {"text": "not a string"}}.get(mode)
        if content is None:
            content = self.reply_for(body)
        pieces = ([content] if not (isinstance(content, str) and content)
                  else [w if i == 0 else " " + w for i, w in enumerate(content.split(" "))])
        lines = [{"model": model, "message": {"role": "assistant", "content": p},
                  "done": False} for p in pieces]
        last = {"model": model, "message": {"role": "assistant", "content": ""}, "done": True,
                "done_reason": "stop", "prompt_eval_count": 10, "eval_count": 10}
        if not body.get("stream", True):
            last["message"]["content"] = content  # type: ignore[index]
            lines = []
        data = b"".join(json.dumps(line).encode() + b"\n" for line in [*lines, last])
        return 200, data, {}, float(value) if kind == "trickle" else 0.0


def _error(status: int, message: str, headers: dict[str, str] | None = None
           ) -> tuple[int, bytes, dict[str, str], float]:
    return status, json.dumps({"error": message}).encode(), headers or {}, 0.0


def _handler(fake: FakeOllama) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            return

        def send(self, status: int, body: bytes, headers: Mapping[str, str] | None = None,
                 trickle: float = 0.0) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                step = 1 if trickle else len(body) or 1
                for i in range(0, len(body), step):  # one byte at a time when trickling
                    if fake._stopping.is_set():
                        return
                    self.wfile.write(body[i:i + step])
                    self.wfile.flush()
                    fake._stopping.wait(trickle)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            with fake._lock:
                fake.requests[self.path] += 1
            if self.path == "/api/version":
                self.send(200, b'{"version": "0.6.0"}')
            elif self.path == "/api/tags":
                models = [{"name": m, "model": m, "digest": fake.digest_of(m),
                           "size": 100_000_000} for m in fake.models]
                self.send(200, json.dumps({"models": models}).encode())
            else:
                self.send(*_error(404, f"404 page not found: {self.path}"))

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            with fake._lock:
                fake.requests[self.path] += 1
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = None
            if not isinstance(body, dict):
                self.send(*_error(400, "the request body is not a JSON object"))
            elif self.path != "/api/chat":
                self.send(*_error(404, f"404 page not found: {self.path}"))
            else:
                with fake._lock:
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    reply = fake.chat(body)
                finally:  # before the reply: the client may send its next request on reading it
                    with fake._lock:
                        fake.in_flight -= 1
                self.send(*reply)

    return Handler
