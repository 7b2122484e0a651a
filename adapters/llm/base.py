"""`LLMAdapter`: the abstract base of every LLM state adapter (settings, prompts, caches).

An LLM adapter turns (state, legal moves, recent history) into a prompt, asks a language
model for a short description, caches the answer, and encodes it with MiniLM. Concrete
adapters only implement `generate(system, user) -> str`; everything else lives here:

- settings, validated by pydantic (this class *is* the settings model);
- the prompt: the environment describer's sentence (or the raw numbers when the environment
  has no describer), the legal moves in words where the describer can name them, and the
  last ``action_history_length`` (state, action) pairs, cut to ``context_length``;
- the description cache (`adapters.llm.cache.DescriptionCache`), keyed by backend, model,
  generation options and the full prompt, in memory and in a shared SQLite file;
- an optional fallback to the rule-language description when the LLM fails, counted in
  ``llm_fallbacks``, listed in `fallback_prompts` and never cached as an LLM answer;
- encoding through the shared embedding cache, and a per-input memo so that a warm step is a
  dictionary lookup;
- `prerender`: describe many inputs up front (concurrently where the backend allows it).

It is abstract without the ``abc`` module: `generate` raises ``NotImplementedError``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from langadapt.adapters.base import STAT_KEYS, BaseAdapter, env_spaces
from langadapt.adapters.describers import check_legal_moves
from langadapt.adapters.history import history_pairs, last_action
from langadapt.adapters.llm.cache import DescriptionCache, default_cache_path, description_key
from langadapt.adapters.llm.errors import LLMReplyError
from langadapt.adapters.llm.prompts import (
    DEFAULT_BASE_PROMPT,
    Prompt,
    build_prompt,
    estimate_tokens,
    format_raw_state,
)

logger = logging.getLogger(__name__)

Item = tuple[Any, Sequence[int], Sequence[Any]]

_LLM_KEYS = ("llm_calls", "llm_cache_hits", "llm_failures", "llm_fallbacks", "llm_seconds",
             "prompt_cuts")


class _Engine(BaseAdapter):
    """The shared adapter machinery (checks, memo, embedding cache) driven by an LLMAdapter."""

    kind = "llm"

    def __init__(self, owner: LLMAdapter, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owner = owner

    def describe_one(self, state: np.ndarray, legal_moves: tuple[int, ...], history: Any) -> str:
        return self._owner._describe_one((state, legal_moves, history))[0]

    def _memorise(self, key: Hashable, pair: tuple[np.ndarray, str]) -> None:
        # A rule-language fallback is never remembered: the next visit asks the LLM again.
        if pair[1] in self._owner._fallback_texts:
            return
        super()._memorise(key, pair)


class LLMAdapter(BaseModel):
    """Abstract LLM state adapter; subclasses implement `generate(system, user) -> str`.

    Build one as ``SomeAdapter(env, model=..., ...)`` (``env``: an environment instance or a
    gymnasium id). Call it like every adapter:
    ``adapter(state, legal_moves=(), episode_action_history=(), encode=True)``.
    Settings are validated on construction and fixed afterwards (the model is frozen).
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, frozen=True)

    backend_name: ClassVar[str] = ""
    """Name of the backend in cache keys; empty means the class's qualified name."""
    supports_concurrency: ClassVar[bool] = False
    """Whether `generate` may run in several threads at once (prerender concurrency)."""

    base_prompt: str = Field(DEFAULT_BASE_PROMPT, min_length=1, description="system prompt")
    model: str = Field(min_length=1, description="model name passed to the backend")
    context_length: int = Field(
        2048, ge=64, description="context window in tokens; the prompt is cut to fit"
    )
    action_history_length: int = Field(
        4, ge=0, description="how many recent (state, action) pairs go into the prompt"
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature")
    max_tokens: int = Field(96, ge=1, description="longest answer, in tokens")
    seed: int = Field(0, description="sampling seed passed to the backend")
    encoder: str | None = Field(
        None, description="sentence encoder name or path; None = packaged all-MiniLM-L6-v2"
    )
    cache_path: Path | None = Field(
        default_factory=default_cache_path,
        description="SQLite description cache shared across runs; None = memory only",
    )
    embedding_cache_path: Path | None = Field(
        None, description="SQLite embedding cache (adapters.EmbeddingCache); None = memory"
    )
    fallback: bool = Field(
        False, description="on LLM failure, use the rule-language description (not cached)"
    )
    concurrency: int = Field(1, ge=1, le=64, description="parallel requests in prerender")
    memo_size: int = Field(200_000, ge=0, description="encoded inputs kept in memory")

    _env: Any = PrivateAttr(default=None)
    _describer: Any = PrivateAttr(default=None)
    _action_names: Any = PrivateAttr(default=None)
    _engine: Any = PrivateAttr(default=None)
    _cache: DescriptionCache | None = PrivateAttr(default=None)
    _counters: dict = PrivateAttr(default_factory=lambda: dict.fromkeys(_LLM_KEYS, 0))
    _lock: Any = PrivateAttr(default_factory=threading.RLock)
    _fallback_keys: set = PrivateAttr(default_factory=set)
    _fallback_texts: set = PrivateAttr(default_factory=set)
    _last_fallback: bool = PrivateAttr(default=False)
    _chosen_backend: str | None = PrivateAttr(default=None)
    _choice_reason: str | None = PrivateAttr(default=None)

    def __init__(self, env: Any = None, /, **settings: Any) -> None:
        super().__init__(**settings)
        if env is not None:
            self.bind(env)

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> LLMAdapter:
        """The adapter itself: its settings are frozen and what it holds (the loaded model,
        HTTP client, caches, memo) is meant to be shared, not duplicated. gymnasium deep-copies
        wrapper arguments (``RecordConstructorArgs``), which lands here."""
        return self

    @model_validator(mode="after")
    def _prompt_fits(self) -> LLMAdapter:
        need = estimate_tokens(self.base_prompt) + 32
        if self.context_length - self.max_tokens < need:
            raise ValueError(
                f"context_length={self.context_length} leaves no room for the prompt: "
                f"max_tokens={self.max_tokens} are reserved for the answer and the system "
                f"prompt alone needs about {need - 32} tokens; expected context_length >= "
                f"{self.max_tokens + need}"
            )
        return self

    # ---- wiring ------------------------------------------------------------------------
    def bind(self, env: Any) -> LLMAdapter:
        """Attach the environment (instance or gymnasium id) and build the shared machinery."""
        if isinstance(env, str):
            from langadapt.adapters.describers import _resolve_env

            env = _resolve_env(env)
        state_space, n_actions = env_spaces(env)
        self._env = env
        self._describer = _find_describer(env)
        self._action_names = _action_names_for(env)
        self._engine = _Engine(
            self,
            state_space,
            n_actions,
            encoder_name=self.encoder,
            cache_path=self.embedding_cache_path,
            memo_capacity=self.memo_size,
            history_key=self._history_key if self.action_history_length else None,
        )
        return self

    @property
    def env(self) -> Any:
        """The bound environment (None before `bind`)."""
        return self._env

    @property
    def backend(self) -> str:
        """The backend's name as used in cache keys (e.g. ``"ollama"``)."""
        return self.backend_name or f"{type(self).__module__}.{type(self).__qualname__}"

    @property
    def chosen_backend(self) -> str | None:
        """The backend the ``auto`` choice picked ("ollama" / "llamacpp"); None if not auto."""
        return self._chosen_backend

    @property
    def choice_reason(self) -> str | None:
        """Why the ``auto`` choice picked `chosen_backend` (None when not built by auto)."""
        return self._choice_reason

    @property
    def cache(self) -> DescriptionCache:
        """The description cache (opened on first use)."""
        if self._cache is None:
            with self._lock:
                if self._cache is None:
                    self._cache = DescriptionCache(self.cache_path)
        return self._cache

    @property
    def observation_space(self) -> spaces.Box:
        """``Box(-inf, inf, (384,), float32)``, as for every text adapter."""
        return self.engine.observation_space

    def generation_options(self) -> dict[str, Any]:
        """The options that shape an answer (part of every cache key)."""
        return {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "context_length": self.context_length,
        }

    # ---- the one method a backend implements ---------------------------------------------
    def generate(self, system: str, user: str) -> str:
        """Ask the model: `system` is the system prompt, `user` the state; return its text."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement generate(system, user) -> str; "
            "LLMAdapter is the abstract base (use OllamaAdapter or LlamaCppAdapter)"
        )

    # ---- prompts -----------------------------------------------------------------------
    def rule_description(
        self, state: Any, legal_moves: Sequence[int] = (), episode_action_history: Any = ()
    ) -> str:
        """The rule-language description (the fallback): the describer's sentence, or the
        raw numbers and legal actions where the environment has no describer."""
        if self._describer is None:
            text = f"State {format_raw_state(state)}."
            if len(legal_moves):
                text += " Legal actions: " + ", ".join(self.action_name(a) for a in legal_moves)
                text += "."
            return text
        return self._describer(
            state, legal_moves=tuple(legal_moves), last_action=last_action(episode_action_history)
        )

    def build_prompt(
        self, state: Any, legal_moves: Sequence[int] = (), episode_action_history: Any = ()
    ) -> Prompt:
        """The (system, user) prompt of one input, cut to the context budget.

        The state line is the describer's sentence for the state and its legal moves (the raw
        numbers where there is no describer); the legal actions are named in words where the
        environment's actions have names; each history line gives the earlier state's raw
        numbers and the action taken there.
        """
        n = self.action_history_length
        pairs = history_pairs(list(episode_action_history)[-n:]) if n else []
        lines = [
            (f"at {format_raw_state(prev)} took action {self.action_name(action)}"
             if prev is not None else f"took action {self.action_name(action)}")
            for prev, action in pairs
        ]
        if self._describer is None:
            state_text = format_raw_state(state)
        else:
            state_text = self._describer(state, legal_moves=tuple(legal_moves), last_action=None)
        legal = (", ".join(self.action_name(a) for a in legal_moves)
                 if len(legal_moves) else "none given")
        return build_prompt(
            self.base_prompt, state_text, legal, lines, self.context_length - self.max_tokens
        )

    def action_name(self, action: Any) -> str:
        """An action in words (``"up"``, ``"push the cart left"``) or ``"<n>"`` if unnamed."""
        names = self._action_names
        action = int(action)
        if names is not None and 0 <= action < len(names):
            return f"{action} ({names[action]})"
        return str(action)

    def prompt_key(self, prompt: Prompt) -> str:
        """The description-cache key of `prompt` for this backend, model and options."""
        return description_key(
            self.backend, self.model, self.generation_options(), prompt.system, prompt.user
        )

    # ---- describing ----------------------------------------------------------------------
    def describe(
        self, state: Any, legal_moves: Sequence[int] = (), episode_action_history: Any = ()
    ) -> str:
        """The LLM's description of one input (from the cache when it was seen before)."""
        return self.engine.describe(state, legal_moves, episode_action_history)

    @property
    def last_was_fallback(self) -> bool:
        """Whether the most recent `describe` / call returned the rule-language fallback."""
        return self._last_fallback

    @property
    def fallback_prompts(self) -> frozenset[str]:
        """Cache keys of the prompts answered by the rule-language fallback in this process."""
        with self._lock:
            return frozenset(self._fallback_keys)

    def _describe_one(self, item: Item) -> tuple[str, bool]:
        prompt = self.build_prompt(*item)
        key = self.prompt_key(prompt)
        if prompt.cut:
            self._count("prompt_cuts")
        hit = self.cache.get(key)
        if hit is not None:
            self._count("llm_cache_hits")
            self._last_fallback = False
            return hit, False
        text, is_fallback = self._generate_and_store(prompt, key, item)
        self._last_fallback = is_fallback
        return text, is_fallback

    def _generate_and_store(self, prompt: Prompt, key: str, item: Item) -> tuple[str, bool]:
        start = time.perf_counter()
        self._count("llm_calls")
        try:
            text = self.generate(prompt.system, prompt.user)
            if not isinstance(text, str):
                raise LLMReplyError(
                    f"{type(self).__name__}.generate returned {type(text).__name__} "
                    f"{text!r}; expected a str"
                )
            text = text.strip()
            if not text:
                raise LLMReplyError(
                    f"model {self.model!r} ({self.backend}) returned an empty description"
                )
        except NotImplementedError:
            raise
        except Exception as error:
            self._count("llm_failures")
            if not self.fallback:
                raise
            self._count("llm_fallbacks")
            text = self.rule_description(*item)
            with self._lock:
                self._fallback_keys.add(key)
                self._fallback_texts.add(text)
            logger.warning("LLM failed (%s); using the rule-language description", error)
            return text, True
        finally:
            self._count("llm_seconds", time.perf_counter() - start)
        self.cache.put(
            key, text, backend=self.backend, model=self.model,
            options=self.generation_options(), system=prompt.system, prompt=prompt.user,
        )
        return text, False

    def describe_many(self, items: Iterable[Item], progress: bool = False) -> list[str]:
        """Descriptions of many inputs, generating the missing ones (see `prerender`)."""
        engine = self.engine
        checked = []
        for item in items:
            state, legal_moves, history = engine._unpack(item)
            checked.append((engine.check_state(state),
                            check_legal_moves(legal_moves, engine.n_actions), history))
        texts, _, _ = self._describe_items(checked, progress)
        return texts

    def _describe_items(
        self, items: list[Item], progress: bool
    ) -> tuple[list[str], list[bool], int]:
        from tqdm.auto import tqdm

        prompts = [self.build_prompt(*it) for it in items]
        keys = [self.prompt_key(p) for p in prompts]
        self._count("prompt_cuts", sum(p.cut for p in prompts))
        found = self.cache.get_many(keys)
        todo: dict[str, tuple[Prompt, Item]] = {}
        for key, prompt, item in zip(keys, prompts, items, strict=True):
            if key not in found and key not in todo:
                todo[key] = (prompt, item)
        self._count("llm_cache_hits", sum(1 for k in set(keys) if k in found))
        fallbacks: dict[str, bool] = {}
        bar = tqdm(total=len(todo), desc=f"LLM descriptions ({self.backend})",
                   disable=not progress or not todo, unit="prompt")

        def work(key: str) -> None:
            prompt, item = todo[key]
            text, is_fallback = self._generate_and_store(prompt, key, item)
            found[key] = text
            fallbacks[key] = is_fallback
            bar.update(1)

        try:
            workers = self.concurrency if self.supports_concurrency else 1
            if workers == 1 or len(todo) <= 1:
                for key in todo:
                    work(key)
            else:
                pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm")
                try:
                    futures = [pool.submit(work, key) for key in todo]
                    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                    for future in done:
                        future.result()
                finally:
                    pool.shutdown(wait=True, cancel_futures=True)
        finally:
            bar.close()
        texts = [found[k] for k in keys]
        return texts, [fallbacks.get(k, False) for k in keys], len(set(keys))

    # ---- encoding, the call shape, prerender (through the shared BaseAdapter machinery) ----
    @property
    def engine(self) -> BaseAdapter:
        """The `adapters.base.BaseAdapter` doing checks, memo, embedding cache and encoding."""
        if self._engine is None:
            raise ValueError(
                f"{type(self).__name__} has no environment; pass one when building it "
                "(OllamaAdapter(env, ...)) or call .bind(env)"
            )
        return self._engine

    @property
    def state_memo(self) -> dict | None:
        """The shared machinery's warm index (`adapters.base.BaseAdapter.state_memo`), which
        `LanguageObservation` reads for its warm step; None before `bind` or when the prompt
        depends on the history. Fallback descriptions never enter it."""
        return None if self._engine is None else self._engine.state_memo

    @property
    def state_dtype(self) -> np.dtype | None:
        """The dtype of the bound environment's observations (None before `bind`)."""
        return None if self._engine is None else self._engine.state_dtype

    @property
    def state_shape(self) -> tuple[int, ...]:
        """The shape of the bound environment's observations (``()`` before `bind`)."""
        return () if self._engine is None else self._engine.state_shape

    def encode_many(self, texts: Iterable[str]) -> np.ndarray:
        """Texts -> float32 array (n, 384) through the embedding cache."""
        return self.engine.encode_many(texts)

    def adapt(
        self, state: Any, legal_moves: Iterable[int] = (), episode_action_history: Any = ()
    ) -> tuple[np.ndarray, str]:
        """``(vector, description)`` of one input; a seen input is a memo lookup."""
        # The hot path of every step: read the private slot directly (pydantic's attribute
        # fallback for private attributes costs several microseconds).
        engine = self.__pydantic_private__["_engine"]
        if engine is None:
            engine = self.engine  # raises the "no environment" error
        return engine.adapt(state, legal_moves, episode_action_history)

    def __call__(
        self,
        state: Any,
        legal_moves: Iterable[int] = (),
        episode_action_history: Any = (),
        encode: bool = True,
    ) -> np.ndarray | str:
        """The float32 (384,) encoding (``encode=True``) or the description of one input."""
        if not encode:  # text only: no encoder is loaded or run
            return self.describe(state, legal_moves, episode_action_history)
        return self.adapt(state, legal_moves, episode_action_history)[0]

    def prerender(self, inputs: Iterable[Item], progress: bool = True) -> dict[str, int]:
        """Describe and encode many (state, legal moves, history) inputs ahead of training.

        Missing descriptions are generated — ``concurrency`` at a time for backends that
        allow it (Ollama), else one at a time (llama.cpp) — and each is stored in the
        persistent cache the moment it is finished, so an interrupted prerender keeps its
        work. The texts are then encoded in batches and memoised, so later calls on these
        inputs are dictionary lookups. Returns counts: ``inputs``, ``distinct_prompts``,
        ``generated`` (LLM calls made), ``fallbacks``.
        """
        from tqdm.auto import tqdm

        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
            raise ValueError(
                f"inputs={inputs!r}: expected an iterable of (state, legal_moves, "
                "episode_action_history) tuples, e.g. reachable_inputs(env)"
            )
        engine = self.engine
        items, keys = [], []
        for item in inputs:
            state, legal_moves, history = engine._unpack(item)
            checked = engine.check_state(state)
            legal = check_legal_moves(legal_moves, engine.n_actions)
            items.append((checked, legal, history))
            keys.append(engine._key(checked, legal, history))
        if len(items) > engine.memo_capacity:
            raise ValueError(
                f"prerender of {len(items)} inputs exceeds memo_size={engine.memo_capacity}; "
                "expected at most memo_size inputs (raise memo_size)"
            )
        before_calls = self._counters["llm_calls"]
        before_fallbacks = self._counters["llm_fallbacks"]
        texts, fallbacks, distinct = self._describe_items(items, progress)
        unique = list(dict.fromkeys(texts))
        vectors: dict[str, np.ndarray] = {}
        batches = range(0, len(unique), 256)
        if progress and len(unique) > 256:
            batches = tqdm(batches, desc="encode descriptions", unit="batch")
        for start in batches:
            chunk = unique[start : start + 256]
            vectors.update(zip(chunk, engine._lookup(chunk), strict=True))
        for key, text, is_fallback in zip(keys, texts, fallbacks, strict=True):
            if not is_fallback:
                engine._memorise(key, (vectors[text], text))
        return {
            "inputs": len(items),
            "distinct_prompts": distinct,
            "generated": self._counters["llm_calls"] - before_calls,
            "fallbacks": self._counters["llm_fallbacks"] - before_fallbacks,
        }

    def _history_key(self, history: Any) -> Hashable:
        """The part of the history the prompt depends on: the last N (state, action) pairs.

        Called on every step (it is part of the memo key), so it stays cheap.
        """
        n = self.action_history_length
        if type(history) is list or type(history) is tuple:
            if not history:
                return ()
            pairs = history_pairs(history[-n:])  # checks each item (ValueError when bad)
        else:
            pairs = history_pairs(history)[-n:]
        return tuple(
            (prev.tobytes() if type(prev) is np.ndarray else repr(prev), action)
            for prev, action in pairs
        )

    # ---- counters and sharing ------------------------------------------------------------
    def _count(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._counters[name] += amount

    def stats(self) -> dict[str, float | int]:
        """Counters since construction: the keys every adapter shares (`adapters.STAT_KEYS`)
        plus whatever the shared machinery adds (the memo's counters)."""
        out: dict[str, float | int] = dict.fromkeys(STAT_KEYS, 0)
        if self._engine is not None:
            out.update(self._engine.stats())
        with self._lock:
            out.update(self._counters)
        out["llm_seconds"] = float(out["llm_seconds"])
        return out

    def export_jsonl(self, path: str | Path) -> int:
        """Write the persistent description cache to JSONL; return the number of lines."""
        return self.cache.export_jsonl(path)

    def import_jsonl(self, path: str | Path) -> int:
        """Load descriptions from JSONL (missing backend/options/system = this adapter's)."""
        return self.cache.import_jsonl(
            path, backend=self.backend, options=self.generation_options(),
            system=self.base_prompt,
        )


def _find_describer(env: Any) -> Any:
    """The environment's describer, or None when it has none (the prompt then uses numbers)."""
    from langadapt.adapters.describers import describer_for

    try:
        return describer_for(env)
    except ValueError:
        return None


def _action_names_for(env: Any) -> tuple[str, ...] | None:
    """Words for the actions of the langadapt environments (None for other environments,
    unless the environment has an ``action_names`` attribute)."""
    base = getattr(env, "unwrapped", env)
    own = getattr(base, "action_names", None)
    if own is not None:
        return tuple(str(n) for n in own)
    from langadapt import environments

    if isinstance(base, environments.MazeEnv):
        return tuple(environments.ACTION_NAMES)
    if isinstance(base, environments.SailingEnv):
        return ("turn the heading by -0.1 rad", "turn the heading by +0.1 rad")
    if isinstance(base, environments.CartPoleEnv):
        return ("push the cart left", "push the cart right")
    return None
