"""The keys of LLM answers in the store: everything that shaped an answer.

Key: SHA-256 of (backend, model identity, options, JSON schema, messages) — `answer_key`;
the scores of candidate replies under `score_key`, as JSON text. The model identity is a
content hash (a GGUF file's: `file_sha256`) or the digest a server reports, so a renamed
copy of a model shares its answers and a changed file does not. Only real answers are
stored, in `langadapt.llm.store.SQLiteStore` (``LLMBackend.cache``); JSONL export and
import (`LLMBackend.export_jsonl`) move answers between machines.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["answer_key", "default_cache_path", "file_sha256", "score_key"]

Messages = Sequence[Mapping[str, str]]


def default_cache_path() -> Path:
    """``$LANGADAPT_CACHE_DIR/llm_answers.sqlite``, else under ``~/.cache/langadapt``."""
    root = os.environ.get("LANGADAPT_CACHE_DIR") or Path.home() / ".cache" / "langadapt"
    return Path(root) / "llm_answers.sqlite"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def answer_key(
    backend: str, identity: str, options: Mapping[str, Any], schema: Any, messages: Messages
) -> str:
    """Hex SHA-256 of one request: backend, model identity, options, schema and messages."""
    options = {k: v for k, v in options.items() if v is not None}
    payload = _canonical([backend, identity, options, schema,
                          [[m["role"], m["content"]] for m in messages]])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def score_key(
    backend: str, identity: str, options: Mapping[str, Any], replies: Sequence[str],
    messages: Messages
) -> str:
    """Hex SHA-256 of one scoring request (`LLMBackend.score`): backend, model identity,
    options, the candidate replies (in order) and messages — never equal to an `answer_key`."""
    options = {k: v for k, v in options.items() if v is not None}
    payload = _canonical(["score", backend, identity, options, list(replies),
                          [[m["role"], m["content"]] for m in messages]])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# ---- the identity of a GGUF file ---------------------------------------------------------
_HASHES: dict[tuple[str, int, int], str] = {}
_HASH_LOCK = threading.Lock()


def file_sha256(path: str | os.PathLike[str], memo: str | os.PathLike[str] | None = None) -> str:
    """SHA-256 of a file's content, computed once per (path, size, mtime).

    ``memo``: a JSON file remembering the hashes across processes (e.g. next to the answer
    cache); None keeps them for this process only.
    """
    real = Path(path).expanduser().resolve()
    stat = real.stat()
    ident = (str(real), stat.st_size, stat.st_mtime_ns)
    with _HASH_LOCK:
        if ident in _HASHES:
            return _HASHES[ident]
        known: dict[str, Any] = {}
        memo_path = None if memo is None else Path(memo)
        if memo_path is not None and memo_path.is_file():
            try:
                known = json.loads(memo_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                known = {}  # a damaged memo is rebuilt
            if not isinstance(known, dict):
                known = {}
        entry = known.get(ident[0])
        if (isinstance(entry, dict) and entry.get("size") == stat.st_size
                and entry.get("mtime_ns") == stat.st_mtime_ns
                and isinstance(entry.get("sha256"), str)):
            digest = entry["sha256"]
        else:
            sha = hashlib.sha256()
            with real.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    sha.update(block)
            digest = sha.hexdigest()
            if memo_path is not None:
                known[ident[0]] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                                   "sha256": digest}
                memo_path.parent.mkdir(parents=True, exist_ok=True)
                temporary = memo_path.with_name(f"{memo_path.name}.{os.getpid()}.tmp")
                temporary.write_text(json.dumps(known, indent=1, sort_keys=True), encoding="utf-8")
                os.replace(temporary, memo_path)
        _HASHES[ident] = digest
        return digest
