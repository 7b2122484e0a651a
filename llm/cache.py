"""The keys of LLM answers in the store (`answer_key`, `score_key`), the model's content
hash (`file_sha256`), and JSONL export and import. See docs/llm.md, "The cache".
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import one_line

__all__ = ["answer_key", "cache_root", "default_cache_path", "export_answers", "file_sha256",
           "import_answers", "score_key"]

Messages = Sequence[Mapping[str, str]]


def cache_root() -> Path:
    """``$LANGADAPT_CACHE_DIR``, else ``~/.cache/langadapt``: the user cache of library calls."""
    return Path(os.environ.get("LANGADAPT_CACHE_DIR") or Path.home() / ".cache" / "langadapt")


def default_cache_path() -> Path:
    return cache_root() / "llm_answers.sqlite"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _sha256(*head: Any, options: Mapping[str, Any], middle: Any, messages: Messages) -> str:
    payload = _canonical([*head, {k: v for k, v in options.items() if v is not None}, middle,
                          [[m["role"], m["content"]] for m in messages]])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def answer_key(
    backend: str, identity: str, options: Mapping[str, Any], schema: Any, messages: Messages
) -> str:
    """Hex SHA-256 of one request: backend, model identity, options, schema and messages."""
    return _sha256(backend, identity, options=options, middle=schema, messages=messages)


def score_key(
    backend: str, identity: str, options: Mapping[str, Any], replies: Sequence[str],
    messages: Messages
) -> str:
    """Hex SHA-256 of one scoring request: as `answer_key`, with the candidate replies in
    order for the schema, and never equal to one."""
    return _sha256("score", backend, identity, options=options, middle=list(replies),
                   messages=messages)


# ---- moving answers between machines (JSON lines) ----------------------------------------
def export_answers(store: Any, path: str | os.PathLike[str]) -> int:
    """Write the answers of ``store`` (not the embeddings sharing its file) to ``path`` as
    JSON lines (each its meta, ``answer`` and ``created``); return how many."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with out.open("w", encoding="utf-8") as fh:
        for _key, answer, meta, created in store.rows():
            if "messages" in meta:
                fh.write(json.dumps({**meta, "answer": answer, "created": created},
                                    ensure_ascii=False) + "\n")
                count += 1
    return count


def import_answers(backend: Any, path: str | os.PathLike[str]) -> int:
    """Load answers from JSON lines into ``backend``'s store; how many were new (the line
    format: docs/llm.md, "The cache"; missing keys default to the backend's)."""
    src = Path(path)
    if not src.is_file():
        raise ValueError(f"JSONL file {str(src)!r} does not exist")
    with src.open(encoding="utf-8") as fh:
        return sum(_import_line(backend, line, f"{src}:{n}")
                   for n, line in enumerate(fh, start=1) if line.strip())


def _import_line(backend: Any, line: str, where: str) -> int:
    try:
        record = _Record.model_validate_json(line)
    except ValidationError as error:
        raise ValueError(f"{where}: {one_line(error)}") from None
    messages = record.messages or (
        ([{"role": "system", "content": record.system}] if record.system else [])
        + [{"role": "user", "content": record.prompt}])
    name = record.backend or backend.name
    identity = record.identity or backend.identity
    meta: dict[str, Any] = {"backend": name, "identity": identity,
                            "model": record.model or backend.model_label()}
    if record.replies is not None:  # the scores of candidate replies (see LLMBackend.score)
        options = record.options or backend.score_options()
        key = score_key(name, identity, options, record.replies, messages)
        meta.update(options=options, replies=record.replies, messages=messages)
    else:
        options = record.options or backend.options()
        key = answer_key(name, identity, options, record.schema_, messages)
        meta.update(options=options, schema=record.schema_, messages=messages)
    new = backend.cache.get(key) is None
    backend.cache.put(key, record.answer, meta, record.created)
    return int(new)


# ---- the identity of a GGUF file ---------------------------------------------------------
_HASHES: dict[tuple[str, int, int], str] = {}
_HASH_LOCK = threading.Lock()


def file_sha256(path: str | os.PathLike[str], memo: str | os.PathLike[str] | None = None) -> str:
    """SHA-256 of a file's content, once per (path, size, mtime); ``memo``: a JSON file
    remembering them across processes (None: this process only)."""
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


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class _Record(BaseModel):
    """One JSON line of `import_answers`."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    answer: str = Field(min_length=1, validation_alias=AliasChoices("answer", "description"),
                        pattern=r"\S")
    messages: list[_Message] | None = Field(None, min_length=1)
    prompt: str | None = Field(None, min_length=1)
    system: str | None = None
    backend: str | None = Field(None, min_length=1)
    identity: str | None = Field(None, min_length=1)
    model: str | None = Field(None, min_length=1)
    created: str | None = Field(None, min_length=1)
    options: dict[str, Any] | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    replies: list[str] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _question(self) -> _Record:
        if self.messages is None and self.prompt is None:
            raise ValueError("give messages (a list of role/content) or prompt (a string)")
        if self.messages is not None:
            self.messages = [m.model_dump() for m in self.messages]  # type: ignore[misc]
        return self
