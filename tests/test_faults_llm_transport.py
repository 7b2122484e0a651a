"""Reliability of the LLM layer (issue 22, the LLM-layer rows) and its settings/state split
(issue 23 item 6): each test failed on the code before.

- Row 10: HTTP 429/503 with Retry-After, a server trickling its reply, a deadline per call;
- Row 8: a cache file that cannot be written costs a warning, not the answer;
- Row 5: 5,000 nested ``[`` and over-long replies are bounded errors;
- Row 13: a truncated GGUF, a blank model, a host with a port out of range;
- Row 7: one breaker and one warning throttle however many per-call seeds.

Servers are `FakeOllama` (tests/fake_ollama.py) on 127.0.0.1 with small timeouts.
"""

from __future__ import annotations

import copy
import email.utils
import json
import logging
import os
import pickle
import re
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from adapter_fixtures import CountingEncoder
from fake_ollama import FakeOllama
from pydantic import ValidationError

from langadapt import adapters
from langadapt.llm import (
    MAX_JSON_DEPTH,
    BackendRuntime,
    LlamaCppBackend,
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    OllamaBackend,
    OpenAIBackend,
    SQLiteStore,
    StructuredOutputError,
    default_gguf_path,
    parse_json_reply,
)

MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


@pytest.fixture
def fake():
    server = FakeOllama(default_answer="served").start()
    yield server
    server.stop()


def _backend(fake: FakeOllama, **settings) -> OllamaBackend:
    settings.setdefault("cache_path", None)
    settings.setdefault("backoff", 0.01)
    return OllamaBackend(host=fake.host, **settings)


