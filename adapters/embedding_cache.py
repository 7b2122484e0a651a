"""Text -> vector cache on the one persistent store of the project.

Key: the encoder's ``name`` plus the SHA-256 of the text; value: the vector's float32
bytes. Storage, sharing between processes, the memory bound and what happens to a damaged
file are those of `langadapt.llm.store.SQLiteStore` (the LLM answer cache uses the same):
a damaged file is moved aside to ``<path>.corrupt-<time>`` with one warning and the cache
goes on with a fresh file. A stored vector of the wrong length or with NaN is deleted and
encoded again, never returned. Vectors handed out are shared and read-only.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..llm.store import SQLiteStore

__all__ = ["EmbeddingCache", "text_key"]


def text_key(encoder_name: str, text: str) -> str:
    """The store key of ``text`` under the encoder named ``encoder_name``."""
    return f"{encoder_name}\x1f{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


class EmbeddingCache:
    """Vectors of texts, computed once.

    ``encoder``: anything with ``name``, ``dimension`` and ``encode_many``. ``path``: SQLite
    file of the persistent store, or None for memory only. ``capacity``: most vectors kept in
    memory (least recently used dropped first; 20 000 vectors of 384 floats are ~31 MB).
    Counters: ``hits`` (texts served from memory or the file), ``misses`` (texts encoded),
    ``store_hits`` (the part of ``hits`` read from the file).
    """

    def __init__(self, encoder: Any, path: str | os.PathLike[str] | None = None,
                 capacity: int = 20_000) -> None:
        self.encoder = encoder
        self.store = SQLiteStore(path, capacity, what="embedding cache", decode=self._decode)
        self.hits = 0
        self.misses = 0
        self.store_hits = 0

    @property
    def path(self) -> Any:
        return self.store.path

    def _decode(self, blob: Any) -> np.ndarray | None:
        dim = self.encoder.dimension
        if not isinstance(blob, bytes) or len(blob) != 4 * dim:
            return None
        vector = np.frombuffer(blob, dtype=np.float32)
        return vector if np.isfinite(vector).all() else None

    def lookup_many(self, texts: Iterable[str]) -> list[np.ndarray]:
        """Vectors of ``texts`` (shared, read-only), encoding the missing ones in one
        ``encode_many`` call."""
        if isinstance(texts, str):
            raise ValueError(f"texts={texts!r} is a single str; expected a list of str "
                             "(wrap it: [text])")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise ValueError(f"text {text!r} is a {type(text).__name__}; expected str")
        keys = [text_key(self.encoder.name, text) for text in texts]
        before = self.store.file_hits
        found = self.store.get_many(keys)
        from_file = self.store.file_hits - before
        todo = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in found))
        if todo:
            matrix = np.asarray(self.encoder.encode_many(todo), dtype=np.float32)
            if matrix.shape != (len(todo), self.encoder.dimension):
                raise ValueError(f"encoder {self.encoder.name!r} returned shape {matrix.shape}; "
                                 f"expected {(len(todo), self.encoder.dimension)}")
            rows = []
            for row, text in zip(matrix, todo, strict=True):
                vector = np.array(row, dtype=np.float32)  # owns its memory
                vector.flags.writeable = False
                key = text_key(self.encoder.name, text)
                found[key] = vector
                rows.append((key, vector, vector.tobytes(), None))
            self.store.put_many(rows)
        self.misses += len(todo)
        self.hits += len(texts) - len(todo)
        self.store_hits += from_file
        return [found[key] for key in keys]

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
        return self.store.memory_size

    def stored_count(self) -> int:
        """Number of vectors in the persistent store (0 without one)."""
        return len(self.store) if self.store.path is not None else 0

    def close(self) -> None:
        """Close the SQLite file (the memory part stays usable)."""
        self.store.close()
