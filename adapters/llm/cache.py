"""The description cache: LLM answers keyed by what produced them, in memory and on disk.

The key is a SHA-256 of (backend, model, generation options, system prompt, user prompt) —
the full prompt, never ``str(state)`` — so the same question to the same model with the same
settings is answered once, in this run and every later one. The persistent store is one
SQLite file in WAL mode, safe to share between runs and between processes running at once.
Only real LLM answers are stored; failures and rule-language fallbacks never are.

`DescriptionCache.export_jsonl` / `import_jsonl` move descriptions between machines as JSON
lines with the fields ``prompt``, ``description``, ``model``, ``created`` (plus ``system``,
``backend`` and ``options`` so the importer can rebuild the exact key).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS descriptions (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    options TEXT NOT NULL,
    system TEXT NOT NULL,
    prompt TEXT NOT NULL,
    description TEXT NOT NULL,
    created TEXT NOT NULL
)
"""
_COLUMNS = ["key", "backend", "model", "options", "system", "prompt", "description", "created"]


def default_cache_path() -> Path:
    """``$LANGADAPT_CACHE_DIR/llm_descriptions.sqlite``, else under ``~/.cache/langadapt``."""
    root = os.environ.get("LANGADAPT_CACHE_DIR") or Path.home() / ".cache" / "langadapt"
    return Path(root) / "llm_descriptions.sqlite"


def canonical_options(options: Mapping[str, Any]) -> str:
    """The generation options as a stable JSON string (sorted keys, Nones dropped)."""
    return json.dumps(
        {k: options[k] for k in sorted(options) if options[k] is not None},
        sort_keys=True,
        separators=(",", ":"),
    )


