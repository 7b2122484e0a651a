"""Text -> vector cache: a bounded in-memory LRU in front of an optional SQLite store.

Key: the encoder's ``name`` plus the SHA-256 of the text; value: the vector's float32
bytes and its dimension. The store uses SQLite's WAL journal, so two processes (two
training runs, say) can read and write the same file at once; each write is one short
transaction of ``INSERT OR IGNORE`` (the first writer of a key wins; the encoder is
deterministic, so every writer would store the same vector).

Integrity: on every read the stored dimension and byte length are checked against the
encoder; a row that fails the check is logged, deleted and re-encoded (never returned).
A file that is not a readable SQLite database is moved aside to ``<path>.corrupt-<time>``
with a logged warning and a fresh store is created (``on_corrupt="rebuild"``, the
default), or an :class:`EmbeddingCacheError` is raised (``on_corrupt="error"``).

Vectors handed out by :meth:`EmbeddingCache.get` are shared and read-only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

__all__ = ["EmbeddingCache", "EmbeddingCacheError", "TextEncoder"]

logger = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS embeddings ("
    " key TEXT PRIMARY KEY,"
    " encoder TEXT NOT NULL,"
    " dim INTEGER NOT NULL,"
    " vector BLOB NOT NULL)"
)
_SQL_CHUNK = 500  # keys per SELECT ... IN (...)


class EmbeddingCacheError(ValueError):
    """The persistent store cannot be used (unreadable, corrupt, wrong format)."""


class TextEncoder(Protocol):
    """What the cache needs from an encoder (``MiniLMEncoder`` is one)."""

    name: str

    @property
    def dimension(self) -> int: ...

    def encode_many(self, texts: Sequence[str]) -> np.ndarray: ...


def text_key(encoder_name: str, text: str) -> str:
    """The store key of ``text`` under the encoder named ``encoder_name``."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{encoder_name}\x1f{digest}"