# ---------------------------------------------------------------- row 10: Retry-After
def test_429_with_retry_after_is_retried_after_the_wait(fake):
    fake.queue_faults("429:1")
    backend = _backend(fake)
    start = time.monotonic()
    assert backend.complete("s", "u") == "served"
    assert 0.9 <= time.monotonic() - start < 5
    assert fake.chat_requests == 2 and backend.stats()["llm_retries"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_503_retry_after_is_honoured_not_the_backoff(fake, stream):
    fake.queue_faults("503:1")
    backend = _backend(fake, stream=stream)  # backoff 0.01 s: the server asked for 1 s
    start = time.monotonic()
    assert backend.complete("s", "u") == "served"
    assert 0.9 <= time.monotonic() - start < 5


def test_a_long_retry_after_is_capped_at_max_retry_after(fake):
    fake.queue_faults("503:3", "503:3")
    backend = _backend(fake, max_retry_after=0.3)
    start = time.monotonic()
    assert backend.complete("s", "u") == "served"
    assert 0.55 <= time.monotonic() - start < 2.5  # two waits of 0.3 s, not of 3 s
    assert fake.chat_requests == 3


def test_retry_after_as_an_http_date(fake):
    from langadapt.llm.transport import retry_after_seconds

    now = 1_700_000_000.0
    assert retry_after_seconds(email.utils.formatdate(now + 30, usegmt=True), now) == 30
    assert retry_after_seconds(email.utils.formatdate(now - 30, usegmt=True), now) == 0
    assert retry_after_seconds(" 7 ") == 7 and retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None and retry_after_seconds("nan") is None
    fake.queue_faults("503:" + email.utils.formatdate(time.time() + 2, usegmt=True))
    backend = _backend(fake)
    start = time.monotonic()
    assert backend.complete("s", "u") == "served"
    assert 0.8 <= time.monotonic() - start < 5


def test_429_retries_run_out_with_one_error_naming_the_status(fake):
    fake.queue_faults("429:0", "429:0")
    backend = _backend(fake, retries=1)
    with pytest.raises(LLMError, match=r"HTTP 429.*2 attempt\(s\) in total; giving up"):
        backend.complete("s", "u")


# ---------------------------------------------------------------- row 10: time limits
@pytest.mark.parametrize("stream", [False, True])
def test_a_trickling_server_is_cut_off_at_timeout(fake, stream):
    fake.queue_faults("trickle:0.05")  # the reply, one byte every 0.05 s: > 15 s in all
    backend = _backend(fake, timeout=1.0, retries=0, stream=stream)
    start = time.monotonic()
    with pytest.raises(LLMUnavailableError, match=r"did not answer within timeout=1.0 s"):
        backend.complete("s", "u")
    assert time.monotonic() - start < 3
    assert backend.complete("s", "again") == "served"  # the next call is fine


def test_the_deadline_bounds_the_call_with_its_retries(fake):
    fake.queue_faults(*["500"] * 50)
    backend = _backend(fake, retries=20, backoff=0.2, max_backoff=0.2, deadline=1.0)
    start = time.monotonic()
    with pytest.raises(LLMError, match=r"HTTP 500.*past deadline=1.0 s"):
        backend.complete("s", "u")
    assert time.monotonic() - start < 1.5
    assert 2 <= fake.chat_requests <= 7


def test_a_retry_after_past_the_deadline_fails_at_once(fake):
    fake.queue_faults("503:30")
    backend = _backend(fake, deadline=5.0)
    start = time.monotonic()
    with pytest.raises(LLMError, match=r"asked to wait 30 s, past deadline=5.0 s"):
        backend.complete("s", "u")
    assert time.monotonic() - start < 1 and fake.chat_requests == 1


def test_a_slow_attempt_is_cut_at_the_deadline(fake):
    fake.queue_faults("slow:5")
    backend = _backend(fake, timeout=60, deadline=0.8, retries=3)
    start = time.monotonic()
    with pytest.raises(LLMUnavailableError, match=r"within the call's deadline=0.8 s"):
        backend.complete("s", "u")
    assert time.monotonic() - start < 2


# ---------------------------------------------------------------- row 5: bounded replies
def test_deeply_nested_json_is_one_structured_output_error(fake):
    fake.reply = lambda body: "[" * 5000
    backend = _backend(fake)
    with pytest.raises(StructuredOutputError, match="nested more than") as caught:
        backend.complete("s", "u", schema={"type": "array"})
    assert len(str(caught.value)) < 600
    assert backend.stats()["llm_failures"] == 1


def test_parse_json_reply_bounds_size_depth_and_numbers():
    assert parse_json_reply('{"a": [1, {"b": "[[[["}]}') == {"a": [1, {"b": "[[[["}]}
    deep = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json_reply(deep) is not None
    with pytest.raises(StructuredOutputError, match="nested more than"):
        parse_json_reply("[" + deep + "]")
    with pytest.raises(StructuredOutputError, match="more than the limit of 10"):
        parse_json_reply('"' + "x" * 20 + '"', max_chars=10)
    with pytest.raises(StructuredOutputError, match="cannot be read"):
        parse_json_reply("1" * 5000)
    with pytest.raises(StructuredOutputError, match="did not return JSON") as caught:
        parse_json_reply("{" * 3 + "x" * 10_000)
    assert isinstance(caught.value.__cause__, json.JSONDecodeError)
    assert len(str(caught.value)) < 400
    with pytest.raises(LLMReplyError):  # StructuredOutputError is an LLMReplyError
        parse_json_reply(None)


@pytest.mark.parametrize("stream", [False, True])
def test_an_over_long_reply_is_refused_not_cached_and_quoted_short(fake, tmp_path, stream):
    fake.reply = lambda body: "word " * 400_000  # 2 MB
    backend = _backend(fake, cache_path=tmp_path / "c.sqlite", stream=stream)
    with pytest.raises(LLMReplyError, match="more than max_reply_chars=1,000,000") as caught:
        backend.complete("s", "u")
    assert len(str(caught.value)) < 500
    assert len(backend.cache) == 0
    small = _backend(fake, max_reply_chars=100)
    with pytest.raises(LLMReplyError, match="max_reply_chars=100"):
        small.complete("s", "u")


# ---------------------------------------------------------------- row 7 + issue 23: per-call seed
def test_a_per_call_seed_is_sent_and_keyed(fake):
    backend = _backend(fake, seed=3)
    backend.complete("s", "u")
    backend.complete("s", "u", seed=5)
    backend.chat(MSGS, seed=5)  # the same request: a cache hit
    assert [b["options"]["seed"] for b in fake.chat_bodies] == [3, 5]
    assert backend.stats()["llm_cache_hits"] == 1 and backend.seed == 3
    assert backend.request_key(MSGS, seed=5) != backend.request_key(MSGS)
    assert backend.request_key(MSGS, seed=3) == backend.request_key(MSGS)
    for bad in (-1, 2**31, 1.5, "1", True):
        with pytest.raises(ValueError, match="seed="):
            backend.chat(MSGS, seed=bad)
    assert fake.chat_requests == 2


def test_one_breaker_and_one_warning_timer_for_every_seed(fake, caplog):
    fake.queue_faults(*["500"] * 100)
    backend = _backend(fake, retries=0, breaker_failures=3, breaker_cooldown=3600)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm"):
        for seed in range(20):
            with pytest.raises(LLMError):
                backend.complete("s", "u", seed=seed)
    stats = backend.stats()
    assert fake.chat_requests == 3
    assert stats["llm_failures"] == 3 and stats["llm_breaker_skips"] == 17
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert 1 <= len(warnings) <= 2, [r.getMessage() for r in warnings]


def test_settings_are_frozen_and_a_copy_has_its_own_state(fake):
    backend = _backend(fake)
    backend.complete("s", "u")
    assert isinstance(backend.runtime, BackendRuntime)
    with pytest.raises(ValidationError):
        backend.seed = 4  # type: ignore[misc]
    twin = backend.model_copy(update={"seed": 4})
    assert twin.runtime is not backend.runtime and twin.stats()["llm_calls"] == 0
    for clone in (copy.copy(backend), copy.deepcopy(backend), pickle.loads(pickle.dumps(backend))):
        assert clone.model_dump() == backend.model_dump()
        assert clone.runtime is not backend.runtime and clone != backend
        assert clone.complete("s", "u") == "served"
    assert backend.stats()["llm_calls"] == 1


# ---------------------------------------------------------------- row 8: unwritable caches
def _read_only_database(path: Path) -> None:
    """Make ``path`` a database SQLite itself opens read-only, as root too: a file format
    write version above 2 (https://www.sqlite.org/fileformat.html, header bytes 18-19)."""
    with path.open("r+b") as fh:
        fh.seek(18)
        fh.write(bytes([3]))


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_read_only_answer_cache_costs_one_warning_not_the_answer(fake, tmp_path, caplog):
    path = tmp_path / "answers.sqlite"
    first = _backend(fake, cache_path=path)
    assert first.complete("s", "old") == "served"
    first.cache.close()
    _read_only_database(path)
    backend = _backend(fake, cache_path=path)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm"):
        assert backend.complete("s", "old") == "served"  # read from the file
        assert backend.complete("s", "new") == "served"
        assert backend.complete("s", "newer") == "served"
        assert backend.complete("s", "new") == "served"  # kept in memory
    assert fake.chat_requests == 3
    assert backend.stats()["llm_cache_hits"] == 2 and backend.stats()["llm_failures"] == 0
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and str(path) in warnings[0] and "read-only" in warnings[0]
    assert backend.cache.read_only
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 1


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="file permissions do not stop root (the test above covers root)")
def test_a_read_only_file_and_folder(fake, tmp_path, caplog):
    folder = tmp_path / "cache"
    path = folder / "answers.sqlite"
    _backend(fake, cache_path=path).complete("s", "old")
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        backend = _backend(fake, cache_path=path)
        with caplog.at_level(logging.WARNING, logger="langadapt.llm"):
            assert backend.complete("s", "old") == "served"
            assert backend.complete("s", "new") == "served"
            assert backend.complete("s", "newer") == "served"
        assert fake.chat_requests == 3
        assert len(_warnings(caplog)) == 1 and str(path) in _warnings(caplog)[0]
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)


