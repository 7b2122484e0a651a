"""LLM state adapters: a prompt (describer sentence, legal moves, recent history, cut to
the context) answered by a `langadapt.llm` backend. See docs/llm.md, "LLM state adapters".
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, Field, PrivateAttr

from ..environments import language_for
from ..llm import (
    LlamaCppBackend,
    LLMBackend,
    LLMError,
    NativeBuildError,
    OllamaBackend,
    backend_fields,
    make_backend,
)
from .base import BaseAdapter
from .history import history_pairs, last_action
from .prompts import (
    DEFAULT_BASE_PROMPT,
    Prompt,
    build_prompt,
    estimate_tokens,
    format_raw_state,
)

__all__ = ["LLMAdapter", "LlamaCppAdapter", "OllamaAdapter", "llm_setting_models",
           "make_llm_adapter"]

Item = tuple[np.ndarray, tuple[int, ...], Any]


class LLMAdapter(BaseAdapter):
    """State adapter whose descriptions come from an LLM backend: ``LLMAdapter(env,
    backend=...)``; the subclasses build theirs from the backend settings given alongside."""

    kind = "llm"
    backend_class: ClassVar[type[LLMBackend] | None] = None

    base_prompt: str = Field(DEFAULT_BASE_PROMPT, min_length=1, description="system prompt")
    action_history_length: int = Field(
        4, ge=0, le=1000, description="how many recent (state, action) pairs go into the prompt")
    max_tokens: int = Field(96, ge=1, le=1 << 20, description="longest description, tokens")
    fallback: bool = Field(
        False, description="on LLM failure, use the rule-language description (not cached)")
    concurrency: int = Field(
        4, ge=1, le=64, description="most requests in flight at once, in adapt_many (a step of "
        "N environments) and prerender (backends that allow it: ollama, openai)")
    memo_capacity: int = Field(200_000, ge=0, le=10**8, description="inputs remembered")

    _backend: LLMBackend = PrivateAttr(default=None)
    _describer: Any = PrivateAttr(default=None)
    _action_names: tuple[str, ...] | None = PrivateAttr(default=None)
    _fallback_texts: set[str] = PrivateAttr(default_factory=set)
    _last_fallback: bool = PrivateAttr(default=False)
    _cuts: list[int] = PrivateAttr(default_factory=lambda: [0])
    _lock: Any = PrivateAttr(default_factory=threading.Lock)
    _pool: tuple[int, ThreadPoolExecutor] | None = PrivateAttr(default=None)  # (pid, pool)

    def __init__(self, env: Any = None, /, *, backend: LLMBackend | None = None,
                 **settings: Any) -> None:
        own = {k: settings.pop(k) for k in list(settings)
               if k in type(self).model_fields or k == "embedding_cache"}
        if backend is None:
            if self.backend_class is None:
                raise ValueError("LLMAdapter needs backend= a langadapt.llm backend (or use "
                                 "OllamaAdapter / LlamaCppAdapter / adapters.make('llm', ...))")
            backend = self.backend_class(**settings)
        elif settings:
            raise ValueError(f"{sorted(settings)}: not settings of {type(self).__name__}; "
                             "backend settings belong to the backend given as backend=")
        if not isinstance(backend, LLMBackend):
            raise ValueError(f"backend={backend!r}: expected a langadapt.llm backend")
        super().__init__(env, **own)
        need = estimate_tokens(self.base_prompt) + 32
        if backend.context_length - self.max_tokens < need:
            raise ValueError(
                f"context_length={backend.context_length} leaves no room for the prompt: "
                f"max_tokens={self.max_tokens} are reserved for the answer and the system "
                f"prompt alone needs about {need - 32} tokens; expected context_length >= "
                f"{self.max_tokens + need}")
        self._backend = backend
        try:
            spec = language_for(self.env)
        except ValueError:  # no language spec: the prompt gives the raw numbers
            self._describer = None
            names = getattr(self.env, "action_names", None)
            self._action_names = None if names is None else tuple(str(n) for n in names)
        else:
            self._describer, self._action_names = spec.describer, spec.action_names
        self.clear_memo()

    # ---- the parts -----------------------------------------------------------------------
    @property
    def backend(self) -> LLMBackend:
        """The `langadapt.llm` backend answering the prompts."""
        return self._backend

    @property
    def uses_history(self) -> bool:
        return self.action_history_length > 0

    def history_key(self, history: Any) -> Hashable:
        """The last ``action_history_length`` (state, action) pairs, as a hashable value."""
        n = self.action_history_length
        if type(history) is list or type(history) is tuple:
            pairs = history_pairs(history[-n:]) if history else []
        else:
            pairs = history_pairs(history)[-n:]
        return tuple((prev.tobytes() if type(prev) is np.ndarray else repr(prev), action)
                     for prev, action in pairs)

    def memorable(self, text: str) -> bool:
        return text not in self._fallback_texts

    @property
    def last_was_fallback(self) -> bool:
        """Whether the most recent description was the rule-language fallback."""
        return self._last_fallback

    # ---- prompts -------------------------------------------------------------------------
    def action_name(self, action: Any) -> str:
        """An action in words (``"2 (down)"``) or ``"<n>"`` when unnamed."""
        names = self._action_names
        action = int(action)
        if names is not None and 0 <= action < len(names):
            return f"{action} ({names[action]})"
        return str(action)

    def rule_description(self, state: Any, legal_moves: Sequence[int] = (),
                         episode_action_history: Any = ()) -> str:
        """The fallback: the describer's sentence, else the raw numbers and legal actions."""
        if self._describer is None:
            text = f"State {format_raw_state(state)}."
            if len(legal_moves):
                text += " Legal actions: " + ", ".join(map(self.action_name, legal_moves)) + "."
            return text
        return self._describer(self.env_observation(state), legal_moves=tuple(legal_moves),
                               last_action=last_action(episode_action_history))

    def build_prompt(self, state: Any, legal_moves: Sequence[int] = (),
                     episode_action_history: Any = ()) -> Prompt:
        """The (system, user) prompt of one input, cut to the backend's context."""
        n = self.action_history_length
        pairs = history_pairs(list(episode_action_history)[-n:]) if n else []
        lines = [(f"at {format_raw_state(prev)} took action {self.action_name(action)}"
                  if prev is not None else f"took action {self.action_name(action)}")
                 for prev, action in pairs]
        if self._describer is None:
            state_text = format_raw_state(state)
        else:
            state_text = self._describer(self.env_observation(state),
                                         legal_moves=tuple(legal_moves), last_action=None)
        legal = ", ".join(map(self.action_name, legal_moves)) if len(legal_moves) else "none given"
        return build_prompt(self.base_prompt, state_text, legal, lines,
                            self._backend.context_length - self.max_tokens)

    # ---- describing ----------------------------------------------------------------------
    def describe_one(self, state: np.ndarray, legal_moves: tuple[int, ...],
                     history: Sequence[Any]) -> str:
        text, is_fallback = self._ask(self.build_prompt(state, legal_moves, history),
                                      (state, legal_moves, history))
        self._last_fallback = is_fallback
        return text

    def _ask(self, prompt: Prompt, item: Item) -> tuple[str, bool]:
        """The backend's answer to ``prompt``, or the fallback (text, whether it is one)."""
        if prompt.cut:
            with self._lock:
                self._cuts[0] += 1
        try:
            return self._backend.complete(prompt.system, prompt.user,
                                          max_tokens=self.max_tokens), False
        except NativeBuildError:
            raise  # the build cannot run here: no fallback hides that
        except LLMError:
            if not self.fallback:
                raise
        self._backend.record_fallback()
        text = self.rule_description(*item)
        with self._lock:
            self._fallback_texts.add(text)
        return text, True

    def _workers(self) -> ThreadPoolExecutor:
        """The adapter's ``concurrency`` request threads (started on first use; a forked
        child, which has none of its parent's threads, starts its own)."""
        with self._lock:
            if self._pool is None or self._pool[0] != os.getpid():
                self._pool = (os.getpid(), ThreadPoolExecutor(max_workers=self.concurrency,
                                                              thread_name_prefix="llm"))
            return self._pool[1]

    def describe_checked(self, items: list[Item], progress: bool) -> list[tuple[str, bool]]:
        """Descriptions of checked inputs: one request per distinct prompt, at most
        ``concurrency`` in flight where the backend allows it (docs/llm.md)."""
        from tqdm.auto import tqdm

        prompts = [self.build_prompt(*item) for item in items]
        todo: dict[Prompt, Item] = {}
        for prompt, item in zip(prompts, items, strict=True):
            todo.setdefault(prompt, item)
        answers: dict[Prompt, tuple[str, bool]] = {}
        bar = tqdm(total=len(todo), desc=f"LLM descriptions ({self._backend.name})",
                   disable=not progress or not todo, unit="prompt")

        def work(prompt: Prompt) -> None:
            answers[prompt] = self._ask(prompt, todo[prompt])
            bar.update(1)

        try:
            if len(todo) <= 1 or not self._backend.supports_concurrency or self.concurrency == 1:
                for prompt in todo:
                    work(prompt)
            else:
                pool = self._workers()
                futures = [pool.submit(work, prompt) for prompt in todo]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = next((f for f in done if f.exception() is not None), None)
                if failed is not None:
                    for other in futures:
                        other.cancel()
                    wait(futures)  # the requests already sent end before the error is raised
                    failed.result()
        finally:
            bar.close()
        return [(answers[p][0], not answers[p][1]) for p in prompts]

    def prerender(self, inputs: Any, progress: bool = True, batch_size: int = 256
                  ) -> dict[str, int]:
        """`BaseAdapter.prerender`, plus ``distinct_prompts``, ``generated`` (LLM calls made)
        and ``fallbacks``."""
        before = self._backend.stats()
        items = self._checked(inputs)
        distinct = len({self.build_prompt(*item) for item in items})
        out = super().prerender(items, progress, batch_size)
        after = self._backend.stats()
        return {**out, "distinct_prompts": distinct,
                "generated": after["llm_calls"] - before["llm_calls"],
                "fallbacks": after["llm_fallbacks"] - before["llm_fallbacks"]}

    # ---- bookkeeping ---------------------------------------------------------------------
    def stats(self) -> dict[str, float | int]:
        """The adapter's counters with the backend's (``llm_*``) and ``prompt_cuts``."""
        out = super().stats()
        out.update(self._backend.stats())
        out["prompt_cuts"] = self._cuts[0]
        return out

    def description_counts(self) -> dict[str, int]:
        """``states``: the inputs the LLM described so far (those the memo holds; fallbacks
        are not kept), ``descriptions``: how many distinct texts it gave them. Fewer
        descriptions than states: the LLM merged states the agent can no longer tell apart."""
        texts = [text for _, text in self.memo.entries.values()]
        return {"states": len(texts), "descriptions": len(set(texts))}

    def export_jsonl(self, path: Any) -> int:
        """`LLMBackend.export_jsonl` of the backend."""
        return self._backend.export_jsonl(path)

    def import_jsonl(self, path: Any) -> int:
        """`LLMBackend.import_jsonl` of the backend."""
        return self._backend.import_jsonl(path)


