"""The one persistent store, the answer cache, model identity and structured output."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fake_ollama import FakeOllama
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langadapt.llm import (
    CacheError,
    LlamaCppBackend,
    OllamaBackend,
    SQLiteStore,
    StructuredOutputError,
    answer_key,
    default_gguf_path,
    file_sha256,
    make_backend,
    open_store,
    schema_errors,
)

OPTS = {"temperature": 0.0, "max_tokens": 96, "seed": 0, "context_length": 2048}
MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "p"}]


def _put(cache: SQLiteStore, key: str, text: str) -> None:
    cache.put(key, text, {"messages": MSGS})


# ---------------------------------------------------------------------------- keys
def test_key_depends_on_every_part_and_not_on_option_order():
    base = answer_key("ollama", "sha256:a", OPTS, None, MSGS)
    assert base == answer_key("ollama", "sha256:a", dict(reversed(list(OPTS.items()))), None, MSGS)
    variants = [
        answer_key("llamacpp", "sha256:a", OPTS, None, MSGS),
        answer_key("ollama", "sha256:b", OPTS, None, MSGS),
        answer_key("ollama", "sha256:a", {**OPTS, "seed": 1}, None, MSGS),
        answer_key("ollama", "sha256:a", OPTS, {"type": "object"}, MSGS),
        answer_key("ollama", "sha256:a", OPTS, None, [*MSGS[:1], {"role": "user", "content": "q"}]),
        answer_key("ollama", "sha256:a", OPTS, None, MSGS[1:]),
    ]
    assert len({base, *variants}) == 7


# ---------------------------------------------------------------------------- the store
def test_persistent_store_is_wal_and_survives_reopen(tmp_path):
    path = tmp_path / "d.sqlite"
    cache = SQLiteStore(path)
    _put(cache, "k", "an answer")
    cache.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = SQLiteStore(path)
    assert again.get("k") == "an answer" and len(again) == 1 and again.get("missing") is None


def test_a_new_file_opened_by_two_processes_at_once_waits_for_wal_mode(tmp_path, monkeypatch):
    # two processes switching a new file to WAL at once: SQLite tells one "database is
    # locked" without waiting (it would deadlock); the store tries again
    class Contended(sqlite3.Connection):
        refusals = 2

        def execute(self, sql, *args):
            if sql == "PRAGMA journal_mode = WAL" and Contended.refusals:
                Contended.refusals -= 1
                raise sqlite3.OperationalError("database is locked")
            return super().execute(sql, *args)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: connect(*a, factory=Contended, **kw))
    cache = SQLiteStore(tmp_path / "d.sqlite")
    assert Contended.refusals == 0 and cache.usable
    _put(cache, "k", "an answer")
    assert cache._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # noqa: SLF001


def test_memory_is_bounded_the_file_is_not(tmp_path):
    store = SQLiteStore(tmp_path / "s.sqlite", capacity=2)
    store.put_many([(f"k{i}", f"v{i}", f"v{i}", None) for i in range(5)])
    assert store.memory_size == 2 and len(store) == 5
    assert store.get_many(["k0", "k4"]) == {"k0": "v0", "k4": "v4"}
    assert store.file_hits == 1  # k0 came from the file, k4 from memory
    with pytest.raises(ValueError, match="capacity"):
        SQLiteStore(None, capacity=0)


def test_a_damaged_file_is_moved_aside_on_open(tmp_path, caplog):
    path = tmp_path / "bad.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm.store"):
        cache = SQLiteStore(path)
    assert "moved it to" in caplog.text and str(path) in caplog.text
    assert len(list(tmp_path.glob("bad.sqlite.corrupt-*"))) == 1
    _put(cache, "k", "fresh")
    assert len(SQLiteStore(path)) == 1


def test_another_programs_table_is_left_alone(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE entries (id INTEGER, text TEXT)")
    with pytest.raises(CacheError, match=r"other.sqlite.*columns \['id', 'text'\]"):
        SQLiteStore(path)
    with sqlite3.connect(path) as conn:
        assert [r[1] for r in conn.execute("PRAGMA table_info(entries)")] == ["id", "text"]
    with pytest.raises(CacheError, match="is a directory"):
        SQLiteStore(tmp_path)


@pytest.mark.heavy
def test_threads_and_processes_share_one_file(tmp_path):
    path = tmp_path / "shared.sqlite"
    script = (
        "import sys\n"
        "from langadapt.llm import SQLiteStore\n"
        "c = SQLiteStore(sys.argv[1])\n"
        "for i in range(50):\n"
        "    c.put(f'{sys.argv[2]}-{i}', 'text', {})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), name])
             for name in ("a", "b")]
    cache = SQLiteStore(path)
    threads = [threading.Thread(target=lambda n=n: [_put(cache, f"t{n}-{i}", "x")
                                                    for i in range(25)]) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p.wait(timeout=120) == 0 for p in procs)
    assert len(SQLiteStore(path)) == 200


def test_memory_only_cache(tmp_path):
    cache = SQLiteStore(None)
    _put(cache, "k", "d")
    assert cache.get("k") == "d" and len(cache) == 1
    with pytest.raises(CacheError, match="memory-only"):
        OllamaBackend(cache_path=None).export_jsonl(tmp_path / "x.jsonl")


def test_one_store_per_file_in_a_process(tmp_path):
    path = tmp_path / "one.sqlite"
    answers = open_store(path, 10, what="LLM answer cache")
    assert open_store(tmp_path / "." / "one.sqlite", 50) is answers and answers.capacity == 50
    assert open_store(None, 10) is not open_store(None, 10)
    answers.put("k", "v")
    first = answers.last_row()
    answers.put("k2", "v2")
    assert [row[0] for row in answers.rows(after=first)] == ["k2"]
    answers.close()
    assert open_store(path, 10) is not answers  # a closed store is opened again


def test_old_cache_files_are_adopted_once(tmp_path, caplog):
    old_answers, old_vectors = tmp_path / "descriptions.sqlite", tmp_path / "embeddings.sqlite"
    for path, key in [(old_answers, "a"), (old_vectors, "e")]:
        old = SQLiteStore(path)
        old.put(key, f"value {key}")
        old.close()
    broken = tmp_path / "broken.sqlite"
    broken.write_text("not a database" * 100)
    store = SQLiteStore(tmp_path / "cache.sqlite")
    with caplog.at_level(logging.INFO, logger="langadapt.llm.store"):
        store.adopt([old_answers, old_vectors, tmp_path / "missing.sqlite", broken])
    assert store.get_many(["a", "e"]) == {"a": "value a", "e": "value e"}
    assert not old_answers.exists() and (tmp_path / "descriptions.sqlite.adopted").is_file()
    assert "could not read the old cache file" in caplog.text and broken.is_file()
    assert len(store) == 2
    with caplog.at_level(logging.WARNING, logger="langadapt.llm.store"):
        SQLiteStore(None).adopt([broken])  # nowhere to copy to: one line, no crash
    assert "ignoring the old cache files" in caplog.text


# ---------------------------------------------------------------------------- JSONL
def test_jsonl_plain_lines_import_under_the_importers_key_and_round_trip(tmp_path):
    with FakeOllama() as fake:
        backend = OllamaBackend(host=fake.host, cache_path=tmp_path / "c.sqlite")
        src = tmp_path / "plain.jsonl"
        src.write_text(json.dumps({"prompt": "p", "system": "sys", "description": "d",
                                   "created": "2026-01-01T00:00:00+00:00"}) + "\n\n")
        assert backend.import_jsonl(src) == 1 and backend.import_jsonl(src) == 0
        assert backend.complete("sys", "p") == "d" and fake.chat_requests == 0
        out = tmp_path / "out.jsonl"
        assert backend.export_jsonl(out) == 1
        record = json.loads(out.read_text())
        assert record["created"] == "2026-01-01T00:00:00+00:00" and record["answer"] == "d"
        assert record["identity"] == backend.identity and record["messages"] == MSGS
        other = OllamaBackend(host=fake.host, cache_path=tmp_path / "other.sqlite")
        assert other.import_jsonl(out) == 1 and other.complete("sys", "p") == "d"
    for line, match in [("{not json", "invalid JSON"),
                        (json.dumps({"prompt": "p", "answer": ""}), "answer="),
                        (json.dumps({"prompt": "p", "answer": "a", "options": [1]}),
                         "options="),
                        (json.dumps({"messages": [{"role": "x"}], "answer": "a"}),
                         "messages.0.role=")]:
        (tmp_path / "bad.jsonl").write_text(line + "\n")
        with pytest.raises(ValueError, match=f"bad.jsonl:1: {match}"):
            backend.import_jsonl(tmp_path / "bad.jsonl")


# ---------------------------------------------------------------------------- identity
def test_gguf_identity_follows_content_not_path(tmp_path):
    first = tmp_path / "a" / "model.gguf"
    first.parent.mkdir()
    shutil.copyfile(default_gguf_path(), first)
    copy = tmp_path / "b" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copyfile(first, copy)
    a = LlamaCppBackend(model=first, cache_path=tmp_path / "c.sqlite")
    b = LlamaCppBackend(model=copy, cache_path=tmp_path / "c.sqlite")
    packaged = LlamaCppBackend(cache_path=None)
    assert a.identity == b.identity == packaged.identity
    assert a.request_key(MSGS) == b.request_key(MSGS)
    memo = json.loads((tmp_path / "gguf_sha256.json").read_text())
    assert {str(first.resolve()), str(copy.resolve())} <= set(memo)
    with first.open("r+b") as fh:  # change the content (same size)
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 0xFF]))
    changed = LlamaCppBackend(model=first, cache_path=tmp_path / "c.sqlite")
    assert changed.identity != a.identity
    assert changed.request_key(MSGS) != a.request_key(MSGS)


def test_file_hash_is_remembered_by_path_size_and_mtime(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc")
    memo = tmp_path / "memo.json"
    digest = file_sha256(f, memo)
    assert digest == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    entry = json.loads(memo.read_text())[str(f.resolve())]
    memo.write_text(json.dumps({str(f.resolve()): {**entry, "sha256": "remembered"}}))
    assert file_sha256(f, memo) == digest  # this process remembers it already
    import langadapt.llm.cache as cache_module

    cache_module._HASHES.clear()
    assert file_sha256(f, memo) == "remembered"  # a new process reads the memo file
    f.write_bytes(b"abcd")
    assert file_sha256(f, memo) != "remembered"  # size changed: hashed again


def test_ollama_identity_is_the_servers_digest_else_the_name(tmp_path):
    with FakeOllama(digests={"llama3.2": "ab" * 32}) as fake:
        backend = OllamaBackend(host=fake.host, cache_path=None)
        assert backend.identity == "sha256:" + "ab" * 32
        key = backend.request_key(MSGS)
        fake.digests["llama3.2:latest"] = "cd" * 32  # the model was re-pulled
        assert OllamaBackend(host=fake.host, cache_path=None).request_key(MSGS) != key
        host = fake.host
    assert OllamaBackend(host=host, cache_path=None).identity == "llama3.2"  # unreachable


# ---------------------------------------------------------------------------- structured
SCHEMA = {"type": "object", "properties": {"action": {"type": "integer", "enum": [0, 1, 2]},
                                            "why": {"type": "string", "maxLength": 20}},
          "required": ["action", "why"], "additionalProperties": False}


def test_ollama_structured_output_sends_the_schema_and_checks_the_reply(tmp_path):
    with FakeOllama() as fake:
        backend = OllamaBackend(host=fake.host, cache_path=None, backoff=0)
        reply = backend.complete("s", "u", schema=SCHEMA)
        assert json.loads(reply) == {"action": 0, "why": "x"}
        assert fake.chat_bodies[-1]["format"] == SCHEMA
        assert fake.chat_bodies[-1]["options"]["num_ctx"] == 2048
        fake.structured = "ignore"  # an Ollama older than 0.5: plain text back
        with pytest.raises(StructuredOutputError, match=r"Ollama at .* did not return JSON.*0\.5"):
            backend.complete("s", "other", schema=SCHEMA)
        fake.structured = "reject"
        with pytest.raises(StructuredOutputError, match="rejected the JSON schema.*upgrade"):
            backend.complete("s", "third", schema=SCHEMA)
        fake.structured, fake.reply = "schema", lambda body: '{"action": 7, "why": "x"}'
        with pytest.raises(StructuredOutputError, match=r"breaks the schema: \$\.action: 7"):
            backend.complete("s", "fourth", schema=SCHEMA)
        assert backend.stats()["llm_failures"] == 3
        assert len(backend.cache) == 1  # only the good reply


def test_llamacpp_refuses_schemas_its_grammar_cannot_enforce():
    backend = make_backend({"backend": "llamacpp", "cache_path": None})
    with pytest.raises(StructuredOutputError, match=r"llama.cpp grammars cannot enforce "
                                                    r"\['maximum'\].*enum"):
        backend.complete("s", "u", schema={"type": "integer", "maximum": 3})
    assert backend.stats()["llm_calls"] == 0 and backend.stats()["llm_failures"] == 0


_leaf = st.one_of(
    st.just({"type": "boolean"}),
    st.lists(st.integers(-5, 50), min_size=1, max_size=4, unique=True).map(
        lambda v: {"type": "integer", "enum": v}),
    st.lists(st.sampled_from(["left", "right", "up", "down", "stay"]), min_size=1, max_size=3,
             unique=True).map(lambda v: {"type": "string", "enum": v}),
    st.integers(1, 6).map(lambda n: {"type": "string", "maxLength": n}),
)
_schemas = st.one_of(
    _leaf,
    st.dictionaries(st.sampled_from(["a", "b", "move", "ok"]), _leaf, min_size=1, max_size=3)
    .map(lambda props: {"type": "object", "properties": props, "required": sorted(props),
                        "additionalProperties": False}),
    _leaf.flatmap(lambda item: st.integers(1, 3).map(
        lambda n: {"type": "array", "items": item, "minItems": 1, "maxItems": n})),
)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas)
def test_llamacpp_replies_always_fit_the_schema(schema):
    backend = make_backend({"backend": "llamacpp", "cache_path": None, "max_tokens": 96})
    reply = backend.complete("Answer in JSON.", f"Give a value for {json.dumps(schema)}",
                             schema=schema)
    assert schema_errors(json.loads(reply), schema) == []


def test_llamacpp_structured_reply_fits_a_small_schema():
    backend = make_backend({"backend": "llamacpp", "cache_path": None, "max_tokens": 64})
    reply = backend.complete("You pick moves.", "Pick a move and say why.", schema=SCHEMA)
    assert schema_errors(json.loads(reply), SCHEMA) == []


@pytest.mark.heavy
def test_importing_langadapt_leaves_the_environment_and_global_rngs_alone():
    script = (
        "import os, random, numpy as np, torch\n"
        "random.seed(1); np.random.seed(1); torch.manual_seed(1)\n"
        "r, n, t = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state()\n"
        "env = dict(os.environ)\n"
        "import langadapt, langadapt.llm, langadapt.adapters, langadapt.agents\n"
        "import langadapt.experiments\n"
        "assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())\n"
        "assert random.getstate() == r, 'random'\n"
        "assert (np.random.get_state()[1] == n).all(), 'numpy'\n"
        "assert torch.equal(torch.get_rng_state(), t), 'torch'\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=env, cwd=Path(__file__).parent)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
