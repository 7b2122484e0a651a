"""``embedding: sentence_mean``: the mean of the sentences' vectors, each distinct sentence
encoded once. See docs/adapters.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .representation import split_sentences

__all__ = ["SENTENCE_ENDS", "sentence_mean_vectors", "sentences_of"]

#: What ends a sentence; a description that does not end in one has no sentences to split.
SENTENCE_ENDS = (".", "!", "?")


def sentences_of(text: str, setting: str, source: str) -> list[str]:
    """The sentences of ``text``; ValueError naming ``setting`` and ``source`` (the
    describer) when it does not end in one of `SENTENCE_ENDS`."""
    stripped = text.strip()
    if not stripped.endswith(SENTENCE_ENDS):
        raise ValueError(f"embedding: {setting} needs descriptions made of sentences (ending "
                         f"in '.', '!' or '?'); the describer {source} gave {text[:80]!r}")
    return split_sentences(stripped)


def sentence_mean_vectors(texts: Sequence[str], lookup: Callable[[list[str]], list[np.ndarray]],
                          source: str) -> list[np.ndarray]:
    """The read-only mean sentence vector of each text (one ``lookup`` of the distinct
    sentences)."""
    sentences = [sentences_of(text, "sentence_mean", source) for text in texts]
    distinct = list(dict.fromkeys(s for parts in sentences for s in parts))
    found = dict(zip(distinct, lookup(distinct), strict=True))
    vectors = []
    for parts in sentences:
        vector = np.mean([found[s] for s in parts], axis=0, dtype=np.float64).astype(np.float32)
        vector.flags.writeable = False
        vectors.append(vector)
    return vectors