class OllamaAdapter(LLMAdapter):
    """`LLMAdapter` with an `OllamaBackend` built from the Ollama settings given."""

    backend_class: ClassVar[type[LLMBackend]] = OllamaBackend


class LlamaCppAdapter(LLMAdapter):
    """`LLMAdapter` with a `LlamaCppBackend` built from the llama.cpp settings given."""

    backend_class: ClassVar[type[LLMBackend]] = LlamaCppBackend


def _split(settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    own = {k: v for k, v in settings.items()
           if k in LLMAdapter.model_fields or k == "embedding_cache"}
    return own, {k: v for k, v in settings.items() if k not in own}


def make_llm_adapter(env: Any = None, backend: Any = "auto", **settings: Any) -> LLMAdapter:
    """``adapters.make("llm", env, backend=..., **settings)``: the adapter's settings plus a
    backend spec (a name with its fields among ``settings``, or a backend object)."""
    own, spec = _split(settings)
    if isinstance(backend, LLMBackend):
        if spec:
            raise ValueError(f"{sorted(spec)}: backend settings given with a backend object")
        built = make_backend(backend)
    else:
        built = make_backend({"backend": backend, **spec})
    cls = {"ollama": OllamaAdapter, "llamacpp": LlamaCppAdapter}.get(built.name, LLMAdapter)
    return cls(env, backend=built, **own)


def llm_setting_models(settings: dict[str, Any]) -> list[tuple[type[BaseModel], dict[str, Any]]]:
    """(pydantic model, settings) pairs that check ``llm`` adapter settings unbuilt."""
    own, spec = _split({k: v for k, v in settings.items() if k != "backend"})
    return [(LLMAdapter, own), *backend_fields({"backend": settings.get("backend", "auto"),
                                                **spec})]
