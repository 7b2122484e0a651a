"""DescriptionCache: keys, SQLite persistence (WAL), threads and processes, JSONL sharing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from langadapt.adapters.llm.cache import DescriptionCache, description_key

REPO = Path(__file__).resolve().parents[1]
OPTS = {"temperature": 0.0, "max_tokens": 96, "seed": 0, "context_length": 2048}


def _put(cache, prompt, text, **kw):
    args = {"backend": "ollama", "model": "m", "options": OPTS, "system": "sys", **kw}
    key = description_key(args["backend"], args["model"], args["options"], args["system"], prompt)
    cache.put(key, text, prompt=prompt, **args)
    return key


def test_key_depends_on_every_part_and_not_on_option_order():
    base = description_key("ollama", "m", OPTS, "sys", "p")
    assert base == description_key("ollama", "m", dict(reversed(list(OPTS.items()))), "sys", "p")
    variants = [
        description_key("llamacpp", "m", OPTS, "sys", "p"),
        description_key("ollama", "m2", OPTS, "sys", "p"),
        description_key("ollama", "m", {**OPTS, "seed": 1}, "sys", "p"),
        description_key("ollama", "m", OPTS, "sys2", "p"),
        description_key("ollama", "m", OPTS, "sys", "p2"),
    ]
    assert len({base, *variants}) == 6


def test_persistent_store_is_wal_and_survives_reopen(tmp_path):
    path = tmp_path / "d.sqlite"
    cache = DescriptionCache(path)
    key = _put(cache, "prompt", "a description")
    cache.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = DescriptionCache(path)
    assert again.get(key) == "a description" and len(again) == 1
    assert again.get_many([key, "missing"]) == {key: "a description"}


def test_empty_and_non_text_descriptions_are_refused(tmp_path):
    cache = DescriptionCache(tmp_path / "d.sqlite")
    with pytest.raises(ValueError, match="empty or non-text"):
        _put(cache, "p", "   ")
    with pytest.raises(ValueError, match="empty or non-text"):
        _put(cache, "p", 42)
    assert len(cache) == 0


def test_not_a_sqlite_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match="not a usable SQLite file"):
        DescriptionCache(bad)


def test_threads_and_processes_share_one_file(tmp_path):
    path = tmp_path / "shared.sqlite"
    script = (
        "import sys\n"
        "from adapters.llm.cache import DescriptionCache, description_key\n"
        "c = DescriptionCache(sys.argv[1])\n"
        "for i in range(50):\n"
        "    p = f'{sys.argv[2]}-{i}'\n"
        "    k = description_key('ollama', 'm', {}, 's', p)\n"
        "    c.put(k, 'text ' + p, backend='ollama', model='m', options={}, system='s', prompt=p)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), name], cwd=REPO)
             for name in ("a", "b")]
    cache = DescriptionCache(path)
    threads = [threading.Thread(target=lambda n=n: [_put(cache, f"t{n}-{i}", "x")
                                                    for i in range(25)]) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p.wait(timeout=120) == 0 for p in procs)
    assert len(DescriptionCache(path)) == 200


def test_memory_only_cache(tmp_path):
    cache = DescriptionCache(None)
    key = _put(cache, "p", "d")
    assert cache.get(key) == "d" and len(cache) == 1
    with pytest.raises(ValueError, match="memory-only"):
        cache.export_jsonl(tmp_path / "x.jsonl")


def test_plain_jsonl_lines_import_under_the_importers_key(tmp_path):
    src = tmp_path / "plain.jsonl"
    src.write_text(json.dumps({"prompt": "p", "description": "d", "model": "m",
                               "created": "2026-01-01T00:00:00+00:00"}) + "\n\n")
    cache = DescriptionCache(tmp_path / "c.sqlite")
    assert cache.import_jsonl(src, backend="ollama", options=OPTS, system="sys") == 1
    assert cache.get(description_key("ollama", "m", OPTS, "sys", "p")) == "d"
    out = tmp_path / "out.jsonl"
    assert cache.export_jsonl(out) == 1
    record = json.loads(out.read_text())
    assert record["created"] == "2026-01-01T00:00:00+00:00"
    assert record["backend"] == "ollama" and record["options"] == OPTS
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="broken.jsonl:1: not valid JSON"):
        cache.import_jsonl(tmp_path / "broken.jsonl", backend="ollama", options=OPTS, system="s")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"options": [1, 2]}, r"bad.jsonl:2: field 'options' must be a JSON object"),
        ({"options": "x"}, r"bad.jsonl:2: field 'options' must be a JSON object"),
        ({"system": 5}, r"bad.jsonl:2: field 'system' must be a string"),
        ({"backend": 5}, r"bad.jsonl:2: field 'backend' must be a non-empty string"),
        ({"backend": ["ollama"]}, r"bad.jsonl:2: field 'backend'"),
        ({"created": 3}, r"bad.jsonl:2: field 'created' must be a string"),
    ],
)
def test_jsonl_import_rejects_badly_typed_optional_fields(tmp_path, extra, match):
    good = {"prompt": "p", "description": "d", "model": "m"}
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(good) + "\n" + json.dumps({**good, "prompt": "q", **extra}) + "\n")
    cache = DescriptionCache(tmp_path / "c.sqlite")
    with pytest.raises(ValueError, match=match):
        cache.import_jsonl(src, backend="ollama", options=OPTS, system="sys")


def test_descriptions_table_of_another_schema_is_a_clear_error(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE descriptions (id INTEGER, text TEXT)")
    with pytest.raises(ValueError, match=r"other.sqlite.*columns \['id', 'text'\]"):
        DescriptionCache(path)
    with sqlite3.connect(path) as conn:  # the file is left as it was
        assert [r[1] for r in conn.execute("PRAGMA table_info(descriptions)")] == ["id", "text"]
