"""Faults and bad input around the LLM layer and the adapters: each test failed on the code
before the LLM layer existed (server killed mid-request, warm/cold verdicts, a damaged
answer cache, a failing server behind ``fallback: true``)."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from adapter_fixtures import CountingEncoder
from experiment_fixtures import QUIET, raw_config
from experiment_fixtures import one_line_error as _main
from experiment_fixtures import write_yaml as _write
from fake_ollama import FakeOllama

from langadapt import adapters, environments
from langadapt.adapters.llm import OllamaAdapter
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment
from langadapt.llm import LLMError, LLMUnavailableError, OllamaBackend, SQLiteStore

TESTS = Path(__file__).resolve().parent

_SERVER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from fake_ollama import FakeOllama

    def reply(body):
        print("CHAT", flush=True)  # the request is open now
        time.sleep(120)
        return "never sent"

    fake = FakeOllama(reply=reply).start()
    print(fake.port, flush=True)
    time.sleep(600)
    """
)


# ------------------------------------------------------------- a server killed mid-request
@pytest.mark.heavy
def test_server_killed_mid_request_is_one_plain_error_naming_host_and_model(tmp_path):
    server = subprocess.Popen([sys.executable, "-c", _SERVER.format(tests=str(TESTS))],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        host = f"http://127.0.0.1:{port}"
        maze = environments.MazeEnv(maze="umaze")
        adapter = OllamaAdapter(maze, host=host, cache_path=tmp_path / "c.sqlite", retries=2,
                                backoff=0.01, embedding_cache=adapters.EmbeddingCache(
                                    CountingEncoder()))

        def kill_when_the_request_is_open() -> None:
            if server.stdout.readline().strip() == "CHAT":
                os.kill(server.pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_the_request_is_open)
        killer.start()
        obs, info = maze.reset(seed=0)
        with pytest.raises(LLMUnavailableError) as caught:
            adapter.describe(obs, info["legal_moves"])
        killer.join(timeout=30)
    finally:
        server.kill()
        server.wait(timeout=30)
    message = str(caught.value)
    assert host in message and "'llama3.2'" in message
    assert server.returncode == -signal.SIGKILL
    stats = adapter.stats()
    assert stats["llm_failures"] == 1 and stats["llm_retries"] == 2
    assert len(adapter.backend.cache) == 0  # a failed call is never cached


# ------------------------------------------------------------- warm and cold verdicts
@pytest.fixture
def language_adapter():
    return adapters.LanguageAdapter(environments.MazeEnv(maze="umaze"), encoder=CountingEncoder())


@pytest.mark.parametrize("bad", [[2.0], [True], (2.0,), [np.float64(2)], [2, 2], (2, 2), [9]])
@pytest.mark.parametrize("history", [False, True])
def test_warm_calls_give_the_cold_verdict(bad, history):
    maze = environments.MazeEnv(maze="umaze")
    options = {"include_last_move": True} if history else {}
    adapter = adapters.LanguageAdapter(maze, encoder=CountingEncoder(),
                                       describer_options=options)
    obs = maze.observation_of((3, 1))
    fresh = adapters.LanguageAdapter(maze, encoder=CountingEncoder(), describer_options=options)
    with pytest.raises(ValueError) as cold:
        fresh(obs, bad)
    adapter(obs, [2])  # warm now, for the moves [2] and (2,)
    adapter(obs, (2,))
    with pytest.raises(ValueError) as warm:
        adapter(obs, bad)
    assert str(warm.value) == str(cold.value)


def test_numpy_int_moves_are_accepted_warm_and_cold(language_adapter):
    obs = environments.MazeEnv(maze="umaze").observation_of((3, 1))
    first = language_adapter(obs, [np.int64(2)])
    assert language_adapter(obs, [2]) is first
    assert language_adapter(obs, [np.int64(2)]) is first


def test_the_wrapper_checks_moves_on_warm_steps_too(language_adapter):
    class Liar(environments.MazeEnv):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            info["legal_moves"] = [float(m) for m in info["legal_moves"]]
            return obs, reward, terminated, truncated, info

    env = adapters.LanguageObservation(Liar(maze="umaze"), language_adapter)
    env.reset(seed=0)
    language_adapter.prerender(adapters.reachable_inputs(env), progress=False)
    with pytest.raises(ValueError, match="is not an int action"):
        env.step(2)


# ------------------------------------------------------------- a damaged answer cache
def _fill(path: Path, n: int = 400) -> None:
    cache = SQLiteStore(path)
    cache.put_many([(f"k{i}", f"answer {i} " + "x" * 300, f"answer {i} " + "x" * 300,
                           {"i": i}) for i in range(n)])
    cache.close()


def _damage_middle_pages(path: Path) -> None:
    with sqlite3.connect(path) as db:
        page = db.execute("PRAGMA page_size").fetchone()[0]
    size = path.stat().st_size
    assert size > 8 * page
    with path.open("r+b") as fh:
        fh.seek(2 * page)
        fh.write(np.random.default_rng(0).integers(0, 256, size - 4 * page, np.uint8).tobytes())


def test_damage_found_on_a_read_mid_run_moves_the_file_aside_and_goes_on(tmp_path, caplog):
    path = tmp_path / "answers.sqlite"
    _fill(path)
    cache = SQLiteStore(path)  # opened while the file is still good
    _damage_middle_pages(path)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm.store"):
        assert cache.get_many([f"k{i}" for i in range(400)]) == {}
        cache.put("new", "a fresh answer", {})
        assert cache.get("k5") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0].getMessage()
    assert len(list(tmp_path.glob("answers.sqlite.corrupt-*"))) == 1
    assert len(SQLiteStore(path)) == 1 and SQLiteStore(path).get("new") == "a fresh answer"


