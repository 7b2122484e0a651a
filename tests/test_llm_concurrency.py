"""LLM requests in flight together: `adapt_many` of an LLM adapter (a step of N
environments) keeps at most ``concurrency`` requests in flight, counted by the servers
(the OpenAI-compatible stand-in, tests/standin_server.py, and the fake
Ollama); a
server with fewer slots (queueing, or answering 429 with Retry-After) slows it down and
never fails it; the answers are those of `adapt` one by one, and the store written from
the worker threads holds every one."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adapter_fixtures import CountingEncoder
from fake_ollama import FakeOllama
from standin_server import StandInServer, command

from langadapt import adapters, environments
from langadapt.adapters.llm import LLMAdapter, OllamaAdapter
from langadapt.llm import LLMError, make_backend
from langadapt.llm.runtime import BackendRuntime

MAZE = environments.MazeEnv(maze="medium")
#: distinct inputs: every reachable cell after every possible last action
INPUTS = adapters.reachable_inputs(MAZE, with_last_action=True)


def openai_adapter(server: StandInServer, cache_path: Path | None = None, **settings: Any
                   ) -> LLMAdapter:
    backend = make_backend({"backend": "openai", "base_url": server.base_url,
                            "model": server.model, "api_key_env": None,
                            "cache_path": cache_path, "backoff": 0.02,
                            **settings.pop("backend", {})})
    return LLMAdapter(MAZE, backend=backend, encoder=CountingEncoder(),
                      action_history_length=1, **settings)


def texts(pairs: list[tuple[np.ndarray, str]]) -> list[str]:
    return [text for _, text in pairs]


def test_adapt_many_keeps_concurrency_requests_in_flight_and_answers_as_adapt_does() -> None:
    batch = INPUTS[:16]
    with StandInServer(latency=0.05, slots=32) as server:
        one_by_one = openai_adapter(server, concurrency=4)
        alone = [one_by_one.adapt(*item) for item in batch]
        assert server.counts()["max_in_flight"] == 1
        server.reset_counts()
        together = openai_adapter(server, concurrency=4)
        many = together.adapt_many(batch)
        counts = server.counts()
        # seen inputs come from the memo; a repeated cold input is asked once
        again = together.adapt_many([*batch[:3], INPUTS[30], INPUTS[30]])
    assert texts(many) == texts(alone) and len(set(texts(many))) == len(batch)
    for (vector, _), (reference, _) in zip(many, alone, strict=True):
        np.testing.assert_array_equal(vector, reference)
    assert counts["chat_requests"] == len(batch) and counts["max_in_flight"] == 4
    assert texts(again)[:3] == texts(alone)[:3] and again[3][1] == again[4][1]
    assert together.stats()["llm_calls"] == len(batch) + 1


def test_the_bound_is_the_adapters_concurrency_on_ollama_too() -> None:
    batch = INPUTS[:20]
    with FakeOllama(latency=0.03, answer=lambda messages, options: messages[-1]["content"]
                    ) as fake:
        adapter = OllamaAdapter(MAZE, host=fake.host, cache_path=None, concurrency=5,
                                action_history_length=1, encoder=CountingEncoder())
        many = adapter.adapt_many(batch)
        reference = OllamaAdapter(MAZE, host=fake.host, cache_path=None, concurrency=5,
                                  action_history_length=1, encoder=CountingEncoder())
        assert texts(many) == [reference.describe(*item) for item in batch]
    assert fake.max_in_flight == 5 and fake.chat_requests == 2 * len(batch)


@pytest.mark.parametrize("when_full", ["queue", "429"])
def test_a_server_with_fewer_slots_slows_adapt_many_down_and_never_fails_it(
        when_full: str) -> None:
    batch = INPUTS[:16]
    with StandInServer(latency=0.03, slots=2, when_full=when_full, retry_after=0.02) as server:
        many = openai_adapter(server, concurrency=8).adapt_many(batch)  # retries: 3
        counts = server.counts()
        server.reset_counts()
        alone = openai_adapter(server, concurrency=1)
        reference = [alone.adapt(*item)[1] for item in batch]
    assert texts(many) == reference
    assert counts["answered"] == len(batch) and counts["max_busy"] == 2
    if when_full == "429":
        assert counts["rejected"] > 0  # refused, waited out, asked again
    else:
        assert counts["rejected"] == 0 and counts["max_in_flight"] == 8


def test_a_server_that_refuses_everything_still_fails_after_the_retries() -> None:
    with StandInServer(latency=0.0) as server:
        server.faults.extend(["429:0"] * 1000)
        adapter = openai_adapter(server, concurrency=4, backend={"retries": 1})
        started = time.monotonic()
        with pytest.raises(LLMError, match="HTTP 429"):
            adapter.adapt_many(INPUTS[:4])
        assert time.monotonic() - started < 1.5
        # Each request gets its 2 attempts; a refusal while others are out is a wait instead.
        # Those are bounded: requests let out under room r refuse with at most r in flight,
        # so room falls below r; with 4 threads, at most 4 + 3 + 2 crowded refusals
        # (room None, 3, 2; under room 1 a request is alone). CI saw 12.
        assert server.counts()["chat_requests"] <= 4 * 2 + (4 + 3 + 2)


def test_answers_written_by_the_worker_threads_are_all_in_the_store(tmp_path: Path) -> None:
    batch, store = INPUTS[:32], tmp_path / "cache.sqlite"
    with StandInServer(latency=0.02, slots=32) as server:
        first = texts(openai_adapter(server, store, concurrency=16).adapt_many(batch))
        rerun = openai_adapter(server, store, concurrency=16)
        assert texts(rerun.adapt_many(batch)) == first
        assert server.counts()["chat_requests"] == len(batch)
    stats = rerun.stats()
    assert stats["llm_calls"] == 0 and stats["llm_cache_hits"] == len(batch)


def test_the_room_a_full_server_shows_is_learnt_and_probed_again() -> None:
    runtime = BackendRuntime()
    with runtime.sending(), runtime.sending(), runtime.sending():
        assert runtime.server_full() is True  # two others were out: room for two
    assert runtime.room == 2
    with runtime.sending():
        assert runtime.server_full() is False  # alone and refused: a real failure
    assert runtime.room == 1
    runtime.server_answered()
    assert runtime.room == 2  # one answer at room 1: one more may go out
    runtime.server_answered()
    runtime.server_answered()
    assert runtime.room == 3
    runtime.server_full()  # none out: room for one
    with runtime.sending():
        started = time.monotonic()
        with runtime.sending(until=started + 0.05):  # no room: waits until the deadline
            assert time.monotonic() - started >= 0.04 and runtime.in_flight == 2
    assert runtime.in_flight == 0


def test_the_stand_in_stops_cleanly_and_cuts_a_slow_request_short() -> None:
    server = StandInServer(latency=30.0, slots=1).start()
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    adapter = openai_adapter(server, backend={"timeout": 60, "retries": 0})
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            adapter.describe(*INPUTS[0])
        except LLMError as error:
            outcome.append(error)

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    while server.counts()["max_busy"] == 0:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    worker.join(timeout=5)
    assert time.monotonic() - started < 1.5 and not server.running and not worker.is_alive()
    assert len(outcome) == 1 and server.counts()["answered"] == 0  # no answer was sent
    server.stop()  # twice is fine
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


@pytest.mark.parametrize(("setting", "value"), [
    ("latency", -1.0), ("slots", 0), ("slots", 2.5), ("when_full", "drop"),
    ("retry_after", float("nan")),
])
def test_bad_stand_in_settings_name_the_setting(setting: str, value: Any) -> None:
    with pytest.raises(ValueError, match=setting):
        StandInServer(**{setting: value})


@pytest.mark.heavy
def test_the_stand_in_in_its_own_process_serves_its_counts_and_ends_on_sigterm() -> None:
    process = subprocess.Popen(command("--latency", "0", "--slots", "3"),
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        with urllib.request.urlopen(url.removesuffix("/v1") + "/stand-in/counts",
                                    timeout=5) as reply:
            assert json.loads(reply.read()) == {"chat_requests": 0, "answered": 0,
                                                "rejected": 0, "max_in_flight": 0,
                                                "max_busy": 0}
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_a_429_or_503_tells_the_backend_the_server_is_full_a_500_does_not(kind: str) -> None:
    server = (StandInServer(latency=0.0) if kind == "openai" else FakeOllama()).start()
    try:
        spec = ({"backend": "openai", "base_url": server.base_url, "model": "stand-in",
                 "api_key_env": None} if kind == "openai"
                else {"backend": "ollama", "host": server.host, "model": "llama3.2"})
        backend = make_backend({**spec, "cache_path": None, "retries": 1, "backoff": 0.0})
        faults = server.faults if kind == "openai" else None
        for fault, room in (("500", None), ("429:0", 2), ("503:0", 2)):
            if faults is not None:
                faults.append(fault)
            else:
                server.queue_faults(fault)
            backend.complete("You describe states.", f"after a {fault}")
            # refused alone: room for one; the answer after it: room for one more
            assert backend.runtime.room == room, fault
            backend.runtime.room = None
    finally:
        server.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_sends_its_requests_through_threads_of_its_own() -> None:
    with StandInServer(latency=0.01, slots=8) as server:
        adapter = openai_adapter(server, concurrency=4)
        adapter.adapt_many(INPUTS[:4])  # the parent's pool threads are running
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its answers, or a hang the parent's time limit ends
            try:
                os.write(write, str(len(adapter.adapt_many(INPUTS[4:8]))).encode())
            finally:
                os._exit(0)
        os.close(write)
        try:
            ready, _, _ = select.select([read], [], [], 10)
            assert ready and os.read(read, 16) == b"4"
        finally:
            os.close(read)
            if not ready:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
