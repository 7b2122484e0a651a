"""`BaseAdapter`: the one base of every state adapter (settings, checks, memo, caches).

An adapter turns ``(state, legal_moves, episode_action_history)`` into a description and
a vector. `BaseAdapter` is a pydantic model (its fields are the settings, validated on
construction and then fixed) that does everything except the description itself; a
subclass supplies

- `describe_one(state, legal_moves, history) -> str` for one checked input, and
- `history_key(history) -> Hashable` with ``uses_history`` true when the description
  depends on the history (the part it depends on becomes part of the memo key).

The memo maps ``(state bytes, legal moves[, history key])`` to ``(vector, text)``, so a
repeated input costs one dict look-up: no formatting, no hashing of text, no encoder. When
the text ignores the history a second index maps the state bytes alone to the legal moves
and the pair of the last input with that state, and the warm path is a dict hit and a list
compare (with every move an ``int``, so ``[2.0]`` or ``[True]`` take the checked path
like the first call did). Returned vectors are **shared and read-only**. The memo is
bounded by ``memo_capacity`` (oldest entries dropped first).

Vectors come from an `EmbeddingCache` in front of the process-wide MiniLM encoder.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool

from ..environments import bridged_minigrid_hint, check_legal_moves, unwrap_env
from .embedding_cache import EmbeddingCache
from .encoder import get_encoder
from .representation import (
    Standardiser,
    check_representation,
    fit_standardiser,
    random_walk_inputs,
    sentence_slots_vector,
    split_sentences,
)

__all__ = ["FLATTENED_SPACES", "AdapterInput", "BaseAdapter", "Memo", "STAT_KEYS", "env_spaces"]

#: Keys every adapter's ``stats()`` has (0 where not applicable).
STAT_KEYS: tuple[str, ...] = (
    "llm_calls", "llm_cache_hits", "llm_failures", "llm_fallbacks", "llm_seconds",
    "llm_breaker_skips", "encoder_calls", "embedding_cache_hits", "embedding_cache_misses",
    "prompt_cuts",
)

#: One adapter input: (state, legal_moves, episode_action_history).
AdapterInput = tuple[Any, Sequence[int], Sequence[Any]]


#: What ``observation_space`` an adapter takes: a Box as it is, the others flattened.
FLATTENED_SPACES = ("Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")


def env_spaces(env: Any) -> tuple[spaces.Space, spaces.Box, int | None]:
    """The environment's observation space (a wrapper's, when ``env`` is wrapped), the Box
    its observations flatten to (itself when it is one; gymnasium's ``flatten_space``
    otherwise) and the number of discrete actions (or None)."""
    space = getattr(env, "observation_space", None)
    flat = space if isinstance(space, spaces.Box) else None
    if isinstance(space, spaces.Space) and type(space).__name__ in FLATTENED_SPACES:
        try:
            flat = spaces.flatten_space(space)
        except NotImplementedError:  # a part (e.g. MiniGrid's mission text) does not flatten
            flat = None
    if not isinstance(flat, spaces.Box):
        name = type(getattr(env, "unwrapped", env)).__name__
        raise ValueError(
            f"environment {name} has observation_space {space!r}, which no adapter (raw, "
            f"language, llm) takes; expected a Box or one of {', '.join(FLATTENED_SPACES)} "
            "of them (wrap the environment in a gymnasium ObservationWrapper that gives one)"
            + bridged_minigrid_hint(env))
    action_space = getattr(env, "action_space", None)
    return space, flat, int(action_space.n) if isinstance(action_space, spaces.Discrete) \
        else None


class Memo:
    """The adapter's memo: checked input -> ``(vector, text)``, bounded, with a warm index.

    ``entries``: key -> pair (key = state bytes + legal moves as bytes, with the history key
    when the text depends on it); ``by_state``: state bytes -> (legal moves, pair) of the
    last remembered input with that state (only when the text ignores the history).
    """

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


class BaseAdapter(BaseModel):
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
        None, description="SQLite file of the persistent embedding cache; None = memory only")
    embedding_cache_capacity: int = Field(20_000, ge=1, le=10**8,
                                          description="vectors kept in memory")
    memo_capacity: int = Field(100_000, ge=0, le=10**8, description="inputs remembered")
    embedding: Literal["paragraph", "sentences"] = Field(
        "paragraph", description="one vector of the whole description, or one per sentence in "
        "fixed slots (adapters.representation)")
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
    _shared_cache: EmbeddingCache | None = PrivateAttr(default=None)
    _shared_encoder: Any = PrivateAttr(default=None)
    _counts: dict[str, int] = PrivateAttr(default_factory=lambda: {"hits": 0, "misses": 0})
    _observation_space: spaces.Box | None = PrivateAttr(default=None)
    _standardiser: Standardiser | None = PrivateAttr(default=None)

    def __init__(self, env: Any = None, /, *, embedding_cache: EmbeddingCache | None = None,
                 **settings: Any) -> None:
        encoder = settings.get("encoder")
        if encoder is not None and not isinstance(encoder, (str, os.PathLike)):
            if not callable(getattr(encoder, "encode_many", None)):
                raise ValueError(f"encoder={encoder!r}: expected a model name, a path or an "
                                 "encoder object with encode_many()")
            settings["encoder"] = str(encoder.name)
        elif isinstance(encoder, os.PathLike):
            settings["encoder"] = os.fspath(encoder)
        check_representation(settings, self.kind)
        super().__init__(**settings)
        if embedding_cache is not None:
            if not isinstance(embedding_cache, EmbeddingCache):
                raise ValueError(f"embedding_cache={embedding_cache!r}: expected an EmbeddingCache")
            if self.embedding_cache_path is not None:
                raise ValueError("pass embedding_cache= or embedding_cache_path=, not both")
            if encoder is not None and embedding_cache.encoder.name != self.encoder:
                raise ValueError("embedding_cache= was built for another encoder than encoder=")
        self._shared_cache = embedding_cache
        self._shared_encoder = None if isinstance(encoder, (str, os.PathLike)) else encoder
        if env is None:
            raise ValueError(f"{type(self).__name__} needs an environment: "
                             f"{type(self).__name__}(env, ...) with an instance or a gymnasium id")
        given = unwrap_env(env) if isinstance(env, str) else env
        self._env = unwrap_env(given)
        self._env_space, self._space, self._n_actions = env_spaces(given)
        self.clear_memo()

    # ---- what a subclass supplies (a subclass that sets up its own parts after
    # ---- ``super().__init__`` calls ``clear_memo()`` once they are ready) ---------------
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

    # ---- environment, spaces, caches ---------------------------------------------------
    @property
    def env(self) -> Any:
        """The environment (unwrapped)."""
        return self._env

    @property
    def n_actions(self) -> int | None:
        return self._n_actions

    @property
    def state_shape(self) -> tuple[int, ...]:
        return self.memo.shape

    @property
    def state_dtype(self) -> np.dtype:
        return self.memo.dtype

    @property
    def embedding_cache(self) -> EmbeddingCache:
        """The embedding cache (created on first use, with the shared encoder)."""
        if self._cache is None:
            cache = self._shared_cache
            if cache is None:
                encoder = self._shared_encoder or get_encoder(self.encoder)
                cache = EmbeddingCache(encoder, path=self.embedding_cache_path,
                                       capacity=self.embedding_cache_capacity)
            self._cache = cache
        return self._cache

    @property
    def observation_space(self) -> spaces.Box:
        """Box of float32: the language vector (the encoder's dimension, times
        ``sentence_slots`` for ``embedding: sentences``; bounds [-1, 1] when the encoder's
        vectors are L2-normalised (MiniLM) and ``normalise`` is none, else unbounded), then
        with ``with_raw`` the raw observation's bounds."""
        if self._observation_space is None:
            encoder = self.embedding_cache.encoder
            normalized = getattr(encoder, "normalized", False) and self.normalise == "none"
            bound = 1.0 if normalized else np.inf
            size = encoder.dimension * (self.sentence_slots if self.embedding == "sentences"
                                        else 1)
            low, high = np.full(size, -bound), np.full(size, bound)
            if self.with_raw:
                low = np.concatenate([low, self._space.low.ravel()])
                high = np.concatenate([high, self._space.high.ravel()])
            self._observation_space = spaces.Box(low=low.astype(np.float32),
                                                 high=high.astype(np.float32), dtype=np.float32)
        return self._observation_space

    def env_observation(self, state: Any) -> Any:
        """The environment's own observation of a checked state: the state itself for a
        Box space, else gymnasium's ``unflatten`` of it (an int for Discrete, a dict for
        Dict); what describers receive."""
        space = self._env_space
        if isinstance(space, spaces.Box) or not (
                isinstance(state, np.ndarray) and state.shape == self._space.shape):
            return state
        return spaces.unflatten(space, state)

    # ---- checks ------------------------------------------------------------------------
    def check_state(self, state: Any) -> np.ndarray:
        """``state`` as a finite array of the env's shape and dtype (flattened by gymnasium
        when the env's space is not a Box), else ValueError."""
        space = self._env_space
        if not isinstance(space, spaces.Box):
            try:
                contained = space.contains(state)
            except (TypeError, ValueError, AttributeError):
                contained = False
            if not contained:
                raise ValueError(f"state {state!r} is not an observation of {space}")
            state = spaces.flatten(space, state)
        shape = self.memo.shape
        if isinstance(state, (str, bytes)) or state is None:
            raise ValueError(f"state {state!r}: expected a numeric array of shape {shape}")
        array = np.asarray(state)
        if array.dtype.kind not in "biuf":
            raise ValueError(f"state {state!r} (type {type(state).__name__}) is not numeric; "
                             f"expected an array of shape {shape}")
        array = array.astype(self.memo.dtype, copy=False)
        if array.shape != shape:
            raise ValueError(f"state {state!r} has shape {array.shape}; expected shape {shape}")
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"state {state!r} contains NaN or inf; expected finite values")
        return np.ascontiguousarray(array)

    def check_input(self, item: Any) -> tuple[np.ndarray, tuple[int, ...], Any]:
        """A ``(state, legal_moves, history)`` item, checked (ValueError when bad)."""
        if not isinstance(item, (tuple, list)) or not 1 <= len(item) <= 3:
            raise ValueError(
                f"input {item!r}: expected a (state, legal_moves, episode_action_history) tuple")
        state, legal, history = (*item, (), ())[:3]
        checked = (self.check_state(state), check_legal_moves(legal, self._n_actions), history)
        if self.uses_history:
            self.history_key(history)  # a bad history item is a ValueError here
        return checked

    # ---- the call shape ----------------------------------------------------------------
    def __call__(self, state: Any, legal_moves: Iterable[int] = (),
                 episode_action_history: Sequence[Any] = (), encode: bool = True
                 ) -> np.ndarray | str:
        """The vector (``encode=True``, shared read-only float32) or the description."""
        if not encode:
            return self.describe(state, legal_moves, episode_action_history)
        return self.adapt(state, legal_moves, episode_action_history)[0]

    def adapt(self, state: Any, legal_moves: Iterable[int] = (),
              episode_action_history: Sequence[Any] = ()) -> tuple[np.ndarray, str]:
        """``(vector, text)`` of one input, from the memo when it was seen before."""
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
        text = self.describe_one(state, legal, history)
        pair = (self.observation_of(self.text_vectors([text])[0], state), text)
        if self.memorable(text):
            memo.put(key, pair)
        return pair

    def describe(self, state: Any, legal_moves: Iterable[int] = (),
                 episode_action_history: Sequence[Any] = ()) -> str:
        """The description of one input (the remembered one when it was seen before)."""
        state, legal, history = self.check_input((state, legal_moves, episode_action_history))
        hit = self.memo.entries.get(self.memo.key(state, legal, history))
        return hit[1] if hit is not None else self.describe_one(state, legal, history)

    # ---- batches -----------------------------------------------------------------------
    def describe_many(self, items: Iterable[AdapterInput], progress: bool = False) -> list[str]:
        """Descriptions of ``(state, legal_moves, history)`` items, in order."""
        return [text for text, _ in self.describe_checked(self._checked(items), progress)]

    def describe_checked(self, items: list[tuple[np.ndarray, tuple[int, ...], Any]],
                         progress: bool) -> list[tuple[str, bool]]:
        """``(text, memorable)`` of checked inputs (subclasses may describe them in bulk)."""
        out = []
        for state, legal, history in items:
            hit = self.memo.entries.get(self.memo.key(state, legal, history))
            text = hit[1] if hit is not None else self.describe_one(state, legal, history)
            out.append((text, self.memorable(text)))
        return out

    def _checked(self, inputs: Any) -> list[tuple[np.ndarray, tuple[int, ...], Any]]:
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
            raise ValueError(f"inputs={inputs!r}: expected an iterable of (state, legal_moves, "
                             "episode_action_history) tuples, e.g. reachable_inputs(env)")
        return [self.check_input(item) for item in inputs]

    def lookup(self, texts: list[str]) -> list[np.ndarray]:
        """Vectors of ``texts`` (shared, read-only) through the embedding cache."""
        cache = self.embedding_cache
        hits, misses = cache.hits, cache.misses
        vectors = cache.lookup_many(texts)
        self._counts["hits"] += cache.hits - hits
        self._counts["misses"] += cache.misses - misses
        return vectors

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

    def _embedded(self, texts: list[str]) -> list[np.ndarray]:
        """The vectors of ``texts`` before centring: one per text (``paragraph``) or the
        sentences' vectors in fixed slots (``sentences``)."""
        if self.embedding == "paragraph":
            return self.lookup(texts)
        sentences = [split_sentences(text) for text in texts]
        distinct = list(dict.fromkeys(s for parts in sentences for s in parts))
        found = dict(zip(distinct, self.lookup(distinct), strict=True))
        dimension = self.embedding_cache.encoder.dimension
        vectors = [sentence_slots_vector([found[s] for s in parts], self.sentence_slots,
                                         dimension) for parts in sentences]
        for vector in vectors:
            vector.flags.writeable = False
        return vectors

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

    def observation_of(self, language_vector: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The observation: the language vector, with ``with_raw`` the raw state after it."""
        if not self.with_raw:
            return language_vector
        vector = np.concatenate([language_vector, state.astype(np.float32).ravel()])
        vector.flags.writeable = False
        return vector

    def encode_many(self, texts: Iterable[str]) -> np.ndarray:
        """Vectors of ``texts`` as a new float32 array ``(n, dimension)`` (cached)."""
        if isinstance(texts, str):
            raise ValueError(f"texts={texts!r} is a single str; expected a list of str "
                             "(wrap it: [text])")
        vectors = self.lookup(list(texts))
        if not vectors:
            return np.empty((0, self.embedding_cache.encoder.dimension), dtype=np.float32)
        return np.stack(vectors)

    def prerender(self, inputs: Iterable[AdapterInput], progress: bool = True,
                  batch_size: int = 512) -> dict[str, int]:
        """Describe and encode ``inputs`` ahead of time and fill the memo.

        Texts are encoded in batches of ``batch_size`` (only those no cache knows), so later
        calls on these inputs are memo look-ups. Returns ``inputs`` and ``distinct_texts``
        (LLM adapters add their counts). ``progress`` shows a tqdm bar.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: expected a positive int")
        items = self._checked(inputs)
        if len(items) > self.memo_capacity:
            raise ValueError(f"prerender of {len(items)} inputs exceeds memo_capacity="
                             f"{self.memo_capacity}; expected at most memo_capacity inputs "
                             "(raise it)")
        described = self.describe_checked(items, progress)
        texts = list(dict.fromkeys(text for text, _ in described))
        vectors: dict[str, np.ndarray] = {}
        batches = range(0, len(texts), batch_size)
        if progress and len(texts) > batch_size:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc=f"prerender {self.kind}", unit="batch")
        for start in batches:
            chunk = texts[start : start + batch_size]
            vectors.update(zip(chunk, self.text_vectors(chunk), strict=True))
        memo = self.memo
        for (state, legal, history), (text, keep) in zip(items, described, strict=True):
            if keep:
                memo.put(memo.key(state, legal, history),
                         (self.observation_of(vectors[text], state), text))
        return {"inputs": len(items), "distinct_texts": len(texts)}

    # ---- bookkeeping -------------------------------------------------------------------
    def stats(self) -> dict[str, float | int]:
        """Counters: the keys of `STAT_KEYS` plus ``memo_misses`` (inputs described) and
        ``memo_size``. Memo hits are not counted (it would slow the warm path)."""
        out: dict[str, float | int] = dict.fromkeys(STAT_KEYS, 0)
        out["encoder_calls"] = self._counts["misses"]  # every cache miss is one encoded text
        out["embedding_cache_hits"] = self._counts["hits"]
        out["embedding_cache_misses"] = self._counts["misses"]
        out["memo_misses"] = self.memo.misses
        out["memo_size"] = len(self.memo.entries)
        return out

    def clear_memo(self) -> None:
        """Forget the memo (the embedding cache is kept) and key it by `uses_history`."""
        self.memo.configure(self._space, self.memo_capacity,
                            self.history_key if self.uses_history else None)