def test_a_backend_over_a_damaged_cache_answers_from_the_server(tmp_path):
    path = tmp_path / "answers.sqlite"
    _fill(path)
    with FakeOllama(default_answer="served") as fake:
        backend = OllamaBackend(host=fake.host, cache_path=path)
        backend.cache  # noqa: B018 - opened before the damage
        _damage_middle_pages(path)
        assert backend.complete("s", "u") == "served"
        assert backend.complete("s", "u") == "served" and fake.chat_requests == 1


def test_the_embedding_cache_follows_the_same_rule(tmp_path, caplog):
    path = tmp_path / "emb.sqlite"
    texts = [f"text {i}" for i in range(2000)]
    writer = adapters.EmbeddingCache(CountingEncoder(), path=path)
    writer.get_many(texts)
    writer.close()
    encoder = CountingEncoder()
    cache = adapters.EmbeddingCache(encoder, path=path)
    _damage_middle_pages(path)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm.store"):
        vectors = cache.get_many(texts)
    assert vectors.shape == (2000, 8) and encoder.calls == 2000
    assert "moved it to" in caplog.text
    assert cache.stored_count() == 2000


# ------------------------------------------------------------- a failing server, fallback on
def test_circuit_breaker_stops_asking_a_failing_server_and_warnings_are_aggregated(
        tmp_path, caplog):
    maze = environments.MazeEnv(maze="medium")
    inputs = adapters.reachable_inputs(maze)[:40]
    with FakeOllama() as fake:
        fake.queue_faults(*["500"] * 1000)
        adapter = OllamaAdapter(maze, host=fake.host, cache_path=tmp_path / "c.sqlite",
                                fallback=True, retries=1, backoff=0.0, breaker_failures=3,
                                breaker_cooldown=3600, action_history_length=0,
                                embedding_cache=adapters.EmbeddingCache(CountingEncoder()))
        with caplog.at_level(logging.WARNING):
            texts = [adapter.describe(*item) for item in inputs]
        requests = fake.chat_requests
    stats = adapter.stats()
    assert texts == [adapter.rule_description(*item) for item in inputs]
    assert len(inputs) > 20 and stats["llm_fallbacks"] == len(inputs)
    assert stats["llm_failures"] == 3 and requests == 3 * 2  # 3 calls, 2 attempts each
    assert stats["llm_breaker_skips"] == len(inputs) - 3
    assert adapter.backend.breaker_open
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert 1 <= len(warnings) <= 2, [r.getMessage() for r in warnings]
    assert any("circuit breaker open" in r.getMessage() for r in warnings)
    assert len(adapter.backend.cache) == 0