def description_key(
    backend: str, model: str, options: Mapping[str, Any], system: str, prompt: str
) -> str:
    """The cache key of one LLM question: a hex SHA-256 of everything that shapes the answer."""
    payload = json.dumps(
        [backend, model, canonical_options(options), system, prompt],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class DescriptionCache:
    """LLM descriptions in memory, backed by a shared SQLite file (WAL) when `path` is given.

    Thread-safe: prerendering writes from a pool of threads. Every `put` is committed at once,
    so an interrupted prerender keeps what it finished.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else None
        self._memory: dict[str, str] = {}
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                conn = sqlite3.connect(
                    self.path, timeout=30.0, check_same_thread=False, isolation_level=None
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(_SCHEMA)
                columns = [row[1] for row in conn.execute("PRAGMA table_info(descriptions)")]
            except sqlite3.DatabaseError as exc:
                raise ValueError(
                    f"description cache {str(self.path)!r} is not a usable SQLite file: {exc}"
                ) from exc
            if columns != _COLUMNS:
                conn.close()
                raise ValueError(
                    f"description cache {str(self.path)!r} has a 'descriptions' table with "
                    f"columns {columns}; expected {_COLUMNS} (another program's file? pass "
                    "another cache_path, or move this file away)"
                )
            self._conn = conn

    # ---- reading ---------------------------------------------------------------------
    def get(self, key: str) -> str | None:
        """The stored description for `key`, or None."""
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None or self._conn is None:
                return hit
            row = self._conn.execute(
                "SELECT description FROM descriptions WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            self._memory[key] = row[0]
            return row[0]

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        """The stored descriptions among `keys` (missing keys are absent from the result)."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, str] = {}
        with self._lock:
            missing = []
            for key in wanted:
                if key in self._memory:
                    found[key] = self._memory[key]
                else:
                    missing.append(key)
            if self._conn is not None:
                for start in range(0, len(missing), 500):
                    chunk = missing[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    rows = self._conn.execute(
                        f"SELECT key, description FROM descriptions WHERE key IN ({marks})", chunk
                    ).fetchall()
                    for key, text in rows:
                        self._memory[key] = text
                        found[key] = text
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        with self._lock:
            if self._conn is None:
                return len(self._memory)
            return int(self._conn.execute("SELECT COUNT(*) FROM descriptions").fetchone()[0])

    # ---- writing ---------------------------------------------------------------------
    def put(
        self,
        key: str,
        description: str,
        *,
        backend: str,
        model: str,
        options: Mapping[str, Any],
        system: str,
        prompt: str,
        created: str | None = None,
    ) -> None:
        """Store one LLM answer (committed immediately). The first answer for a key wins."""
        if not isinstance(description, str) or not description.strip():
            raise ValueError(f"refusing to cache an empty or non-text description: {description!r}")
        with self._lock:
            self._memory.setdefault(key, description)
            if self._conn is not None:
                self._conn.execute(
                    "INSERT OR IGNORE INTO descriptions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, backend, model, canonical_options(options), system, prompt,
                     description, created or _utc_now()),
                )

    # ---- sharing ---------------------------------------------------------------------
    def records(self) -> list[dict[str, Any]]:
        """Every persisted entry as a dict (the JSONL export fields), oldest first."""
        if self._conn is None:
            raise ValueError("this description cache is memory-only (path=None); nothing to list")
        with self._lock:
            rows = self._conn.execute(
                "SELECT prompt, description, model, created, system, backend, options "
                "FROM descriptions ORDER BY created, key"
            ).fetchall()
        return [
            {"prompt": p, "description": d, "model": m, "created": c, "system": s,
             "backend": b, "options": json.loads(o)}
            for p, d, m, c, s, b, o in rows
        ]

    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write every stored description to `path` as JSON lines; return how many."""
        records = self.records()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        return len(records)

    def import_jsonl(
        self,
        path: str | os.PathLike[str],
        *,
        backend: str,
        options: Mapping[str, Any],
        system: str,
    ) -> int:
        """Load descriptions written by `export_jsonl` (or by hand); return how many are new.

        Each line needs ``prompt``, ``description`` and ``model``; ``system``, ``backend`` and
        ``options`` default to the importing adapter's (the keyword arguments), so a file of
        plain (prompt, description, model, created) lines lands under this adapter's keys.
        """
        src = Path(path)
        if not src.is_file():
            raise ValueError(f"JSONL file {str(src)!r} does not exist")
        added = 0
        with src.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{src}:{lineno}: not valid JSON ({exc.msg})") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{src}:{lineno}: expected a JSON object, got {record!r}")
                for field in ("prompt", "description", "model"):
                    if not isinstance(record.get(field), str) or not record[field]:
                        raise ValueError(
                            f"{src}:{lineno}: field {field!r} must be a non-empty string, "
                            f"got {record.get(field)!r}"
                        )
                for field, kind in (("backend", "a non-empty string"), ("system", "a string"),
                                    ("created", "a string")):
                    value = record.get(field)
                    if value is not None and (
                        not isinstance(value, str) or (field == "backend" and not value)
                    ):
                        raise ValueError(
                            f"{src}:{lineno}: field {field!r} must be {kind} (or absent), "
                            f"got {value!r}"
                        )
                rec_options = record.get("options")
                if rec_options is not None and not isinstance(rec_options, dict):
                    raise ValueError(
                        f"{src}:{lineno}: field 'options' must be a JSON object (or absent), "
                        f"got {rec_options!r}"
                    )
                rec_backend = record.get("backend") or backend
                rec_options = dict(options) if rec_options is None else rec_options
                rec_system = record.get("system")
                rec_system = system if rec_system is None else rec_system
                key = description_key(
                    rec_backend, record["model"], rec_options, rec_system, record["prompt"]
                )
                if self.get(key) is None:
                    added += 1
                self.put(
                    key, record["description"], backend=rec_backend, model=record["model"],
                    options=rec_options, system=rec_system, prompt=record["prompt"],
                    created=record.get("created"),
                )
        return added

    def close(self) -> None:
        """Close the SQLite connection (the in-memory entries stay readable)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
