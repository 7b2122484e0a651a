"""Helpers shared by the adapter tests (tests/test_adapters*.py and their subprocesses)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


class CountingEncoder:
    """A tiny deterministic stand-in encoder (no model): text -> vector from its hash.

    Used where a test is about the caches, not about MiniLM; ``calls`` counts texts.
    """

    def __init__(self, name: str = "counting-test-encoder", dimension: int = 8) -> None:
        self.name = name
        self._dimension = dimension
        self.calls = 0

    @property
    def dimension(self) -> int:
        return self._dimension

    def encode_many(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += len(texts)
        rows = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            rows.append(
                np.frombuffer(digest[: 4 * self._dimension], dtype=np.uint8)[: self._dimension]
            )
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self._dimension) / 255.0
