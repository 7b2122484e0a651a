"""The representation settings of the text adapters — ``embedding`` (paragraph, sentence
slots, the sentences' mean or their set, from one sentence splitter), ``normalise`` (shrunk
ZCA fitted once on the fit set) and ``with_raw``. See docs/adapters.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["REPRESENTATION_DEFAULTS", "SENTENCE_ENDS", "SentenceSetOverflow", "Standardiser",
           "check_representation", "check_set_size", "fit_standardiser", "sentence_mean_vectors",
           "sentence_set_vectors", "sentence_slots_vector", "sentences_of", "set_box",
           "split_sentences"]

#: The representation settings and their defaults.
REPRESENTATION_DEFAULTS: dict[str, Any] = {
    "embedding": "paragraph", "sentence_slots": 4, "max_sentences": 24, "normalise": "none",
    "fit_steps": 2000, "fit_seed": 0, "with_raw": False,
}

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def check_representation(settings: Mapping[str, Any], adapter: str) -> None:
    """ValueError for a representation setting given where it does not apply."""
    given = [key for key in REPRESENTATION_DEFAULTS if key in settings]
    if adapter == "raw" and given:
        raise ValueError(f"{given[0]}: a representation setting of the language and llm "
                         "adapters does not apply to the raw adapter (its observation is the "
                         "raw state; the language adapter's with_raw puts both side by side)")
    embedding = settings.get("embedding", "paragraph")
    if "sentence_slots" in settings and embedding != "sentences":
        raise ValueError(f"sentence_slots applies to embedding: sentences, not to embedding: "
                         f"{embedding}")
    if "max_sentences" in settings and embedding != "sentence_set":
        raise ValueError(f"max_sentences applies to embedding: sentence_set, not to embedding: "
                         f"{embedding}")
    normalise = settings.get("normalise", "none")
    if embedding == "sentence_set" and normalise != "none":
        raise ValueError(f"normalise: {normalise} applies to one vector per state; "
                         "embedding: sentence_set keeps each sentence's own vector (set "
                         "normalise: none)")
    for key in ("fit_steps", "fit_seed"):
        if key in settings and normalise not in ("centre", "whiten"):
            raise ValueError(f"{key} applies to normalise: centre or whiten, not to "
                             f"normalise: {normalise}")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``: split after ``.``, ``!`` or ``?`` followed by space."""
    return [part for part in _SENTENCE_END.split(text.strip()) if part]


def sentence_slots_vector(vectors: list[np.ndarray], slots: int, dimension: int) -> np.ndarray:
    """Sentence vectors in ``slots`` slots (the ones past the last averaged into it)."""
    out = np.zeros((slots, dimension), dtype=np.float32)
    for index, vector in enumerate(vectors[: slots - 1]):
        out[index] = vector
    rest = vectors[slots - 1 :]
    if rest:
        out[slots - 1] = np.mean(rest, axis=0)
    return out.ravel()


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


# ``embedding: sentence_set``: the set of the sentences in ``max_sentences`` rows of
# ``[present, vector]``; row 0 holds the first sentence (a MiniGrid mission), a set extractor
# (`agents.sb3_extractors.SentenceSetAttention`) pools the others in any order.


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


class Standardiser:
    """``x -> (x - mean) @ matrix`` (``matrix`` None: centring only), fitted once."""

    def __init__(self, mean: np.ndarray, matrix: np.ndarray | None) -> None:
        self.mean = mean.astype(np.float64)
        self.matrix = None if matrix is None else matrix.astype(np.float64)

    def __call__(self, vector: np.ndarray) -> np.ndarray:
        centred = vector.astype(np.float64) - self.mean
        out = centred if self.matrix is None else centred @ self.matrix
        return out.astype(np.float32)


def fit_standardiser(vectors: np.ndarray, whiten: bool) -> Standardiser:
    """The `Standardiser` of the fit set ``vectors`` (one row per distinct text)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2 or len(vectors) < 2:
        raise ValueError(f"the fit set has {len(vectors)} distinct descriptions; centring "
                         "and whitening need at least 2 (raise fit_steps)")
    mean = vectors.mean(axis=0)
    if not whiten:
        return Standardiser(mean, None)
    centred = vectors - mean
    _, singular, right = np.linalg.svd(centred, full_matrices=False)
    eigenvalues = singular**2 / len(vectors)
    kept = eigenvalues > 1e-12 * max(eigenvalues.max(), 1e-300)
    if not kept.any():
        raise ValueError("the fit set's descriptions all have the same vector; whitening "
                         "needs some spread")
    eigenvalues, right = eigenvalues[kept], right[kept]
    eps = float(eigenvalues.mean())
    dimension = vectors.shape[1]
    matrix = np.eye(dimension) / np.sqrt(eps)
    matrix += right.T @ np.diag(1 / np.sqrt(eigenvalues + eps) - 1 / np.sqrt(eps)) @ right
    return Standardiser(mean, matrix)


def random_walk_inputs(env: Any, steps: int, seed: int, all_moves: list[int],
                       check: Callable[[tuple[Any, Any, Any]], Any]) -> list[Any]:
    """The checked inputs of ``steps`` uniformly random legal moves on ``env`` from ``seed``,
    terminal states included, with the wrapper's kind of history (the fit set)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    history: list[tuple[Any, int]] = []
    inputs = []
    for _ in range(steps):
        legal = info.get("legal_moves", all_moves)
        inputs.append(check((obs, legal, tuple(history))))
        action = int(rng.choice(list(legal)))
        previous = obs
        obs, _, terminated, truncated, info = env.step(action)
        history.append((previous, action))
        if terminated or truncated:
            inputs.append(check((obs, info.get("legal_moves", all_moves), tuple(history))))
            obs, info = env.reset()
            history = []
    return inputs
