"""``embedding: sentence_set``: a description as the set of its sentences, each distinct
sentence encoded once, in ``max_sentences`` rows of ``[present, vector]`` (docs/adapters.md,
"Sentence sets"). Row 0 holds the first sentence (a MiniGrid mission); a set extractor
(`agents.sb3_extractors.SentenceSetAttention`) pools the others in any order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .sentence_mean import sentences_of

__all__ = ["SentenceSetOverflow", "check_set_size", "set_box", "sentence_set_vectors"]


class SentenceSetOverflow(ValueError):
    """A description with more sentences than ``max_sentences`` rows: the setting is too
    small for the describer (one line, raised by the check and by a run alike)."""


def check_set_size(text: str, parts: Sequence[str], max_sentences: int, source: str) -> None:
    """`SentenceSetOverflow` naming the setting and the count when ``parts`` (the sentences
    of ``text``) do not fit ``max_sentences`` rows."""
    if len(parts) > max_sentences:
        raise SentenceSetOverflow(
            f"embedding: sentence_set holds max_sentences={max_sentences} sentences; the "
            f"describer {source} gave {len(parts)} ({text[:80]!r}...): raise max_sentences "
            f"to at least {len(parts)}")


def sentence_set_vectors(texts: Sequence[str], lookup: Callable[[list[str]], list[np.ndarray]],
                         max_sentences: int, dimension: int, source: str) -> list[np.ndarray]:
    """The read-only flat set of each text: ``max_sentences`` rows of ``1 + dimension``
    floats (present, then the sentence's vector; absent rows all zero). ValueError naming
    the count when a text has more sentences than rows (never a silent cut)."""
    sentences = [sentences_of(text, "sentence_set", source) for text in texts]
    for text, parts in zip(texts, sentences, strict=True):
        check_set_size(text, parts, max_sentences, source)
    distinct = list(dict.fromkeys(s for parts in sentences for s in parts))
    found = dict(zip(distinct, lookup(distinct), strict=True))
    out = []
    for parts in sentences:
        rows = np.zeros((max_sentences, 1 + dimension), dtype=np.float32)
        for index, sentence in enumerate(parts):
            rows[index, 0] = 1.0
            rows[index, 1:] = found[sentence]
        vector = rows.ravel()
        vector.flags.writeable = False
        out.append(vector)
    return out


def set_box(unit_low: np.ndarray, max_sentences: int) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` of a flat set: each row's presence in [0, 1], its vector (and kept
    numbers) in [unit_low, -unit_low]."""
    row_low = np.concatenate([[0.0], unit_low])
    row_high = np.concatenate([[1.0], -unit_low])
    return np.tile(row_low, max_sentences), np.tile(row_high, max_sentences)