def test_a_cache_folder_that_cannot_be_made_is_one_warning(fake, tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = blocker / "answers.sqlite"
    backend = _backend(fake, cache_path=path)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm"):
        assert backend.complete("s", "u") == "served"
        assert backend.complete("s", "u") == "served"
        assert backend.complete("s", "v") == "served"
    assert fake.chat_requests == 2
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and str(path) in warnings[0] and "memory only" in warnings[0]


def test_a_read_only_embedding_cache_keeps_the_vectors(tmp_path, caplog):
    path = tmp_path / "emb.sqlite"
    writer = adapters.EmbeddingCache(CountingEncoder(), path=path)
    writer.get_many(["a", "b"])
    writer.close()
    _read_only_database(path)
    encoder = CountingEncoder()
    cache = adapters.EmbeddingCache(encoder, path=path)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm"):
        vectors = cache.get_many(["a", "b", "c", "d"])
        again = cache.get_many(["c", "d", "e"])
    assert vectors.shape == (4, 8) and again.shape == (3, 8)
    assert encoder.calls == 3  # c, d once; e
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and str(path) in warnings[0]
    assert cache.stored_count() == 2


def test_an_answer_cache_store_keeps_reading_after_a_write_fails(tmp_path):
    path = tmp_path / "a.sqlite"
    cache = SQLiteStore(path)
    cache.put("k", "kept", {})
    cache.close()
    _read_only_database(path)
    cache = SQLiteStore(path)
    cache.put("j", "in memory", {})
    assert cache.get("k") == "kept" and cache.get("j") == "in memory"
    assert len(SQLiteStore(path)) == 1


# ---------------------------------------------------------------- row 13: bad model / host
@pytest.fixture(scope="module")
def truncated_gguf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "cut.gguf"
    with default_gguf_path().open("rb") as src, path.open("wb") as out:
        out.write(src.read(40_000_000))
    return path


def test_a_truncated_gguf_is_one_error_naming_the_file(truncated_gguf, tmp_path):
    with pytest.raises(ValidationError, match=r"model[\s\S]*cut.gguf.*damaged or not a GGUF"
                                              r".*truncated"):
        LlamaCppBackend(model=truncated_gguf, cache_path=None)
    text = tmp_path / "notes.gguf"
    text.write_text("hello " * 100)
    with pytest.raises(ValidationError, match=r"notes.gguf.*not a GGUF model file"):
        LlamaCppBackend(model=text, cache_path=None)


def test_a_truncated_gguf_at_load_time_is_llm_unavailable(truncated_gguf):
    from langadapt.llm.llamacpp import load_llama

    with pytest.raises(LLMUnavailableError, match=r"cut.gguf.*truncated"):
        load_llama(truncated_gguf, 512, 1)


def test_a_truncated_gguf_for_transformers_names_the_file(truncated_gguf):
    from langadapt.llm.transformers_backend import resolve_model_source

    with pytest.raises(ValueError, match=r"cut.gguf.*truncated"):
        resolve_model_source(truncated_gguf)
    with pytest.raises(ValueError, match="is blank"):
        resolve_model_source("  ")


@pytest.mark.parametrize("model", ["", " "])
def test_a_blank_model_is_refused(model):
    with pytest.raises(ValidationError, match=r"model[\s\S]*is blank"):
        LlamaCppBackend(model=model, cache_path=None)


@pytest.mark.parametrize(("host", "why"), [
    ("http://127.0.0.1:99999", "from 1 to 65535"),
    ("http://127.0.0.1:0", "from 1 to 65535"),
    ("http://127.0.0.1:port", "from 1 to 65535"),
    ("ftp://127.0.0.1:11434", "not http or https"),
])
def test_a_bad_host_is_refused_at_construction(host, why):
    with pytest.raises(ValidationError, match=r"host") as caught:
        OllamaBackend(host=host, cache_path=None)
    assert why in str(caught.value) and host in str(caught.value)


@pytest.mark.parametrize("host", ["127.0.0.1:11434", "http://[::1]:11434", "localhost",
                                  "https://example.com/ollama"])
def test_good_hosts_pass(host):
    assert OllamaBackend(host=host, cache_path=None).host == host


# ================================================================ issue 32: the HTTP transport
# A raw socket server on 127.0.0.1 plays what no healthy server does (a reply that is not
# JSON, 300 MB, endless, headers one line at a time, redirects); each connection reads one
# request and hands the socket to ``play(conn, head)``; every connection ends within 30 s.
KEY_ENV = "LANGADAPT_FAULT_API_KEY"
MODEL = "m"
COMPLETION = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": MODEL,
                         "choices": [{"index": 0, "finish_reason": "stop", "message": {
                             "role": "assistant", "content": "served"}}]}).encode()


