"""`make_backend(spec)`: a backend from a name or a dict, ``auto`` included (docs/llm.md)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .backend import LLMBackend
from .errors import ModelNotFoundError
from .llamacpp import LlamaCppBackend
from .ollama import OllamaBackend
from .openai_backend import OpenAIBackend  # imports openai only when a client is built
from .transformers_backend import TransformersBackend

__all__ = ["BACKENDS", "backend_fields", "make_backend"]

logger = logging.getLogger("langadapt.llm")

#: Seconds ``auto`` waits for an Ollama server to list its models.
PROBE_TIMEOUT_S = 2.0

BACKENDS: dict[str, type[LLMBackend]] = {"ollama": OllamaBackend, "llamacpp": LlamaCppBackend,
                                        "transformers": TransformersBackend,
                                        "openai": OpenAIBackend}
_OLLAMA_ONLY = set(OllamaBackend.model_fields) - set(LLMBackend.model_fields) - {"model"}
_LLAMACPP_ONLY = set(LlamaCppBackend.model_fields) - set(LLMBackend.model_fields) - {"model"}


def _flatten(spec: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    fields = dict(spec)
    choice = fields.pop("backend", "auto")
    nested = fields.pop("options", None) or {}
    if not isinstance(nested, Mapping):
        raise ValueError(f"options={nested!r}: expected a mapping of generation options")
    both = sorted(set(nested) & set(fields))
    if both:
        raise ValueError(f"{both} given both at the top level and under options; give them once")
    fields.update(nested)
    if choice not in (*BACKENDS, "auto"):
        raise ValueError(f"backend={choice!r}: expected one of {[*BACKENDS, 'auto']}")
    return choice, fields


def _is_file(model: Any) -> bool:
    """Whether ``model`` names a GGUF file (existing, or ending in .gguf: a missing one is an
    error naming it, not a silent switch of model)."""
    return isinstance(model, (str, os.PathLike)) and (
        os.fspath(model).lower().endswith(".gguf") or Path(model).expanduser().is_file())


def backend_fields(spec: Mapping[str, Any]) -> list[tuple[type[LLMBackend], dict[str, Any]]]:
    """(backend class, fields it gets) for each backend ``spec`` may build (two for auto),
    without contacting any server: for checking a spec before a run."""
    choice, fields = _flatten(spec)
    if choice != "auto":
        return [(BACKENDS[choice], fields)]
    embedded = {k: v for k, v in fields.items() if k not in _OLLAMA_ONLY}
    if _is_file(fields.get("model")):
        return [(LlamaCppBackend, embedded)]
    embedded.pop("model", None)
    return [(OllamaBackend, {k: v for k, v in fields.items() if k not in _LLAMACPP_ONLY}),
            (LlamaCppBackend, embedded)]


def make_backend(spec: str | Mapping[str, Any] | LLMBackend) -> LLMBackend:
    """A backend from a name (`BACKENDS` or ``"auto"``), a dict (docs/llm.md) or a backend
    (returned as it is)."""
    if isinstance(spec, LLMBackend):
        return spec
    if isinstance(spec, str):
        spec = {"backend": spec}
    if not isinstance(spec, Mapping):
        raise ValueError(f"backend spec {spec!r}: expected one of {[*BACKENDS, 'auto']} "
                         "or a dict")
    options = backend_fields(spec)
    if len(options) == 1:
        cls, fields = options[0]
        backend = cls(**fields)
        if _flatten(spec)[0] == "auto":
            backend.runtime.choice_reason = f"model {fields['model']} is a GGUF file"
            logger.info("LLM backend auto -> llamacpp (%s)", backend.choice_reason)
        return backend
    (_, ollama_fields), (_, embedded) = options
    ollama = OllamaBackend(**ollama_fields)  # a bad field is a ValidationError before any probe
    LlamaCppBackend(**embedded)
    try:
        digest = ollama.listed_digest(timeout=PROBE_TIMEOUT_S)
        found = digest is not None
        reason = (f"Ollama at {ollama.host} has model {ollama.model!r}" if found
                  else f"no Ollama server answering at {ollama.host}")
    except ModelNotFoundError:
        found, reason = False, f"Ollama at {ollama.host} has no model {ollama.model!r}"
    if found:  # the probe read the model's digest: its identity, no second request
        backend: LLMBackend = ollama
        ollama.runtime.once("identity", lambda: ollama.identity_of(digest))
    else:
        backend = LlamaCppBackend(**embedded)
    if not found and "model" in ollama_fields:
        reason += f"; the Ollama model name {ollama.model!r} does not apply to llama.cpp"
    backend.runtime.choice_reason = reason
    logger.info("LLM backend auto -> %s (%s)", backend.name, reason)
    return backend
