"""`make_llm_adapter`: build an LLM adapter by backend name, including the ``auto`` choice.

``backend="ollama"`` -> `OllamaAdapter`, ``"llamacpp"`` -> `LlamaCppAdapter`, ``"auto"`` -> Ollama
when a server answers at ``host`` (default ``$OLLAMA_HOST`` or 127.0.0.1:11434) and has the
model, else the embedded llama.cpp model. The auto choice is logged and recorded on the
adapter (`LLMAdapter.chosen_backend`, `LLMAdapter.choice_reason`).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from langadapt.adapters.llm.base import LLMAdapter
from langadapt.adapters.llm.llamacpp_adapter import LlamaCppAdapter
from langadapt.adapters.llm.ollama_adapter import (
    DEFAULT_OLLAMA_MODEL,
    OllamaAdapter,
    default_host,
    ollama_has_model,
)

logger = logging.getLogger(__name__)

Backend = Literal["ollama", "llamacpp", "auto"]
BACKENDS: tuple[str, ...] = ("ollama", "llamacpp", "auto")

_OLLAMA_ONLY = set(OllamaAdapter.model_fields) - set(LLMAdapter.model_fields)
_LLAMACPP_ONLY = set(LlamaCppAdapter.model_fields) - set(LLMAdapter.model_fields)


class _BackendChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: Backend


class _AutoProbe(BaseModel):
    """The settings the ``auto`` probe reads, checked before it uses them."""

    model_config = ConfigDict(extra="ignore")
    timeout: float = Field(2.0, gt=0, description="seconds per HTTP request (probe: at most 2)")


def make_llm_adapter(env: Any = None, backend: str = "auto", **settings: Any) -> LLMAdapter:
    """An LLM adapter for `env` on `backend` ("ollama", "llamacpp" or "auto").

    `settings` are the adapter's fields (see `OllamaAdapter` / `LlamaCppAdapter`). With
    ``auto``, the fields of the backend that was not picked are dropped, and so is ``model``
    when llama.cpp is picked (it names the Ollama model).
    """
    choice = _BackendChoice(backend=backend).backend
    if choice == "ollama":
        return OllamaAdapter(env, **settings)
    if choice == "llamacpp":
        return LlamaCppAdapter(env, **settings)
    host = settings.get("host") or default_host()
    model = settings.get("model") or DEFAULT_OLLAMA_MODEL
    probe = _AutoProbe(**settings)  # a bad timeout is a ValidationError naming `timeout`
    found, reason = ollama_has_model(host, model, timeout=min(2.0, probe.timeout))
    if found:
        adapter: LLMAdapter = OllamaAdapter(
            env, **{k: v for k, v in settings.items() if k not in _LLAMACPP_ONLY}
        )
    else:
        dropped = _OLLAMA_ONLY | {"model", "concurrency"}
        adapter = LlamaCppAdapter(env, **{k: v for k, v in settings.items() if k not in dropped})
    adapter._chosen_backend = adapter.backend
    adapter._choice_reason = reason
    logger.info("LLM backend auto -> %s (%s)", adapter.backend, reason)
    return adapter
