"""A local HTTP server that speaks Ollama's REST protocol, for tests.

`FakeOllama` listens on 127.0.0.1 on a free port, in a background thread, and answers the
endpoints the LLM adapters use, as documented by Ollama (docs/api.md) and as the official
`ollama` Python client parses them:

- ``GET  /api/version`` -> ``{"version": "0.6.0"}``
- ``GET  /api/tags``    -> ``{"models": [{"name", "model", "modified_at", "size", "digest",
  "details"}, ...]}``
- ``POST /api/show``    -> the model's details, or 404 ``{"error": "model \\"x\\" not found,
  try pulling it first"}``
- ``POST /api/chat``    -> streaming NDJSON (the default, ``"stream": true``) or one JSON
  object (``"stream": false``); 404 as above for a model the server does not have.

Answers come from ``reply``, a callable ``(request json) -> str`` given the whole chat
request body (messages, options, format, ...) when set; else from ``answer``: a fixed table
(dict: user message -> reply, with ``default_answer`` for anything else) or a callable
``(messages, options) -> str`` (one test plugs in the embedded llama.cpp model). A request
with a JSON schema in ``format`` gets, without ``reply``, the smallest JSON value that fits
the schema (`example_for`). ``structured`` plays servers of other ages: "schema" (honour
``format``), "ignore" (answer plain text, as Ollama before 0.5 did) or "reject" (HTTP 400
for a schema ``format``). ``digests`` sets the digest ``/api/tags`` reports per model
(default: SHA-256 of the name). Faults are queued per chat request with
`queue_faults` ("429", "500", "502", "503" — each optionally with a ``Retry-After`` value,
"503:3" or "429:<HTTP date>" —, "empty", "malformed", "non_text", "slow:<seconds>",
"trickle:<seconds>": the reply sent one byte every so many seconds) or set for every request
with `latency` / `mode`. The server counts requests per path, keeps the
chat request bodies, and tracks the largest number of chats in flight at once.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Mapping[str, str] | Callable[[list[dict[str, Any]], dict[str, Any]], str]

_STATUSES = ("429", "500", "502", "503")
_FAULTS = (*_STATUSES, "empty", "malformed", "non_text")
_MODES = ("normal", "empty", "malformed", "non_text")


def normalise_model_name(name: str) -> str:
    """Ollama's model naming: a name without a tag means the ``latest`` tag."""
    return name if ":" in name else f"{name}:latest"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class FakeOllama:
    """An Ollama-compatible HTTP server on 127.0.0.1 for tests (see the module docstring)."""

    def __init__(
        self,
        models: Iterable[str] = ("llama3.2",),
        answer: Answer | None = None,
        default_answer: str = "The agent stands in an open cell. It can move left or right.",
        latency: float = 0.0,
        mode: str = "normal",
        reply: Callable[[dict[str, Any]], str] | None = None,
        structured: str = "schema",
        digests: Mapping[str, str] | None = None,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        if structured not in ("schema", "ignore", "reject"):
            raise ValueError(f"structured must be schema, ignore or reject, got {structured!r}")
        self.reply = reply
        self.structured = structured
        self.digests = {normalise_model_name(k): v for k, v in (digests or {}).items()}
        self.models = [normalise_model_name(m) for m in models]
        self.answer = answer if answer is not None else {}
        self.default_answer = default_answer
        self.latency = float(latency)
        self.mode = mode
        self.requests: Counter[str] = Counter()
        self.chat_bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._faults: deque[str] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> FakeOllama:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread."""
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (slow answers in progress are cut short)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeOllama is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        """The base URL to give the client, e.g. ``http://127.0.0.1:43117``."""
        return f"http://127.0.0.1:{self.port}"

    # ---- behaviour -------------------------------------------------------------------
    def queue_faults(self, *faults: str) -> None:
        """Make the next chat requests fail, one fault per request, in order.

        A fault is "429" / "500" / "502" / "503" (that HTTP status with an error body;
        "503:<value>" adds the header ``Retry-After: <value>``, seconds or an HTTP date),
        "empty" (an empty assistant message), "malformed" (a body that is not JSON),
        "non_text" (``message.content`` is a JSON object, not a string), "slow:<seconds>"
        (answer normally after that delay) or "trickle:<seconds>" (answer normally, but one
        byte of the reply every that many seconds).
        """
        for fault in faults:
            kind, _, value = fault.partition(":")
            timed = kind in ("slow", "trickle")
            if timed:
                float(value)  # a ValueError for a bad number
            if not (fault in _FAULTS or kind in _STATUSES or timed):
                raise ValueError(f"unknown fault {fault!r}; expected one of {_FAULTS}, "
                                 "<status>:<Retry-After>, slow:<s> or trickle:<s>")
            with self._lock:
                self._faults.append(fault)

    @property
    def chat_requests(self) -> int:
        return self.requests["/api/chat"]

    def reply_for(self, messages: list[dict[str, Any]], options: dict[str, Any],
                  body: dict[str, Any] | None = None) -> str:
        """The text this server answers to a chat request."""
        body = body or {}
        if self.reply is not None:
            return str(self.reply(body))
        schema = body.get("format")
        if isinstance(schema, dict) and self.structured == "schema":
            return json.dumps(example_for(schema))
        if callable(self.answer):
            return str(self.answer(messages, options))
        user = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"),
                    "")
        return self.answer.get(user, self.default_answer)

    def digest_of(self, model: str) -> str:
        """The digest ``/api/tags`` reports for ``model``."""
        name = normalise_model_name(model)
        return self.digests.get(name) or hashlib.sha256(name.encode()).hexdigest()

    def _next_fault(self) -> str | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def _enter_chat(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave_chat(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _make_handler(fake: FakeOllama) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"
        server_version = "FakeOllama/0.6"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            return

        # -- helpers
        def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None,
                       trickle: float = 0.0) -> None:
            body = json.dumps(payload).encode()
            self._send_bytes(status, body, "application/json; charset=utf-8", headers, trickle)

        def _send_bytes(self, status: int, body: bytes, content_type: str,
                        headers: Mapping[str, str] | None = None, trickle: float = 0.0) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                if not trickle:
                    self.wfile.write(body)
                    return
                self.wfile.flush()
                for i in range(len(body)):  # one byte at a time, until the client gives up
                    if fake._stopping.is_set():
                        return
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    fake._sleep(trickle)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _read_json(self) -> dict[str, Any] | None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send_json(400, {"error": "invalid JSON in request body"})
                return None
            if not isinstance(body, dict):
                self._send_json(400, {"error": "request body must be a JSON object"})
                return None
            return body

        def _not_found(self, model: str) -> None:
            self._send_json(404, {"error": f'model "{model}" not found, try pulling it first'})

        def _has(self, model: str) -> bool:
            return bool(model) and normalise_model_name(model) in fake.models

        # -- routes
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            with fake._lock:
                fake.requests[self.path] += 1
            if self.path == "/api/version":
                self._send_json(200, {"version": "0.6.0"})
            elif self.path == "/api/tags":
                self._send_json(200, {"models": [_model_entry(m, fake.digest_of(m))
                                                 for m in fake.models]})
            else:
                self._send_json(404, {"error": f"404 page not found: {self.path}"})

        def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
            self._send_bytes(200, b"", "text/plain")

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            with fake._lock:
                fake.requests[self.path] += 1
            body = self._read_json()
            if body is None:
                return
            if self.path == "/api/show":
                model = str(body.get("model") or body.get("name") or "")
                if not self._has(model):
                    self._not_found(model)
                    return
                self._send_json(200, _show_payload(normalise_model_name(model)))
            elif self.path == "/api/chat":
                fake._enter_chat()
                try:
                    self._chat(body)
                finally:
                    fake._leave_chat()
            else:
                self._send_json(404, {"error": f"404 page not found: {self.path}"})

        def _chat(self, body: dict[str, Any]) -> None:
            with fake._lock:
                fake.chat_bodies.append(body)
            model = str(body.get("model") or "")
            if not self._has(model):
                self._not_found(model)
                return
            fault = fake._next_fault()
            mode = fake.mode
            delay = fake.latency
            trickle = 0.0
            kind, _, value = (fault or "").partition(":")
            if kind == "slow":
                delay += float(value)
                fault = None
            elif kind == "trickle":
                trickle = float(value)
                fault = None
            if delay:
                fake._sleep(delay)
            if isinstance(body.get("format"), dict) and fake.structured == "reject":
                self._send_json(400, {"error": "json: cannot unmarshal object into Go struct "
                                      "field ChatRequest.format of type string"})
                return
            if kind in _STATUSES:
                self._send_json(int(kind), {"error": f"simulated server error {kind}"},
                                {"Retry-After": value} if value else None)
                return
            mode = fault or mode
            if mode == "malformed":
                self._send_bytes(200, b"<html>this is not JSON", "application/json")
                return
            messages = list(body.get("messages") or [])
            options = dict(body.get("options") or {})
            content: Any
            if mode == "empty":
                content = ""
            elif mode == "non_text":
                content = {"text": "not a string"}
            else:
                content = fake.reply_for(messages, options, body)
            stream = body.get("stream", True)
            if stream:
                self._stream(model, content, trickle)
            else:
                self._send_json(200, _chat_chunk(model, content, done=True), trickle=trickle)

        def _stream(self, model: str, content: Any, trickle: float = 0.0) -> None:
            pieces: list[Any]
            if isinstance(content, str) and content:
                words = content.split(" ")
                pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
            else:
                pieces = [content]
            lines = [_chat_chunk(model, p, done=False) for p in pieces]
            lines.append(_chat_chunk(model, "", done=True))
            data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
            self._send_bytes(200, data, "application/x-ndjson", trickle=trickle)

    return Handler


def _chat_chunk(model: str, content: Any, done: bool) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "model": model,
        "created_at": _now(),
        "message": {"role": "assistant", "content": content},
        "done": done,
    }
    if done:
        chunk.update(
            done_reason="stop",
            total_duration=1_000_000,
            load_duration=1000,
            prompt_eval_count=10,
            prompt_eval_duration=1000,
            eval_count=10,
            eval_duration=1000,
        )
    return chunk


def _details() -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": "llama",
        "families": ["llama"],
        "parameter_size": "135M",
        "quantization_level": "Q4_1",
    }


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
    if kind == "boolean":
        return False
    return None


def _model_entry(name: str, digest: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": name,
        "modified_at": _now(),
        "size": 100_000_000,
        "digest": digest,
        "details": _details(),
    }


def _show_payload(name: str) -> dict[str, Any]:
    return {
        "modelfile": f"FROM {name}",
        "parameters": "temperature 0",
        "template": "{{ .Prompt }}",
        "details": _details(),
        "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
        "capabilities": ["completion"],
        "modified_at": _now(),
    }