class RawServer:
    def __init__(self, play) -> None:
        self.play, self.heads = play, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        with conn:
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536) or b"\r\n\r\n"
                head, _, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                while length and len(body) < int(length[1]):
                    body += conn.recv(65536)
                self.heads.append(head.decode("latin-1") + "\n\n" + body.decode("latin-1"))
                self.play(conn, head.decode("latin-1"))
            except OSError:  # the client hung up: what a cap or a deadline does
                pass

    def stop(self) -> None:
        self.running = False
        self.thread.join(timeout=5)
        self.sock.close()


def _reply(conn: socket.socket, body: bytes, status: str = "200 OK",
           headers: str = "Content-Type: application/json\r\n") -> None:
    conn.sendall(f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)


@pytest.fixture
def raw():
    servers: list[RawServer] = []

    def start(play) -> RawServer:
        servers.append(RawServer(play))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def _openai(server: RawServer, **settings) -> OpenAIBackend:
    settings.setdefault("cache_path", None)
    settings.setdefault("backoff", 0.01)
    settings.setdefault("api_key_env", KEY_ENV)
    return OpenAIBackend(base_url=f"{server.url}/v1", model=MODEL, **settings)


def _completion(conn: socket.socket, head: str) -> None:
    _reply(conn, COMPLETION)