def test_the_breaker_tries_again_after_the_cool_down(tmp_path):
    with FakeOllama(default_answer="back again") as fake:
        backend = OllamaBackend(host=fake.host, cache_path=None, retries=0,
                                breaker_failures=2, breaker_cooldown=0.05)
        fake.queue_faults("500", "500")
        for prompt in ("a", "b"):
            with pytest.raises(LLMError, match="HTTP 500"):
                backend.complete("s", prompt)
        with pytest.raises(LLMUnavailableError, match="circuit breaker"):
            backend.complete("s", "c")
        threading.Event().wait(0.1)
        assert backend.complete("s", "c") == "back again"
        assert not backend.breaker_open
        assert backend.stats()["llm_breaker_skips"] == 1


# -------------------------------------------------- the store: foreign files, links, absurd vectors


def _foreign_database(path: Path) -> bytes:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE entries (id INTEGER, name TEXT)")
        db.execute("CREATE TABLE invoices (id INTEGER)")
        db.commit()
    return path.read_bytes()


def _journal_mode(path: Path) -> str:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as db:
        return db.execute("PRAGMA journal_mode").fetchone()[0]


def test_a_cache_file_that_is_a_directory_or_foreign_is_refused_before_force(tmp_path, capsys):
    data = raw_config(tmp_path, adapters=[{"type": "language"}], agents=[{"type": "random"}])
    out = run_experiment(experiment_from_dict(raw_config(tmp_path)), **QUIET)
    before = sorted(p.name for p in out.iterdir())
    path = _write(tmp_path / "exp.yaml", data)
    store = tmp_path / "cache" / "cache.sqlite"
    store.mkdir(parents=True)
    for extra in (["--check"], ["--force", "--no-progress"]):
        code, err = _main(capsys, "run", str(path), *extra, lines=2)
        assert code == 2 and f"cache_dir: cache path {str(store)!r} is a directory" in err
    store.rmdir()
    kept = _foreign_database(store)
    for extra in (["--check"], ["--force", "--no-progress"]):
        code, err = _main(capsys, "run", str(path), *extra, lines=2)
        assert code == 2 and "is another program's SQLite database (tables invoices)" in err
    assert store.read_bytes() == kept and _journal_mode(store) == "delete"
    assert sorted(p.name for p in out.iterdir()) == before  # --force emptied nothing


def test_the_store_never_follows_a_link_nor_writes_another_programs_database(tmp_path):
    from langadapt.llm import CacheError, SQLiteStore

    theirs = tmp_path / "theirs.sqlite"
    kept = _foreign_database(theirs)
    with pytest.raises(CacheError, match="another program's SQLite database"):
        SQLiteStore(theirs)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for target in (theirs, empty):
        link = tmp_path / f"link-{target.name}"
        link.symlink_to(target)
        with pytest.raises(CacheError, match=r"link-.* is a symbolic link"):
            SQLiteStore(link)
    assert theirs.read_bytes() == kept and _journal_mode(theirs) == "delete"
    assert empty.read_bytes() == b"" and not list(tmp_path.glob("*-wal"))


@pytest.mark.parametrize("value", [3e38, -3e38, 2e3])
def test_a_cached_vector_of_absurd_length_is_encoded_again(tmp_path, value):
    import sqlite3
    from contextlib import closing

    import numpy as np
    from adapter_fixtures import CountingEncoder

    from langadapt.adapters.embedding_cache import EmbeddingCache, text_key

    encoder = CountingEncoder(name=f"absurd-{value}")
    path = tmp_path / "cache.sqlite"
    with closing(sqlite3.connect(path)) as db:  # a store holding a vector no encoder made
        db.execute("CREATE TABLE entries (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
                   "meta TEXT NOT NULL, created TEXT NOT NULL)")
        blob = np.full(encoder.dimension, value, dtype=np.float32).tobytes()
        db.execute("INSERT INTO entries VALUES (?, ?, '{}', '2026-01-01')",
                   (text_key(encoder.name, "a lake"), blob))
        db.commit()
    cache = EmbeddingCache(encoder, path)
    vector = cache.get("a lake")
    assert cache.misses == 1 and np.array_equal(vector, encoder.encode_many(["a lake"])[0])
    assert np.linalg.norm(vector) < 10
