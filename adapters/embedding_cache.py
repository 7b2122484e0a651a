"""Text -> vector, computed once, in the one keyed store of the project.

Key: the encoder's ``name`` plus the SHA-256 of the text; value: the vector's float32
bytes. The store is `langadapt.llm.store.open_store` of ``path`` — the same store (and, in
an experiment's ``cache_dir``, the same file) as the LLM answers — so storage, sharing
between processes, the memory bound and what happens to a damaged file are its rules. A
stored vector of the wrong length, with NaN or infinities, or longer than
:data:`MAX_VECTOR_NORM` (a sentence encoder's vectors are about 1 long, 10 at most) is
encoded again, never returned. Vectors handed out are shared and read-only.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
from gymnasium import spaces

from ..llm.store import open_store
from .encoder import get_encoder
from .representation import (
    Standardiser,
    fit_standardiser,
    random_walk_inputs,
    sentence_slots_vector,
)
from .sentence_mean import sentence_mean_vectors, sentences_of

__all__ = ["EmbeddingCache", "Representation", "language_box", "text_key"]


MAX_VECTOR_NORM = 1_000.0
"""Longest stored vector used (L2 norm): a longer one was not written by an encoder."""


def text_key(encoder_name: str, text: str) -> str:
    """The store key of ``text`` under the encoder named ``encoder_name``."""
    return f"{encoder_name}\x1f{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


class EmbeddingCache:
    """Vectors of texts, computed once.

    ``encoder``: anything with ``name``, ``dimension`` and ``encode_many``. ``path``: SQLite
    file of the persistent store, or None for memory only. ``capacity``: most entries kept in
    memory (least recently used dropped first; 20 000 vectors of 384 floats are ~31 MB).
    Counters: ``hits`` (texts served from memory or the file), ``misses`` (texts encoded),
    ``store_hits`` (the part of ``hits`` read from the file).
    """

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
        """Vectors of ``texts`` (shared, read-only): from the store, else encoded — the
        missing ones in one ``encode_many`` call — and stored."""
        if isinstance(texts, str):
            raise ValueError(f"texts={texts!r} is a single str; expected a list of str "
                             "(wrap it: [text])")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise ValueError(f"text {text!r} is a {type(text).__name__}; expected str")
        keys = [text_key(self.encoder.name, text) for text in texts]
        before = self.store.file_hits
        found = self.store.get_many(keys, self._decode)
        self.store_hits += self.store.file_hits - before
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
        """Close the SQLite file (the memory part stays usable); the store is shared by
        every user of the file in this process, who then also write to memory only."""
        self.store.close()


def language_box(encoder: Any, slots: int, normalise: str, raw: spaces.Box | None
                 ) -> spaces.Box:
    """Box of float32: ``slots`` vectors of the encoder's dimension (bounds [-1, 1] when
    its vectors are L2-normalised and ``normalise`` is none, else unbounded), then the
    bounds of ``raw`` (the raw observation, with ``with_raw``)."""
    bound = 1.0 if getattr(encoder, "normalized", False) and normalise == "none" else np.inf
    low = np.full(encoder.dimension * slots, -bound)
    high = np.full(encoder.dimension * slots, bound)
    if raw is not None:
        low, high = np.concatenate([low, raw.low.ravel()]), np.concatenate([high, raw.high.ravel()])
    return spaces.Box(low=low.astype(np.float32), high=high.astype(np.float32), dtype=np.float32)


class Representation:
    """`BaseAdapter`'s embedding cache, observation space, standardiser and `encode_many`
    (a mixin: the settings and ``_cache``, ``_shared_encoder``, ``_space``, ``_env``,
    ``_n_actions``, ``_observation_space``, ``_standardiser`` are the adapter's)."""

    @property
    def embedding_cache(self) -> EmbeddingCache:
        """The embedding cache (created on first use, with the shared encoder)."""
        if self._cache is None:
            self._cache = EmbeddingCache(self._shared_encoder or get_encoder(self.encoder),
                                         self.embedding_cache_path,
                                         self.embedding_cache_capacity)
        return self._cache

    @property
    def observation_space(self) -> spaces.Box:
        """Box of float32: the language vector (see `language_box`), then with ``with_raw``
        the raw observation's bounds."""
        if self._observation_space is None:
            slots = self.sentence_slots if self.embedding == "sentences" else 1
            self._observation_space = language_box(self.embedding_cache.encoder, slots,
                                                   self.normalise,
                                                   self._space if self.with_raw else None)
        return self._observation_space

    @property
    def standardiser(self) -> Standardiser:
        """The centring/whitening, fitted on first use on the fit set and then fixed (see
        `adapters.representation`)."""
        if self._standardiser is None:
            if self.normalise == "none":
                raise ValueError("normalise is none: this adapter has no standardiser")
            walk = random_walk_inputs(copy.deepcopy(self._env), self.fit_steps, self.fit_seed,
                                      list(range(self._n_actions or 0)), self.check_input)
            texts = list(dict.fromkeys(text for text, _ in self.describe_checked(walk, False)))
            self._standardiser = fit_standardiser(np.stack(self._embedded(texts)),
                                                  whiten=self.normalise == "whiten")
        return self._standardiser

    def encode_many(self, texts: Iterable[str]) -> np.ndarray:
        """Vectors of ``texts`` as a new float32 array ``(n, dimension)`` (cached)."""
        if isinstance(texts, str):
            raise ValueError(f"texts={texts!r} is a single str; expected a list of str "
                             "(wrap it: [text])")
        vectors = self.lookup(list(texts))
        if not vectors:
            return np.empty((0, self.embedding_cache.encoder.dimension), dtype=np.float32)
        return np.stack(vectors)

    def _embedded(self, texts: list[str]) -> list[np.ndarray]:
        """The vectors of ``texts`` before centring: one per text (``paragraph``), the
        sentences' vectors in fixed slots (``sentences``) or their mean (``sentence_mean``)."""
        if self.embedding == "paragraph":
            return self.lookup(texts)
        source = self.text_source()
        if self.embedding == "sentence_mean":
            return sentence_mean_vectors(texts, self.lookup, source)
        sentences = [sentences_of(text, "sentences", source) for text in texts]
        distinct = list(dict.fromkeys(s for parts in sentences for s in parts))
        found = dict(zip(distinct, self.lookup(distinct), strict=True))
        dimension = self.embedding_cache.encoder.dimension
        vectors = [sentence_slots_vector([found[s] for s in parts], self.sentence_slots,
                                         dimension) for parts in sentences]
        for vector in vectors:
            vector.flags.writeable = False
        return vectors

    def text_source(self) -> str:
        """What writes the descriptions, for error messages: the describer's name."""
        describer = getattr(self, "_describer", None)
        if describer is None or self.kind != "language":  # the llm adapter: its model's text
            return f"of the {self.kind} adapter"
        return getattr(describer, "__name__", type(describer).__name__)

    def lookup(self, texts: list[str]) -> list[np.ndarray]:
        """Vectors of ``texts`` (shared, read-only): the store, else the encoder."""
        cache = self.embedding_cache
        hits, misses = cache.hits, cache.misses
        vectors = cache.lookup_many(texts)
        self._counts["hits"] += cache.hits - hits
        self._counts["misses"] += cache.misses - misses
        return vectors