# ---------------------------------------------------------------- row 3: the API key
def test_a_key_with_a_trailing_newline_is_stripped_not_an_outage(raw, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-abc123\n")  # as `echo key > file` leaves it
    server = raw(_completion)
    backend = _openai(server, retries=3)
    assert backend.complete("s", "u") == "served"
    assert all("authorization: bearer sk-abc123\r\n" in head.lower() for head in server.heads)
    assert backend.stats()["llm_retries"] == 0


@pytest.mark.parametrize("key", ["sk-a\x01b", "sk-a b", "sk-a\nb"])
def test_an_unusable_key_is_one_error_naming_the_variable(raw, monkeypatch, key):
    server = raw(_completion)
    monkeypatch.setenv(KEY_ENV, key)
    with pytest.raises(ValueError, match=KEY_ENV) as caught:  # at construction: exit 2
        _openai(server)
    assert "sk-a" not in str(caught.value) and "printable ASCII" in str(caught.value)
    monkeypatch.setenv(KEY_ENV, "sk-good")
    backend = _openai(server, retries=3)
    monkeypatch.setenv(KEY_ENV, key)  # changed before first use (another process's env)
    with pytest.raises(LLMError, match=KEY_ENV) as caught:
        backend.complete("s", "u")
    assert "sk-a" not in str(caught.value) and "\n" not in str(caught.value)
    assert server.heads == [] and backend.stats()["llm_retries"] == 0
    assert backend.stats()["llm_failures"] == 0 and not backend.breaker_open  # not an outage


def test_the_key_is_cut_out_of_errors_in_escaped_and_repr_forms(raw, monkeypatch):
    key = 'sk-x\\y"z'  # a backslash and a quote: repr and JSON escape them
    monkeypatch.setenv(KEY_ENV, key)

    def echo(conn: socket.socket, head: str) -> None:
        sent = re.search(r"(?i)authorization: bearer (.*?)\r\n", head)[1]
        detail = f"bad key {sent!r} {json.dumps(sent)} {sent.encode()!r} {sent}"
        _reply(conn, json.dumps({"error": {"message": detail}}).encode(), "401 Unauthorized")

    backend = _openai(raw(echo))
    with pytest.raises(LLMError, match="HTTP 401") as caught:
        backend.complete("s", "u")
    text = str(caught.value)
    for form in (key, repr(key)[1:-1], json.dumps(key)[1:-1], repr(key.encode())[2:-1]):
        assert form not in text, text
    assert text.count("***") == 4


# ---------------------------------------------------------------- row 4: HTTP 200, not JSON
@pytest.mark.parametrize("body", [b"<html>not json</html>", b"[" * 100_000 + b"]" * 100_000])
def test_a_200_that_is_not_json_is_a_reply_error_and_the_fallback_applies(
        raw, monkeypatch, body):
    monkeypatch.setenv(KEY_ENV, "sk-k")
    backend = _openai(raw(lambda conn, head: _reply(conn, body)), retries=2)
    with pytest.raises(LLMReplyError, match="not a valid chat completion") as caught:
        backend.complete("s", "u")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
    assert backend.stats()["llm_failures"] == 1 and backend.stats()["llm_retries"] == 0


def test_a_100k_deep_ollama_reply_is_a_reply_error(raw):
    backend = OllamaBackend(host=raw(lambda c, h: _reply(c, b"[" * 100_000)).url,
                            cache_path=None, retries=0)
    with pytest.raises(LLMReplyError, match="not a valid chat response"):
        backend.complete("s", "u")


# ---------------------------------------------------------------- row 5: bounded reply size
def _huge(conn: socket.socket, head: str) -> None:  # declares 300 MB, sends until cut off
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 300000000\r\n\r\n" + b'{"choices": "')
    for _ in range(300):
        conn.sendall(b"x" * 1_000_000)


def _endless(conn: socket.socket, head: str) -> None:  # chunked, never ends
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 65536
    for _ in range(10_000):  # 650 MB at most
        conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))


