"""The shared machinery of text adapters: call shape, observation memo, stats, batches.

A text adapter turns ``(state, legal_moves, episode_action_history)`` into a sentence
and the sentence into a vector. :class:`BaseAdapter` does everything except the
sentence itself; a subclass supplies

- :meth:`BaseAdapter.describe_one` - how to describe one (checked) input, and
- ``history_key`` (constructor argument) - what part of the history the description
  depends on, as a hashable value (``None`` = the history does not matter), which
  becomes part of the memo key.

The memo maps ``(state bytes, legal moves, history key)`` straight to
``(vector, text)``, so a repeated input costs one dict look-up: no string formatting,
no hashing of text, no encoder. When the text ignores the history, a second index,
:attr:`BaseAdapter.state_memo`, maps the state bytes alone to ``(legal moves, (vector,
text))`` of the last memorised input with that state: the warm path looks the state up
there and compares the legal moves (a list compare) instead of building the full key,
and falls back to the full key whenever they differ. Vectors it returns are **shared and read-only**
(``vector.flags.writeable is False``); copy one before changing it. The memo is
bounded (``memo_capacity`` entries; the oldest entries are dropped first).

Vectors come from an :class:`~adapters.embedding_cache.EmbeddingCache` in front of the
process-wide :class:`~adapters.encoder.MiniLMEncoder`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from gymnasium import spaces

from langadapt.adapters.describers import check_legal_moves
from langadapt.adapters.embedding_cache import EmbeddingCache
from langadapt.adapters.encoder import MiniLMEncoder, get_encoder

__all__ = ["Adapter", "BaseAdapter", "STAT_KEYS", "AdapterInput", "env_spaces"]

#: Keys every adapter's ``stats()`` has (0 where not applicable).
STAT_KEYS: tuple[str, ...] = (
    "llm_calls",
    "llm_cache_hits",
    "llm_failures",
    "llm_fallbacks",
    "llm_seconds",
    "encoder_calls",
    "embedding_cache_hits",
    "embedding_cache_misses",
    "prompt_cuts",
)

#: One adapter input: (state, legal_moves, episode_action_history).
AdapterInput = tuple[Any, Sequence[int], Sequence[Any]]


@runtime_checkable
class Adapter(Protocol):
    """What every adapter offers (``RawAdapter``, ``LanguageAdapter``, the LLM adapters)."""

    observation_space: spaces.Box

    def __call__(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
        encode: bool = True,
    ) -> np.ndarray | str: ...

    def adapt(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
    ) -> tuple[np.ndarray, str]: ...

    def describe(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
    ) -> str: ...

    def stats(self) -> dict[str, float | int]: ...


def env_spaces(env: Any) -> tuple[spaces.Box, int | None]:
    """The environment's observation Box and its number of discrete actions (or None)."""
    base = getattr(env, "unwrapped", env)
    space = getattr(base, "observation_space", None)
    if not isinstance(space, spaces.Box):
        raise ValueError(
            f"environment {type(base).__name__} has observation_space {space!r}; expected a "
            "gymnasium Box"
        )
    action_space = getattr(base, "action_space", None)
    n = int(action_space.n) if isinstance(action_space, spaces.Discrete) else None
    return space, n


