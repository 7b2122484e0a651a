"""The adapter's two caches: `EmbeddingCache` (text -> vector, in the one keyed store) and
`Memo` (checked input -> ``(vector, text)``). See docs/adapters.md.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import numpy as np
from gymnasium import spaces

from ..llm.store import open_store
from .representation import set_box

__all__ = ["EmbeddingCache", "Memo", "language_box", "text_key"]


MAX_VECTOR_NORM = 1_000.0  # a longer stored vector was not written by an encoder: encoded again


def check_texts(texts: Iterable[str]) -> list[str]:
    """``texts`` as a list of str, else ValueError (the cache's and the encoder's check)."""
    if isinstance(texts, str):
        raise ValueError(f"texts={texts[:40]!r} is a single str; expected a list of str "
                         "(for one str: [text])")
    texts = list(texts)
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(f"text {text!r} is a {type(text).__name__}; expected str")
    return texts


def text_key(encoder_name: str, text: str) -> str:
    """The store key of ``text`` under the encoder named ``encoder_name``."""
    return f"{encoder_name}\x1f{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


class EmbeddingCache:
    """Vectors of texts, computed once (``encoder``: anything with ``name``, ``dimension`` and
    ``encode_many``; ``path``: the SQLite file, or None). docs/adapters.md, "Encoder and
    caches"."""

    def __init__(self, encoder: Any, path: str | os.PathLike[str] | None = None,
                 capacity: int = 20_000) -> None:
        self.encoder = encoder
        self.store = open_store(path, capacity, what="embedding cache")
        self.hits = 0
        self.misses = 0
        self.store_hits = 0

    @property
    def path(self) -> Any:
        return self.store.path

    def _decode(self, blob: Any) -> np.ndarray | None:
        if not isinstance(blob, bytes) or len(blob) != 4 * self.encoder.dimension:
            return None
        vector = np.frombuffer(blob, dtype=np.float32)
        if not np.isfinite(vector).all():
            return None
        return vector if np.linalg.norm(vector.astype(np.float64)) <= MAX_VECTOR_NORM else None

    def lookup_many(self, texts: Iterable[str]) -> list[np.ndarray]:
        """Vectors of ``texts`` (shared, read-only): stored, else encoded in one call."""
        texts = check_texts(texts)
        keys = [text_key(self.encoder.name, text) for text in texts]
        before = self.store.file_hits
        found = self.store.get_many(keys, self._decode)
        self.store_hits += self.store.file_hits - before
        key_of = dict(zip(texts, keys, strict=True))
        todo = [text for text, key in key_of.items() if key not in found]
        if todo:
            encode = getattr(self.encoder, "encode_checked", self.encoder.encode_many)
            matrix = np.asarray(encode(todo), dtype=np.float32)
            if matrix.shape != (len(todo), self.encoder.dimension):
                raise ValueError(f"encoder {self.encoder.name!r} returned shape {matrix.shape}; "
                                 f"expected {(len(todo), self.encoder.dimension)}")
            rows = []
            for row, text in zip(matrix, todo, strict=True):
                vector = np.array(row, dtype=np.float32)  # owns its memory
                vector.flags.writeable = False
                key = key_of[text]
                found[key] = vector
                rows.append((key, vector, vector.tobytes(), {"encoder": self.encoder.name}))
            self.store.put_many(rows)
        self.misses += len(todo)
        self.hits += len(texts) - len(todo)
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
        """Number of entries held in memory."""
        return self.store.memory_size

    def stored_count(self) -> int:
        """Number of entries in the persistent store (0 without one)."""
        return len(self.store) if self.store.path is not None else 0

    def close(self) -> None:
        """Close the SQLite file, shared by its every user in this process (memory stays)."""
        self.store.close()


def language_box(encoder: Any, slots: int, normalise: str, raw: spaces.Box | None,
                 set_rows: int | None = None, numbers: int = 0) -> spaces.Box:
    """Box of float32: ``slots`` vectors ([-1, 1] when L2-normalised and not centred), or
    ``set_rows`` rows of a sentence set (`sentence_set.set_box`), each vector followed by
    ``numbers`` unbounded values (with ``numbers``; one group of them after the vector when
    there is one slot), then ``raw``'s bounds (with ``with_raw``)."""
    bound = 1.0 if getattr(encoder, "normalized", False) and normalise == "none" else np.inf
    unit_low = np.concatenate([np.full(encoder.dimension, -bound), np.full(numbers, -np.inf)])
    if set_rows is not None:
        low, high = set_box(unit_low, set_rows)
    else:
        low = np.tile(unit_low, slots)
        high = -low
    if raw is not None:
        low, high = np.concatenate([low, raw.low.ravel()]), np.concatenate([high, raw.high.ravel()])
    return spaces.Box(low=low.astype(np.float32), high=high.astype(np.float32), dtype=np.float32)


class Memo:
    """Checked input -> ``(vector, text)``, oldest dropped first past ``capacity``;
    ``by_state`` (only when the text ignores the history) makes a warm step one dict hit
    and a list compare (docs/adapters.md)."""

    __slots__ = ("entries", "by_state", "history_key", "capacity", "dtype", "shape", "nbytes",
                 "misses")

    def __init__(self) -> None:
        self.entries: dict[Hashable, tuple[np.ndarray, str]] = {}
        self.by_state: dict[bytes, tuple[list[int], tuple[np.ndarray, str]]] = {}
        self.history_key: Callable[[Any], Hashable] | None = None
        self.capacity = 0
        self.dtype: np.dtype | None = None
        self.shape: tuple[int, ...] = ()
        self.nbytes = 0
        self.misses = 0

    def configure(self, space: spaces.Box, capacity: int,
                  history_key: Callable[[Any], Hashable] | None) -> None:
        self.dtype = np.dtype(space.dtype)
        self.shape = tuple(space.shape)
        self.nbytes = self.dtype.itemsize * int(np.prod(self.shape))
        self.capacity = capacity
        self.history_key = history_key
        self.clear()

    def key(self, state: np.ndarray, legal: tuple[int, ...], history: Any) -> Hashable:
        """The key of a checked input (legal moves as bytes when all are below 256)."""
        if all(0 <= move < 256 for move in legal):
            base: Hashable = state.tobytes() + bytes(legal)
        else:
            base = (state.tobytes(), legal)
        return base if self.history_key is None else (base, self.history_key(history))

    def put(self, key: Hashable, pair: tuple[np.ndarray, str]) -> None:
        if self.capacity == 0:
            return
        entries = self.entries
        if key not in entries and len(entries) >= self.capacity:
            oldest = next(iter(entries))
            del entries[oldest]
            split = self._split(oldest)
            if split is not None:
                entry = self.by_state.get(split[0])
                if entry is not None and entry[0] == split[1]:
                    del self.by_state[split[0]]
        entries[key] = pair
        split = self._split(key)
        if split is not None:
            self.by_state[split[0]] = (split[1], pair)

    def _split(self, key: Hashable) -> tuple[bytes, list[int]] | None:
        """(state bytes, legal moves) of a key without a history part, else None."""
        if self.history_key is not None:
            return None
        if type(key) is bytes:
            return key[: self.nbytes], list(key[self.nbytes :])
        return key[0], list(key[1])  # type: ignore[index]

    def clear(self) -> None:
        self.entries.clear()
        self.by_state.clear()