@pytest.mark.parametrize("play", [_huge, _endless])
def test_a_huge_or_endless_reply_stops_at_the_byte_cap(raw, monkeypatch, play):
    from langadapt.llm.transport import reply_byte_cap

    monkeypatch.setenv(KEY_ENV, "sk-k")
    backend = _openai(raw(play), max_reply_chars=1000, retries=2, timeout=20)
    start = time.monotonic()
    with pytest.raises(LLMReplyError, match=f"more than {reply_byte_cap(1000):,} bytes"):
        backend.complete("s", "u")
    assert time.monotonic() - start < 5 and backend.stats()["llm_retries"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_an_endless_ollama_reply_stops_at_the_byte_cap(raw, stream):
    backend = OllamaBackend(host=raw(_endless).url, cache_path=None, retries=0, timeout=20,
                            max_reply_chars=1000, stream=stream)
    with pytest.raises(LLMReplyError, match="more than 73,536 bytes"):
        backend.complete("s", "u")


# ---------------------------------------------------------------- row 6: trickled headers
def _header_trickle(conn: socket.socket, head: str) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for n in range(200):  # one header line every 0.5 s: 100 s in all
        conn.sendall(f"X-Slow-{n}: 1\r\n".encode())
        time.sleep(0.5)


@pytest.mark.parametrize("which", ["openai", "ollama"])
def test_the_deadline_covers_a_server_trickling_its_headers(raw, monkeypatch, which):
    monkeypatch.setenv(KEY_ENV, "sk-k")
    server = raw(_header_trickle)
    backend = (_openai(server, timeout=2, deadline=5, retries=5) if which == "openai" else
               OllamaBackend(host=server.url, cache_path=None, timeout=2, deadline=5,
                             retries=5, backoff=0.01))
    start = time.monotonic()
    with pytest.raises(LLMUnavailableError, match="within"):
        backend.complete("s", "u")  # the model list (identity) and the chat: 5 s in all
    assert time.monotonic() - start < 6


# ---------------------------------------------------------------- smaller: settings, redirects
def test_a_key_inside_base_url_is_refused_without_echoing_it():
    with pytest.raises(ValueError, match="api_key_env") as caught:
        OpenAIBackend(base_url="http://u:sk-X@127.0.0.1:8000/v1", model=MODEL)
    assert "sk-X" not in str(caught.value)


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "HOME"])
def test_api_key_env_must_name_an_api_key_variable(name):
    with pytest.raises(ValueError, match=f"{name}.*_API_KEY or _API_TOKEN"):
        OpenAIBackend(base_url="http://127.0.0.1:8000/v1", model=MODEL, api_key_env=name)


@pytest.mark.parametrize("status", ["307 Temporary Redirect", "301 Moved Permanently"])
def test_a_redirect_is_reported_not_followed(raw, monkeypatch, tmp_path, status):
    monkeypatch.setenv(KEY_ENV, "sk-k")
    elsewhere = raw(_completion)
    moved = raw(lambda conn, head: _reply(conn, b"", status,
                                          f"Location: {elsewhere.url}/v1/chat/completions\r\n"))
    backend = _openai(moved, cache_path=tmp_path / "c.sqlite")
    with pytest.raises(LLMError, match=f"HTTP {status[:3]}, a redirect to {elsewhere.url}"):
        backend.complete("s", "u")
    assert elsewhere.heads == [] and len(backend.cache) == 0
    ollama_moved = OllamaBackend(host=moved.url, cache_path=None, retries=0)
    with pytest.raises(LLMError, match=f"HTTP {status[:3]}, a redirect"):
        ollama_moved.complete("s", "u")
    assert elsewhere.heads == []
