"""`BaseAdapter`: the base of every state adapter, its input checks and its memo.

A cold input is checked once, in `check_input` (the public boundary); nothing after it
checks again. Vectors are shared and read-only. See docs/adapters.md.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool

from ..environments import bridged_minigrid_hint, check_legal_moves, unwrap_env
from .embedding_cache import EmbeddingCache, Memo, language_box
from .encoder import get_encoder
from .memory import Memory
from .numbers import numbered_vectors, split_numbers
from .prerender import AdapterInput, prerender_checked
from .representation import (
    Standardiser,
    check_representation,
    fit_standardiser,
    random_walk_inputs,
    sentence_mean_vectors,
    sentence_set_vectors,
    sentence_slots_vector,
    sentences_of,
)

__all__ = ["FLATTENED_SPACES", "AdapterInput", "BaseAdapter", "Memo", "STAT_KEYS", "check_state",
           "env_spaces"]

#: Keys every adapter's ``stats()`` has (0 where not applicable).
STAT_KEYS: tuple[str, ...] = (
    "llm_calls", "llm_cache_hits", "llm_failures", "llm_fallbacks", "llm_seconds",
    "llm_breaker_skips", "encoder_calls", "embedding_cache_hits", "embedding_cache_misses",
    "prompt_cuts")

Checked = tuple[np.ndarray, tuple[int, ...], Any]

#: What ``observation_space`` an adapter takes: a Box as it is, the others flattened.
FLATTENED_SPACES = ("Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")


def env_spaces(env: Any) -> tuple[spaces.Space, spaces.Box, int | None]:
    """``env``'s observation space, the Box it flattens to, and its number of discrete
    actions (or None); ValueError for a space no adapter takes."""
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


def check_state(state: Any, space: spaces.Space, shape: tuple[int, ...],
                dtype: np.dtype) -> np.ndarray:
    """``state`` as a finite contiguous array of ``shape`` and ``dtype`` (flattened when
    ``space`` is not a Box), else ValueError."""
    if not isinstance(space, spaces.Box):
        try:
            contained = space.contains(state)
        except (TypeError, ValueError, AttributeError):
            contained = False
        if not contained:
            raise ValueError(f"state {state!r} is not an observation of {space}")
        state = spaces.flatten(space, state)
    if isinstance(state, (str, bytes)) or state is None:
        raise ValueError(f"state {state!r}: expected a numeric array of shape {shape}")
    array = np.asarray(state)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"state {state!r} (type {type(state).__name__}) is not numeric; "
                         f"expected an array of shape {shape}")
    array = array.astype(dtype, copy=False)
    if array.shape != shape:
        raise ValueError(f"state {state!r} has shape {array.shape}; expected shape {shape}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"state {state!r} contains NaN or inf; expected finite values")
    return np.ascontiguousarray(array)


class BaseAdapter(BaseModel):
    """Base of every adapter, ``SomeAdapter(env, **settings)``: ``adapter(state, legal_moves,
    episode_action_history, encode=True)`` -> the float32 vector or the description. A
    subclass supplies `describe_one` and, when its text depends on the history, `history_key`.
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
    embedding: Literal["paragraph", "sentences", "sentence_mean", "sentence_set"] = Field(
        "paragraph", description="one vector of the whole description, one per sentence in "
        "fixed slots (adapters.representation), the mean of the sentences' vectors "
        "(adapters.representation), or the set of the sentences (the same module)")
    sentence_slots: int = Field(4, ge=1, le=64, description="slots of embedding: sentences")
    max_sentences: int = Field(24, ge=2, le=256,
                               description="rows of embedding: sentence_set (its padding)")
    normalise: Literal["none", "centre", "whiten"] = Field(
        "none", description="subtract the fit set's mean (centre), then also whiten (whiten)")
    fit_steps: int = Field(2000, ge=1, le=10**6,
                           description="random moves whose distinct descriptions are the fit set")
    fit_seed: int = Field(0, ge=0, description="seed of the fit set's random moves")
    with_raw: StrictBool = Field(False, description="append the raw observation to the vector")
    memory: Memory | None = Field(None, description="the last observations and actions the "
                                  "observation carries (adapters.memory); None = the current one")
    numbers: int = Field(0, ge=0, le=64, description="numbers kept beside the vector of the "
                         "number-free text, per sentence (sentences, sentence_set) or per "
                         "description (adapters.numbers); 0 = numbers stay in the text")
    memo: Memo = Field(default_factory=Memo, exclude=True, repr=False,
                       description="the memo (filled by the adapter; read it, never write it)")

    _env: Any = PrivateAttr(default=None)
    _n_actions: int | None = PrivateAttr(default=None)
    _action_space: spaces.Space | None = PrivateAttr(default=None)
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
        self._action_space = getattr(given, "action_space", None)
        self.clear_memo()

    # ---- what a subclass supplies (then calls ``clear_memo()`` once its parts are ready) --
    def describe_one(self, state: np.ndarray, legal_moves: tuple[int, ...],
                     history: Sequence[Any]) -> str:
        """The description of one checked input (trusted: nothing is checked again)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement describe_one()")

    @property
    def uses_history(self) -> bool:
        """Whether the description depends on the history (then `history_key` is used)."""
        return False

    def history_key(self, history: Any) -> Hashable:
        """The part of the history the description depends on (ValueError when bad)."""
        return ()

    def memorable(self, text: str) -> bool:
        """Whether a description may be remembered (an LLM adapter's fallbacks may not)."""
        return True

    # ---- the environment and the checks (the public boundary) --------------------------
    @property
    def env(self) -> Any:
        """The environment (unwrapped)."""
        return self._env

    @property
    def n_actions(self) -> int | None:
        return self._n_actions

    @property
    def action_space(self) -> Any:
        """The environment's action space (what ``memory`` remembers of an action)."""
        return self._action_space

    @property
    def state_shape(self) -> tuple[int, ...]:
        return self.memo.shape

    @property
    def state_dtype(self) -> np.dtype:
        return self.memo.dtype

    def env_observation(self, state: np.ndarray) -> Any:
        """The environment's own observation of a checked state (unflattened if not a Box)."""
        if isinstance(self._env_space, spaces.Box) or not (
                isinstance(state, np.ndarray) and state.shape == self._space.shape):
            return state
        return spaces.unflatten(self._env_space, state)

    def check_state(self, state: Any) -> np.ndarray:
        """``state`` checked (see `check_state`), else ValueError."""
        return check_state(state, self._env_space, self.memo.shape, self.memo.dtype)

    def check_input(self, item: Any) -> Checked:
        """A ``(state, legal_moves, history)`` item, checked once (ValueError when bad)."""
        if not isinstance(item, (tuple, list)) or not 1 <= len(item) <= 3:
            raise ValueError(
                f"input {item!r}: expected a (state, legal_moves, episode_action_history) tuple")
        state, legal, history = (*item, (), ())[:3]
        checked = (self.check_state(state), check_legal_moves(legal, self._n_actions), history)
        if self.uses_history:
            self.check_history(history)
        return checked

    def check_history(self, history: Any) -> None:
        """ValueError for a history the description cannot use (`history_key` raises it)."""
        self.history_key(history)

    def _checked(self, inputs: Any) -> list[Checked]:
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
            raise ValueError(f"inputs={inputs!r}: expected an iterable of (state, legal_moves, "
                             "episode_action_history) tuples, e.g. reachable_inputs(env)")
        return [self.check_input(item) for item in inputs]

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
        """``(vector, text)`` of one input: the memo's, else checked once, described, embedded."""
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

    def adapt_many(self, inputs: Iterable[AdapterInput]) -> list[tuple[np.ndarray, str]]:
        """`adapt` of each input; the cold ones described together, encoded in one batch."""
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
        """Describe and encode ``inputs`` ahead of time and fill the memo (docs/adapters.md);
        counts ``inputs`` and ``distinct_texts``."""
        return prerender_checked(self, self._checked(inputs), progress, batch_size)

    def stats(self) -> dict[str, float | int]:
        """`STAT_KEYS` plus ``memo_misses`` and ``memo_size`` (memo hits are not counted: it
        would slow the warm path)."""
        hits, misses = self._counts["hits"], self._counts["misses"]  # a miss: a text encoded
        return {**dict.fromkeys(STAT_KEYS, 0), "encoder_calls": misses,
                "embedding_cache_hits": hits, "embedding_cache_misses": misses,
                "memo_misses": self.memo.misses, "memo_size": len(self.memo.entries)}

    def clear_memo(self) -> None:
        """Forget the memo (the embedding cache is kept) and key it by `uses_history`."""
        self.memo.configure(self._space, self.memo_capacity,
                            self.history_key if self.uses_history else None)

    # ---- the representation: text -> vector (docs/adapters.md) --------------------------
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
        """Box of float32: what an agent sees (`frame_space`, with ``memory`` its frames and
        actions)."""
        if self._observation_space is None:
            self._observation_space = self.observation_space_with(self.embedding_cache.encoder)
        return self._observation_space

    def observation_space_with(self, encoder: Any) -> spaces.Box:
        """`observation_space` as ``encoder`` (its ``dimension`` and ``normalized``) makes it
        (an experiment's check passes a stand-in for a model it does not load)."""
        return self.with_memory(self.frame_space_with(encoder))

    def with_memory(self, frame: spaces.Box) -> spaces.Box:
        """``frame``, or with ``memory`` the Box of its frames and the last actions."""
        return frame if self.memory is None else self.memory.space(frame, self._action_space)

    @property
    def frame_space(self) -> spaces.Box:
        """Box of one `adapt` vector: the language vector, with ``with_raw`` the raw bounds."""
        return self.frame_space_with(self.embedding_cache.encoder)

    def frame_space_with(self, encoder: Any) -> spaces.Box:
        slots = self.sentence_slots if self.embedding == "sentences" else 1
        rows = self.max_sentences if self.embedding == "sentence_set" else None
        return language_box(encoder, slots, self.normalise,
                            self._space if self.with_raw else None, rows, self.numbers)

    @property
    def standardiser(self) -> Standardiser:
        """The centring/whitening, fitted on first use on the fit set, then fixed."""
        if self._standardiser is None:
            if self.normalise == "none":
                raise ValueError("normalise is none: this adapter has no standardiser")
            walk = random_walk_inputs(copy.deepcopy(self._env), self.fit_steps, self.fit_seed,
                                      list(range(self._n_actions or 0)), self.check_input)
            texts = list(dict.fromkeys(text for text, _ in self.describe_checked(walk, False)))
            self._standardiser = fit_standardiser(np.stack(self._embedded(texts)),
                                                  whiten=self.normalise == "whiten")
        return self._standardiser

    def use_standardiser(self, mean: np.ndarray | None, matrix: np.ndarray | None,
                         source: Any) -> None:
        """Use a saved fitted normaliser (a kept policy's, read from ``source``) instead of
        fitting one; ValueError naming ``source`` and the tensor unless it is what this
        adapter's ``normalise`` and vector width take: a mean, a whitening matrix only with
        ``whiten``, finite values of at most 1e15 in size."""
        prefix = f"{source}: the adapter's normaliser"
        if self.normalise == "none" or mean is None:
            if mean is None and matrix is None and self.normalise == "none":
                return
            raise ValueError(f"{prefix}: the file {'holds one' if mean is not None else 'has none'}"
                             f" (observation.mean), but the adapter has normalise: "
                             f"{self.normalise}")
        slots = self.sentence_slots if self.embedding == "sentences" else 1
        width = self.unit_dimension * slots
        wants = {"observation.mean": (mean, (width,)),
                 "observation.matrix": (matrix, (width, width) if self.normalise == "whiten"
                                        else None)}
        for name, (value, shape) in wants.items():
            got = None if value is None else tuple(value.shape)
            if got != shape:
                raise ValueError(f"{prefix}: tensor {name!r} has shape {got}; expected {shape} "
                                 f"(normalise: {self.normalise}, vectors of {width})")
            if value is not None and not (value.dtype.kind == "f"
                                          and np.abs(value).max(initial=0) <= 1e15):
                raise ValueError(f"{prefix}: tensor {name!r} holds {value.dtype} values beyond "
                                 "1e15 in size or not floats; expected a fitted normaliser's")
        self._standardiser = Standardiser(mean, matrix)

    def text_vectors(self, texts: list[str]) -> list[np.ndarray]:
        """The read-only language vectors of ``texts`` as the representation settings make them."""
        vectors = self._embedded(texts)
        if self.normalise != "none":
            standardise = self.standardiser
            vectors = [standardise(vector) for vector in vectors]
            for vector in vectors:
                vector.flags.writeable = False
        return vectors

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
        """The vectors of ``texts`` before centring, as ``embedding`` and ``numbers`` make them."""
        width, source = self.numbers, self.text_source()
        if width and self.embedding in ("paragraph", "sentence_mean"):  # per description
            split = [split_numbers(text) for text in texts]
            for text, (_, values) in zip(texts, split, strict=True):
                if len(values) > width:
                    raise ValueError(f"numbers: {width} keeps {width} numbers per description; "
                                     f"the describer {source} wrote {len(values)} in "
                                     f"{text[:120]!r}: raise numbers")
            vectors = self._unit_vectors([template for template, _ in split], self.lookup)
            out = []
            for vector, (_, values) in zip(vectors, split, strict=True):
                numbers = np.zeros(width, dtype=np.float32)
                numbers[: len(values)] = values
                out.append(np.concatenate([vector, numbers]))
                out[-1].flags.writeable = False
            return out
        lookup = self.lookup
        if width:  # per sentence
            def lookup(units: list[str]) -> list[np.ndarray]:
                return numbered_vectors(units, self.lookup, width, source)
        return self._unit_vectors(texts, lookup)

    def _unit_vectors(self, texts: list[str], lookup: Any) -> list[np.ndarray]:
        """``embedding``'s vectors of ``texts``, each text or sentence through ``lookup``."""
        if self.embedding == "paragraph":
            return lookup(texts)
        source = self.text_source()
        if self.embedding == "sentence_mean":
            return sentence_mean_vectors(texts, lookup, source)
        dimension = self.unit_dimension
        if self.embedding == "sentence_set":
            return sentence_set_vectors(texts, lookup, self.max_sentences, dimension, source)
        sentences = [sentences_of(text, "sentences", source) for text in texts]
        distinct = list(dict.fromkeys(s for parts in sentences for s in parts))
        found = dict(zip(distinct, lookup(distinct), strict=True))
        vectors = [sentence_slots_vector([found[s] for s in parts], self.sentence_slots,
                                         dimension) for parts in sentences]
        for vector in vectors:
            vector.flags.writeable = False
        return vectors

    @property
    def unit_dimension(self) -> int:
        """Values of one unit's vector (a slot, a set row, a paragraph or a mean): the
        encoder's, plus the kept ``numbers``."""
        return self.embedding_cache.encoder.dimension + self.numbers

    def text_source(self) -> str:
        """What writes the descriptions, for error messages."""
        return f"of the {self.kind} adapter"

    def lookup(self, texts: list[str]) -> list[np.ndarray]:
        """Vectors of ``texts`` (shared, read-only): the store, else the encoder."""
        cache = self.embedding_cache
        hits, misses = cache.hits, cache.misses
        vectors = cache.lookup_many(texts)
        self._counts["hits"] += cache.hits - hits
        self._counts["misses"] += cache.misses - misses
        return vectors