class BaseAdapter:
    """Base of text adapters: state -> text (subclass) -> vector (encoder + caches).

    ``state_space``: the environment's observation Box (states are checked against its
    shape and converted to its dtype). ``n_actions``: number of discrete actions, to
    check legal moves (``None`` = unchecked). ``encoder``: an encoder instance, else the
    shared one for ``encoder_name`` (``None`` = packaged MiniLM). ``cache``: an
    :class:`EmbeddingCache`, else a new one with ``cache_path`` (SQLite file, or ``None``
    for memory only) and ``cache_capacity``. ``memo_capacity``: most memo entries.
    ``history_key``: function of the episode history whose (hashable) result the text
    depends on; ``None`` when the text ignores the history.
    """

    #: Registry name of the adapter kind (set by subclasses).
    kind: str = "base"

    def __init__(
        self,
        state_space: spaces.Box,
        n_actions: int | None = None,
        *,
        encoder: MiniLMEncoder | None = None,
        encoder_name: str | None = None,
        cache: EmbeddingCache | None = None,
        cache_path: str | os.PathLike[str] | None = None,
        cache_capacity: int = 20_000,
        memo_capacity: int = 100_000,
        history_key: Callable[[Sequence[Any]], Hashable] | None = None,
    ) -> None:
        if not isinstance(state_space, spaces.Box):
            raise ValueError(f"state_space={state_space!r}: expected a gymnasium Box")
        if (
            isinstance(memo_capacity, bool)
            or not isinstance(memo_capacity, int)
            or memo_capacity < 0
        ):
            raise ValueError(f"memo_capacity={memo_capacity!r}: expected an int >= 0")
        if encoder is not None and encoder_name is not None:
            raise ValueError("pass encoder= or encoder_name=, not both")
        if cache is not None and encoder is not None and cache.encoder is not encoder:
            raise ValueError("cache= was built for another encoder than encoder=")
        if cache is not None and encoder_name is not None:
            raise ValueError("pass cache= or encoder_name=, not both (the cache has its encoder)")
        if cache is not None and cache_path is not None:
            raise ValueError("pass cache= or cache_path=, not both")
        self.state_shape: tuple[int, ...] = tuple(state_space.shape)
        self.state_dtype = np.dtype(state_space.dtype)
        self.n_actions = n_actions
        if cache is None:
            encoder = encoder if encoder is not None else get_encoder(encoder_name)
            cache = EmbeddingCache(encoder, path=cache_path, capacity=cache_capacity)
        self.cache = cache
        self.encoder = cache.encoder
        self.memo_capacity = memo_capacity
        self._history_key = history_key
        self._memo: dict[Hashable, tuple[np.ndarray, str]] = {}
        # state bytes -> (legal moves as a list, (vector, text)); subset of the memo,
        # only used when the text ignores the history (see state_memo).
        self._state_memo: dict[bytes, tuple[list[int], tuple[np.ndarray, str]]] = {}
        self._state_nbytes = self.state_dtype.itemsize * int(np.prod(self.state_shape))
        self._memo_misses = 0
        self._cache_hits = 0
        self._cache_misses = 0
        self._observation_space: spaces.Box | None = None

    # ------------------------------------------------------------ subclass hooks
    def describe_one(
        self, state: np.ndarray, legal_moves: tuple[int, ...], history: Sequence[Any]
    ) -> str:
        """The description of one checked input (``state`` already of the right shape,
        dtype and finite; ``legal_moves`` a tuple of ints). Subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement describe_one()")

    # ------------------------------------------------------------ spaces
    @property
    def observation_space(self) -> spaces.Box:
        """Box of shape ``(encoder.dimension,)``, float32; bounds [-1, 1] when the
        encoder's vectors are L2-normalised (``encoder.normalized``, true for MiniLM),
        else unbounded."""
        if self._observation_space is None:
            dim = self.encoder.dimension
            bound = 1.0 if getattr(self.encoder, "normalized", False) else np.inf
            self._observation_space = spaces.Box(
                low=-bound, high=bound, shape=(dim,), dtype=np.float32
            )
        return self._observation_space

    # ------------------------------------------------------------ checks
    def check_state(self, state: Any) -> np.ndarray:
        """``state`` as a finite array of the env's shape and dtype, else ValueError."""
        if isinstance(state, (str, bytes)) or state is None:
            raise ValueError(
                f"state {state!r}: expected a numeric array of shape {self.state_shape}"
            )
        try:
            array = np.asarray(state)
            if array.dtype.kind not in "biuf":
                raise TypeError
            array = array.astype(self.state_dtype, copy=False)
        except (TypeError, ValueError):
            raise ValueError(
                f"state {state!r} (type {type(state).__name__}) is not numeric; expected an "
                f"array of shape {self.state_shape}"
            ) from None
        if array.shape != self.state_shape:
            raise ValueError(
                f"state {state!r} has shape {array.shape}; expected shape {self.state_shape}"
            )
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"state {state!r} contains NaN or inf; expected finite values")
        return np.ascontiguousarray(array)

    def _key(self, state: np.ndarray, legal: tuple[int, ...], history: Any) -> Hashable:
        """The memo key of a checked input: state bytes + legal moves as bytes (one byte
        per move when all moves are below 256, else a tuple), plus the history key."""
        if all(0 <= move < 256 for move in legal):
            base: Hashable = state.tobytes() + bytes(legal)
        else:
            base = (state.tobytes(), legal)
        hk = self._history_key
        return base if hk is None else (base, hk(history))

    # ------------------------------------------------------------ the call shape
    def __call__(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
        encode: bool = True,
    ) -> np.ndarray | str:
        """The vector (``encode=True``, shared read-only float32) or the description."""
        pair = self.adapt(state, legal_moves, episode_action_history)
        return pair[0] if encode else pair[1]

    def adapt(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
    ) -> tuple[np.ndarray, str]:
        """``(vector, text)`` of one input, from the memo when it was seen before."""
        # Fast path: an array of the env's dtype and shape that was seen before. Anything
        # else (lists, other dtypes, odd legal moves) takes the checked slow path.
        try:
            if state.dtype is self.state_dtype and state.shape == self.state_shape:
                hk = self._history_key
                if hk is None and type(legal_moves) is list:  # state index + list compare
                    entry = self._state_memo.get(state.tobytes())
                    if entry is not None and entry[0] == legal_moves:
                        return entry[1]
                if type(legal_moves) is list or type(legal_moves) is tuple:
                    # only lists/tuples: bytes() of an int, bytes or a set is no memo key
                    moves = bytes(legal_moves)
                    if hk is None:
                        hit = self._memo.get(state.tobytes() + moves)
                    else:
                        hit = self._memo.get((state.tobytes() + moves, hk(episode_action_history)))
                    if hit is not None:
                        return hit
        except (AttributeError, TypeError, ValueError):
            pass
        return self._adapt_slow(state, legal_moves, episode_action_history)

    def _adapt_slow(
        self, state: Any, legal_moves: Iterable[int], history: Sequence[Any]
    ) -> tuple[np.ndarray, str]:
        checked = self.check_state(state)
        legal = check_legal_moves(legal_moves, self.n_actions)
        key = self._key(checked, legal, history)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        self._memo_misses += 1
        text = self.describe_one(checked, legal, history)
        vector = self._lookup([text])[0]
        pair = (vector, text)
        self._memorise(key, pair)
        return pair

    def _memorise(self, key: Hashable, pair: tuple[np.ndarray, str]) -> None:
        if self.memo_capacity == 0:
            return
        memo = self._memo
        if key not in memo and len(memo) >= self.memo_capacity:
            oldest = next(iter(memo))
            del memo[oldest]
            self._forget_state(oldest)
        memo[key] = pair
        if self._history_key is None:
            split = self._split_key(key)
            if split is not None:
                self._state_memo[split[0]] = (list(split[1]), pair)

    def _split_key(self, key: Hashable) -> tuple[bytes, tuple[int, ...]] | None:
        """``(state bytes, legal moves)`` of a memo key made by :meth:`_key` without a
        history key (``None`` for any other key)."""
        if type(key) is bytes and len(key) >= self._state_nbytes:
            n = self._state_nbytes
            return key[:n], tuple(key[n:])
        if (
            type(key) is tuple
            and len(key) == 2
            and type(key[0]) is bytes
            and type(key[1]) is tuple
        ):
            return key[0], key[1]
        return None

    def _forget_state(self, key: Hashable) -> None:
        """Drop the state-bytes entry of an evicted memo key (if it is that key's)."""
        if self._history_key is None:
            split = self._split_key(key)
            if split is not None:
                entry = self._state_memo.get(split[0])
                if entry is not None and entry[0] == list(split[1]):
                    del self._state_memo[split[0]]

    @property
    def state_memo(self) -> dict[bytes, tuple[list[int], tuple[np.ndarray, str]]] | None:
        """The memo's warm index: state bytes -> ``(legal moves, (vector, text))`` of the
        last memorised input with that state, for a hit with a list of legal moves equal to
        the stored ones. ``None`` when the text depends on the history (the full memo key
        is needed then). Read it, never write it: :class:`LanguageObservation` uses its
        ``get`` for the warm step; any miss or mismatch goes through :meth:`adapt`."""
        return self._state_memo if self._history_key is None else None

    def _lookup(self, texts: list[str]) -> list[np.ndarray]:
        cache = self.cache
        hits, misses = cache.hits, cache.misses
        vectors = cache.lookup_many(texts)
        new_misses = cache.misses - misses
        self._cache_hits += cache.hits - hits
        self._cache_misses += new_misses
        return vectors

    # ------------------------------------------------------------ text and batches
    def describe(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Sequence[Any] = (),
    ) -> str:
        """The description of one input (memoised text when seen before)."""
        checked = self.check_state(state)
        legal = check_legal_moves(legal_moves, self.n_actions)
        hit = self._memo.get(self._key(checked, legal, episode_action_history))
        if hit is not None:
            return hit[1]
        return self.describe_one(checked, legal, episode_action_history)

    def describe_many(self, items: Iterable[AdapterInput]) -> list[str]:
        """Descriptions of ``(state, legal_moves, history)`` items, in order."""
        return [self.describe(*self._unpack(item)) for item in items]

    @staticmethod
    def _unpack(item: Any) -> tuple[Any, Sequence[int], Sequence[Any]]:
        if not isinstance(item, (tuple, list)) or not 1 <= len(item) <= 3:
            raise ValueError(
                f"input {item!r}: expected a (state, legal_moves, episode_action_history) tuple"
            )
        state, legal, history = (*item, (), ())[:3]
        return state, legal, history

    def encode_many(self, texts: Iterable[str]) -> np.ndarray:
        """Vectors of ``texts`` as a new float32 array ``(n, dimension)`` (cached)."""
        if isinstance(texts, str):
            raise ValueError(
                f"texts={texts!r} is a single str; expected a list of str (wrap it: [text])"
            )
        vectors = self._lookup(list(texts))
        if not vectors:
            return np.empty((0, self.encoder.dimension), dtype=np.float32)
        return np.stack(vectors)

    def prerender(
        self, inputs: Iterable[AdapterInput], progress: bool = True, batch_size: int = 512
    ) -> int:
        """Describe and encode ``inputs`` ahead of time and fill the memo.

        Texts are encoded in batches of ``batch_size`` (only the ones no cache knows).
        Afterwards, calling the adapter on any of these inputs makes no encoder call.
        Returns the number of distinct texts. ``progress`` shows a tqdm bar.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: expected a positive int")
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
            raise ValueError(
                f"inputs={inputs!r}: expected an iterable of (state, legal_moves, "
                "episode_action_history) tuples, e.g. reachable_inputs(env)"
            )
        keyed: list[tuple[Hashable, str]] = []
        for item in inputs:
            state, legal_moves, history = self._unpack(item)
            checked = self.check_state(state)
            legal = check_legal_moves(legal_moves, self.n_actions)
            key = self._key(checked, legal, history)
            hit = self._memo.get(key)
            text = hit[1] if hit is not None else self.describe_one(checked, legal, history)
            keyed.append((key, text))
        if len(keyed) > self.memo_capacity:
            raise ValueError(
                f"prerender of {len(keyed)} inputs exceeds memo_capacity={self.memo_capacity}; "
                "expected at most memo_capacity inputs (raise it)"
            )
        texts = list(dict.fromkeys(text for _, text in keyed))
        vectors: dict[str, np.ndarray] = {}
        batches = range(0, len(texts), batch_size)
        if progress and len(texts) > batch_size:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc=f"prerender {self.kind}", unit="batch")
        for start in batches:
            chunk = texts[start : start + batch_size]
            vectors.update(zip(chunk, self._lookup(chunk), strict=True))
        for key, text in keyed:
            self._memorise(key, (vectors[text], text))
        return len(texts)

    # ------------------------------------------------------------ bookkeeping
    def stats(self) -> dict[str, float | int]:
        """Counters: the shared keys of :data:`STAT_KEYS` plus ``memo_misses`` (inputs
        that were described) and ``memo_size``. Memo hits are not counted: that would
        cost the hot path a measurable share of its time."""
        out: dict[str, float | int] = dict.fromkeys(STAT_KEYS, 0)
        out["encoder_calls"] = self._cache_misses  # every cache miss is one encoded text
        out["embedding_cache_hits"] = self._cache_hits
        out["embedding_cache_misses"] = self._cache_misses
        out["memo_misses"] = self._memo_misses
        out["memo_size"] = len(self._memo)
        return out

    def clear_memo(self) -> None:
        """Forget the memo (the embedding cache is kept)."""
        self._memo.clear()
        self._state_memo.clear()  # cleared in place: wrappers hold its get()
