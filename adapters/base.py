"""`BaseAdapter`: the one base of every state adapter, and the path of a step.

An adapter turns ``(state, legal_moves, episode_action_history)`` into a description and
a vector; its fields are the settings (pydantic, validated once, then fixed). A subclass
supplies `describe_one(state, legal_moves, history) -> str` and, when the text depends on
the history (``uses_history``), `history_key(history)`. One step (`adapt`):

1. the **memo** (`adapters.memo.Memo`, the adapter's one memo): a repeated input is a
   dict look-up; else
2. the **description** (`describe_one`): the describer's sentence (`LanguageAdapter`), or
   the prompt and the LLM's answer, from the store or the backend (`LLMAdapter`);
3. the **embedding** (`text_vectors` -> `EmbeddingCache`): from the store, else encoded;
4. the **observation** (`observation_of`): with ``with_raw`` the raw state after it.

LLM answers and embeddings share one keyed store (`langadapt.llm.store.open_store`, one
SQLite file per cache folder). Returned vectors are **shared and read-only**.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool

from ..environments import unwrap_env
from .embedding_cache import EmbeddingCache, Representation
from .inputs import FLATTENED_SPACES, AdapterInput, Checked, InputChecks, env_spaces
from .memo import Memo
from .prerender import prerender_checked
from .representation import Standardiser, check_representation

__all__ = ["FLATTENED_SPACES", "AdapterInput", "BaseAdapter", "Memo", "STAT_KEYS", "env_spaces"]

#: Keys every adapter's ``stats()`` has (0 where not applicable).
STAT_KEYS: tuple[str, ...] = (
    "llm_calls", "llm_cache_hits", "llm_failures", "llm_fallbacks", "llm_seconds",
    "llm_breaker_skips", "encoder_calls", "embedding_cache_hits", "embedding_cache_misses",
    "prompt_cuts")


class BaseAdapter(InputChecks, Representation, BaseModel):
    """Base of every adapter: ``adapter(state, legal_moves=(), episode_action_history=(),
    encode=True)`` -> the float32 vector (``encode=True``) or the description.

    Build one as ``SomeAdapter(env, **settings)``; ``env`` is an environment instance or a
    gymnasium id. ``encoder`` may also be an encoder object and ``embedding_cache`` an
    `EmbeddingCache` to share (then its encoder is used).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True,
                              str_strip_whitespace=True)
    #: Name of the adapter kind (``adapters.make(kind, env)``).
    kind: ClassVar[str] = "base"
    #: Whether the description says what the state means (False: the raw numbers).
    describes_states: ClassVar[bool] = True

    encoder: str | None = Field(
        None, description="sentence-transformers model name or path; None = packaged MiniLM")
    embedding_cache_path: Path | None = Field(
        None, description="SQLite file of the persistent store of embeddings (may be the LLM "
        "answers' file); None = memory only")
    embedding_cache_capacity: int = Field(20_000, ge=1, le=10**8,
                                          description="vectors kept in memory")
    memo_capacity: int = Field(100_000, ge=0, le=10**8, description="inputs remembered")
    embedding: Literal["paragraph", "sentences", "sentence_mean"] = Field(
        "paragraph", description="one vector of the whole description, one per sentence in "
        "fixed slots (adapters.representation), or the mean of the sentences' vectors "
        "(adapters.sentence_mean)")
    sentence_slots: int = Field(4, ge=1, le=64, description="slots of embedding: sentences")
    normalise: Literal["none", "centre", "whiten"] = Field(
        "none", description="subtract the fit set's mean (centre), then also whiten (whiten)")
    fit_steps: int = Field(2000, ge=1, le=10**6,
                           description="random moves whose distinct descriptions are the fit set")
    fit_seed: int = Field(0, ge=0, description="seed of the fit set's random moves")
    with_raw: StrictBool = Field(False, description="append the raw observation to the vector")
    memo: Memo = Field(default_factory=Memo, exclude=True, repr=False,
                       description="the memo (filled by the adapter; read it, never write it)")

    _env: Any = PrivateAttr(default=None)
    _n_actions: int | None = PrivateAttr(default=None)
    _space: spaces.Box = PrivateAttr(default=None)
    _env_space: spaces.Space = PrivateAttr(default=None)
    _cache: EmbeddingCache | None = PrivateAttr(default=None)
    _shared_encoder: Any = PrivateAttr(default=None)
    _counts: dict[str, int] = PrivateAttr(default_factory=lambda: {"hits": 0, "misses": 0})
    _observation_space: spaces.Box | None = PrivateAttr(default=None)
    _standardiser: Standardiser | None = PrivateAttr(default=None)

    def __init__(self, env: Any = None, /, *, embedding_cache: EmbeddingCache | None = None,
                 **settings: Any) -> None:
        encoder = settings.get("encoder")
        if isinstance(encoder, os.PathLike):
            settings["encoder"] = os.fspath(encoder)
        elif encoder is not None and not isinstance(encoder, str):
            if not callable(getattr(encoder, "encode_many", None)):
                raise ValueError(f"encoder={encoder!r}: expected a model name, a path or an "
                                 "encoder object with encode_many()")
            settings["encoder"] = str(encoder.name)
        check_representation(settings, self.kind)
        super().__init__(**settings)
        if embedding_cache is not None:
            if not isinstance(embedding_cache, EmbeddingCache):
                raise ValueError(f"embedding_cache={embedding_cache!r}: expected an EmbeddingCache")
            if self.embedding_cache_path is not None:
                raise ValueError("pass embedding_cache= or embedding_cache_path=, not both")
            if encoder is not None and embedding_cache.encoder.name != self.encoder:
                raise ValueError("embedding_cache= was built for another encoder than encoder=")
        self._cache = embedding_cache
        self._shared_encoder = None if isinstance(encoder, (str, os.PathLike)) else encoder
        if env is None:
            raise ValueError(f"{type(self).__name__} needs an environment: "
                             f"{type(self).__name__}(env, ...) with an instance or a gymnasium id")
        given = unwrap_env(env) if isinstance(env, str) else env
        self._env = unwrap_env(given)
        self._env_space, self._space, self._n_actions = env_spaces(given)
        self.clear_memo()

    # ---- what a subclass supplies (then calls ``clear_memo()`` once its parts are ready) --
    def describe_one(self, state: np.ndarray, legal_moves: tuple[int, ...],
                     history: Sequence[Any]) -> str:
        """The description of one checked input (``state`` of the env's shape and dtype and
        finite, ``legal_moves`` a tuple of distinct ints)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement describe_one()")

    @property
    def uses_history(self) -> bool:
        """Whether the description depends on the history (then `history_key` is used)."""
        return False

    def history_key(self, history: Any) -> Hashable:
        """The part of the history the description depends on, as a hashable value."""
        return ()

    def memorable(self, text: str) -> bool:
        """Whether a description may be remembered (an LLM adapter's fallbacks may not)."""
        return True

    # ---- the step ----------------------------------------------------------------------
    def __call__(self, state: Any, legal_moves: Iterable[int] = (),
                 episode_action_history: Sequence[Any] = (), encode: bool = True
                 ) -> np.ndarray | str:
        """The vector (``encode=True``, shared read-only float32) or the description."""
        if not encode:
            return self.describe(state, legal_moves, episode_action_history)
        return self.adapt(state, legal_moves, episode_action_history)[0]

    def adapt(self, state: Any, legal_moves: Iterable[int] = (),
              episode_action_history: Sequence[Any] = ()) -> tuple[np.ndarray, str]:
        """``(vector, text)`` of one input: the memo, else the cold path (module docstring)."""
        memo = self.memo
        try:  # the warm path: an array of the env's dtype and shape, int moves, seen before
            if state.dtype is memo.dtype:
                kind = type(legal_moves)
                if kind is list:  # the state index (empty when the history matters)
                    entry = memo.by_state.get(state.tobytes())
                    if (entry is not None and entry[0] == legal_moves
                            and state.shape == memo.shape):
                        for move in legal_moves:
                            if type(move) is not int:
                                break
                        else:
                            return entry[1]
                if (kind is list or kind is tuple) and state.shape == memo.shape:
                    for move in legal_moves:
                        if type(move) is not int:
                            break
                    else:
                        key = state.tobytes() + bytes(legal_moves)
                        hk = memo.history_key
                        hit = memo.entries.get(key if hk is None
                                               else (key, hk(episode_action_history)))
                        if hit is not None:
                            return hit
        except (AttributeError, TypeError, ValueError):
            pass
        state, legal, history = self.check_input((state, legal_moves, episode_action_history))
        key = memo.key(state, legal, history)
        hit = memo.entries.get(key)
        if hit is not None:
            return hit
        memo.misses += 1
        text = self.describe_one(state, legal, history)                      # 2. description
        pair = (self.observation_of(self.text_vectors([text])[0], state), text)  # 3. and 4.
        if self.memorable(text):
            memo.put(key, pair)
        return pair

    def adapt_many(self, inputs: Iterable[AdapterInput]) -> list[tuple[np.ndarray, str]]:
        """``(vector, text)`` of each input, in order, as `adapt` gives them one by one: the
        memo's where seen; the cold inputs described together (`describe_checked`: an LLM
        adapter's requests in flight together) and their texts encoded in one batch."""
        items = self._checked(inputs)
        memo = self.memo
        keys = [memo.key(*item) for item in items]
        pairs = [memo.entries.get(key) for key in keys]
        cold: dict[Hashable, int] = {}  # a cold key -> its first input
        for index, (key, pair) in enumerate(zip(keys, pairs, strict=True)):
            if pair is None:
                cold.setdefault(key, index)
        if not cold:
            return pairs
        memo.misses += len(cold)
        firsts = list(cold.values())
        described = self.describe_checked([items[i] for i in firsts], progress=False)
        vectors = self.text_vectors([text for text, _ in described])
        fresh = {}
        for index, (text, memorable), vector in zip(firsts, described, vectors, strict=True):
            pair = fresh[keys[index]] = (self.observation_of(vector, items[index][0]), text)
            if memorable:
                memo.put(keys[index], pair)
        return [pair if pair is not None else fresh[key] for key, pair in zip(keys, pairs,
                                                                              strict=True)]

    def text_vectors(self, texts: list[str]) -> list[np.ndarray]:
        """The language vectors of ``texts`` as the representation settings make them
        (read-only; see `adapters.representation`)."""
        vectors = self._embedded(texts)
        if self.normalise != "none":
            standardise = self.standardiser
            vectors = [standardise(vector) for vector in vectors]
            for vector in vectors:
                vector.flags.writeable = False
        return vectors

    def observation_of(self, language_vector: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The observation: the language vector, with ``with_raw`` the raw state after it."""
        if not self.with_raw:
            return language_vector
        vector = np.concatenate([language_vector, state.astype(np.float32).ravel()])
        vector.flags.writeable = False
        return vector

    # ---- descriptions and batches ------------------------------------------------------
    def describe(self, state: Any, legal_moves: Iterable[int] = (),
                 episode_action_history: Sequence[Any] = ()) -> str:
        """The description of one input (the remembered one when it was seen before)."""
        state, legal, history = self.check_input((state, legal_moves, episode_action_history))
        hit = self.memo.entries.get(self.memo.key(state, legal, history))
        return hit[1] if hit is not None else self.describe_one(state, legal, history)

    def describe_many(self, items: Iterable[AdapterInput], progress: bool = False) -> list[str]:
        """Descriptions of ``(state, legal_moves, history)`` items, in order."""
        return [text for text, _ in self.describe_checked(self._checked(items), progress)]

    def describe_checked(self, items: list[Checked], progress: bool) -> list[tuple[str, bool]]:
        """``(text, memorable)`` of checked inputs (subclasses may describe them in bulk)."""
        out = []
        for state, legal, history in items:
            hit = self.memo.entries.get(self.memo.key(state, legal, history))
            text = hit[1] if hit is not None else self.describe_one(state, legal, history)
            out.append((text, self.memorable(text)))
        return out

    def prerender(self, inputs: Iterable[AdapterInput], progress: bool = True,
                  batch_size: int = 512) -> dict[str, int]:
        """Describe and encode ``inputs`` ahead of time (distinct texts in batches of
        ``batch_size``) and fill the memo; returns ``inputs`` and ``distinct_texts`` (LLM
        adapters add their counts). ``progress`` shows a tqdm bar."""
        return prerender_checked(self, self._checked(inputs), progress, batch_size)

    def stats(self) -> dict[str, float | int]:
        """Counters: the keys of `STAT_KEYS` plus ``memo_misses`` (inputs described) and
        ``memo_size``. Memo hits are not counted (it would slow the warm path)."""
        hits, misses = self._counts["hits"], self._counts["misses"]  # a miss: a text encoded
        return {**dict.fromkeys(STAT_KEYS, 0), "encoder_calls": misses,
                "embedding_cache_hits": hits, "embedding_cache_misses": misses,
                "memo_misses": self.memo.misses, "memo_size": len(self.memo.entries)}

    def clear_memo(self) -> None:
        """Forget the memo (the embedding cache is kept) and key it by `uses_history`."""
        self.memo.configure(self._space, self.memo_capacity,
                            self.history_key if self.uses_history else None)