class EmbeddingCache:
    """Vectors of texts, computed once.

    ``encoder``: anything with ``name``, ``dimension`` and ``encode_many`` (see
    :class:`TextEncoder`). ``path``: SQLite file for the persistent store, or ``None``
    for memory only. ``capacity``: most vectors kept in memory (least recently used
    are dropped first; 20 000 vectors of 384 floats are about 31 MB).

    Counters: ``hits`` (texts served from memory or the store), ``misses`` (texts that
    had to be encoded), ``store_hits`` (the part of ``hits`` that came from the store).
    """

    def __init__(
        self,
        encoder: TextEncoder,
        path: str | os.PathLike[str] | None = None,
        capacity: int = 20_000,
        on_corrupt: str = "rebuild",
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity={capacity!r}: expected a positive int")
        if on_corrupt not in ("rebuild", "error"):
            raise ValueError(f"on_corrupt={on_corrupt!r}: expected 'rebuild' or 'error'")
        self.encoder = encoder
        self.capacity = capacity
        self.on_corrupt = on_corrupt
        self.path: Path | None = None if path is None else Path(path).expanduser()
        self.hits = 0
        self.misses = 0
        self.store_hits = 0
        self._memory: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        if self.path is not None:
            self._db = self._open_store(self.path)

    # ----------------------------------------------------------------- store
    def _connect(self, path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(path, timeout=60.0, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout = 60000")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(_SCHEMA)
            columns = [row[1] for row in db.execute("PRAGMA table_info(embeddings)")]
            if columns != ["key", "encoder", "dim", "vector"]:
                raise sqlite3.DatabaseError(f"table 'embeddings' has columns {columns}")
            db.execute("SELECT key FROM embeddings LIMIT 1").fetchall()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _open_store(self, path: Path) -> sqlite3.Connection:
        if path.exists() and path.is_dir():
            raise EmbeddingCacheError(
                f"embedding cache path {str(path)!r} is a directory; expected a SQLite file path"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect(path)
        except sqlite3.DatabaseError as error:
            if self.on_corrupt == "error":
                raise EmbeddingCacheError(
                    f"embedding cache {str(path)!r} is not a usable SQLite store ({error}); "
                    "delete it or pass on_corrupt='rebuild'"
                ) from error
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            logger.warning(
                "embedding cache %s is not a usable SQLite store (%s); moved it to %s and "
                "started an empty store",
                path,
                error,
                aside,
            )
            os.replace(path, aside)
            for suffix in ("-wal", "-shm"):
                side = path.with_name(path.name + suffix)
                if side.exists():
                    os.replace(side, aside.with_name(aside.name + suffix))
            try:
                return self._connect(path)
            except sqlite3.DatabaseError as again:
                raise EmbeddingCacheError(
                    f"could not create a fresh embedding cache at {str(path)!r}: {again}"
                ) from again

    def close(self) -> None:
        """Close the SQLite connection (the memory part stays usable)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass

    def _store_read(self, keys: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        if self._db is None or not keys:
            return found
        dim = self.encoder.dimension
        bad: list[str] = []
        try:
            for start in range(0, len(keys), _SQL_CHUNK):
                chunk = keys[start : start + _SQL_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, encoder, dim, vector FROM embeddings WHERE key IN ({marks})",
                    chunk,
                ).fetchall()
                for key, encoder_name, stored_dim, blob in rows:
                    if (
                        encoder_name != self.encoder.name
                        or stored_dim != dim
                        or not isinstance(blob, bytes)
                        or len(blob) != 4 * dim
                    ):
                        bad.append(key)
                        continue
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if not np.isfinite(vector).all():
                        bad.append(key)
                        continue
                    found[key] = vector
            if bad:
                logger.warning(
                    "embedding cache %s: %d stored vector(s) failed the integrity check "
                    "(expected %d float32 values from encoder %r); they are deleted and "
                    "re-encoded",
                    self.path,
                    len(bad),
                    dim,
                    self.encoder.name,
                )
                self._db.executemany("DELETE FROM embeddings WHERE key = ?", [(k,) for k in bad])
        except sqlite3.DatabaseError as error:
            raise EmbeddingCacheError(
                f"reading the embedding cache {str(self.path)!r} failed: {error}"
            ) from error
        return found

    def _store_write(self, items: list[tuple[str, np.ndarray]]) -> None:
        if self._db is None or not items:
            return
        rows = [(key, self.encoder.name, int(v.shape[0]), v.tobytes()) for key, v in items]
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO embeddings (key, encoder, dim, vector) "
                    "VALUES (?, ?, ?, ?)",
                    rows,
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.DatabaseError as error:
            raise EmbeddingCacheError(
                f"writing to the embedding cache {str(self.path)!r} failed: {error}"
            ) from error

    # ---------------------------------------------------------------- memory
    def _remember(self, text: str, vector: np.ndarray) -> None:
        memory = self._memory
        memory[text] = vector
        memory.move_to_end(text)
        while len(memory) > self.capacity:
            memory.popitem(last=False)

    # ------------------------------------------------------------------- API
    def lookup_many(self, texts: Iterable[str]) -> list[np.ndarray]:
        """Vectors of ``texts`` as shared read-only arrays, encoding only the missing ones.

        All missing texts go to the encoder in one ``encode_many`` call (so batching and
        length sorting are the encoder's own).
        """
        if isinstance(texts, str):
            raise ValueError(
                f"texts={texts!r} is a single str; expected a list of str (wrap it: [text])"
            )
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise ValueError(f"text {text!r} is a {type(text).__name__}; expected str")
        with self._lock:
            out: list[np.ndarray | None] = [None] * len(texts)
            missing: dict[str, list[int]] = {}
            memory = self._memory
            for i, text in enumerate(texts):
                vector = memory.get(text)
                if vector is None:
                    missing.setdefault(text, []).append(i)
                else:
                    memory.move_to_end(text)
                    out[i] = vector
                    self.hits += 1
            if missing:
                keys = {text: text_key(self.encoder.name, text) for text in missing}
                stored = self._store_read(list(keys.values()))
                to_encode: list[str] = []
                for text, positions in missing.items():
                    vector = stored.get(keys[text])
                    if vector is None:
                        to_encode.append(text)
                        continue
                    vector.flags.writeable = False
                    self._remember(text, vector)
                    for i in positions:
                        out[i] = vector
                    self.hits += len(positions)
                    self.store_hits += len(positions)
                if to_encode:
                    matrix = np.asarray(self.encoder.encode_many(to_encode), dtype=np.float32)
                    if matrix.shape != (len(to_encode), self.encoder.dimension):
                        raise ValueError(
                            f"encoder {self.encoder.name!r} returned shape {matrix.shape}; "
                            f"expected {(len(to_encode), self.encoder.dimension)}"
                        )
                    written: list[tuple[str, np.ndarray]] = []
                    for row, text in zip(matrix, to_encode, strict=True):
                        vector = np.array(row, dtype=np.float32)  # own its memory
                        vector.flags.writeable = False
                        self._remember(text, vector)
                        written.append((keys[text], vector))
                        positions = missing[text]
                        for i in positions:
                            out[i] = vector
                        # The first occurrence was a miss; repeats in the same batch are hits.
                        self.misses += 1
                        self.hits += len(positions) - 1
                    self._store_write(written)
            return out  # type: ignore[return-value]

    def get(self, text: str) -> np.ndarray:
        """The vector of one text (shared, read-only), encoding it if needed."""
        return self.lookup_many([text])[0]

    def get_many(self, texts: Iterable[str]) -> np.ndarray:
        """Vectors of ``texts`` as a new float32 array ``(n, dimension)``."""
        vectors = self.lookup_many(texts)
        if not vectors:
            return np.empty((0, self.encoder.dimension), dtype=np.float32)
        return np.stack(vectors)

    def __len__(self) -> int:
        """Number of vectors held in memory."""
        return len(self._memory)

    def stored_count(self) -> int:
        """Number of vectors in the persistent store (0 without one)."""
        if self._db is None:
            return 0
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])
