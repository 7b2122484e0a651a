"""An LLM role's backend (built from its spec, its structured output checked before a run) and
what the role costs, in the LLM layer's counter names (:data:`langadapt.llm.STATS_KEYS`):
the share of its backend's counters its own requests caused. See docs/llm-in-the-loop.md."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from pydantic import AfterValidator, ValidationError

from ..errors import one_line
from ..llm import backend_fields, make_backend

__all__ = ["LLM_COUNTERS", "RoleCounters", "check_structured_output", "make_llm_backend"]

#: The backend counters a role takes its share of (the change across its own requests).
SHARED_COUNTERS = ("llm_calls", "llm_cache_hits", "llm_scored", "llm_generated",
                   "llm_prompt_tokens", "llm_prompt_tokens_reused")
#: The LLM counters every role reports.
LLM_COUNTERS = (*SHARED_COUNTERS, "llm_fallbacks", "llm_seconds")

def check_backend_spec(spec: str | dict[str, Any]) -> str | dict[str, Any]:
    """``spec`` when every backend it may build accepts its fields (checked without
    contacting a server, so ``--check`` finds a bad field, not a run), else ValueError on
    one line naming the field (never its value: it may be a key)."""
    try:
        for cls, fields in backend_fields({"backend": spec} if isinstance(spec, str) else spec):
            cls(**fields)
    except ValidationError as error:
        raise ValueError(one_line(error, values=False)) from None
    return spec


BackendSpec = Annotated[str | dict[str, Any], AfterValidator(check_backend_spec)]


def make_llm_backend(spec: BackendSpec | Any) -> Any:
    """``spec`` as a backend: an object with ``chat`` is used as it is, a string or dict goes
    to :func:`langadapt.llm.make_backend`."""
    if callable(getattr(spec, "chat", None)):
        return spec
    if not isinstance(spec, (str, dict)):
        raise ValueError(
            f"backend is {spec!r}, expected 'llamacpp', 'ollama', a dict spec for "
            "langadapt.llm.make_backend or an object with chat()"
        )
    return make_backend(spec)


def check_structured_output(backend: Any, schema: dict[str, Any], needs: str,
                            advice: str = "") -> None:
    """ValueError ``{needs} {schema}, which the backend cannot honour (...){advice}``
    when ``backend`` says it cannot (its ``check_schema_support``): before a run, not in it."""
    check = getattr(backend, "check_schema_support", None)
    try:
        if callable(check):
            check(schema)
    except RuntimeError as error:
        raise ValueError(f"{needs} {schema}, which the backend cannot honour "
                         f"({error}){advice}") from error


def _backend_counts(backend: Any) -> dict[str, float] | None:
    """The backend's :data:`SHARED_COUNTERS` so far; None when it keeps no counters."""
    stats = getattr(backend, "stats", None)
    if not callable(stats):
        return None
    values = stats()
    return {key: float(values.get(key, 0)) for key in SHARED_COUNTERS}


class RoleCounters(dict):
    """A role's counters: its own (``names``, starting at 0) and :data:`LLM_COUNTERS`."""

    def __init__(self, *names: str) -> None:
        super().__init__(dict.fromkeys((*names, *LLM_COUNTERS), 0))
        self["llm_seconds"] = 0.0

    @contextmanager
    def llm_call(self, backend: Any) -> Iterator[None]:
        """Count one request (or decision) to ``backend``: its share of the backend's
        counters, and the seconds."""
        before = _backend_counts(backend)
        started = time.perf_counter()
        try:
            yield
        finally:
            self["llm_seconds"] += time.perf_counter() - started
            after = _backend_counts(backend)
            if before is None or after is None:
                self["llm_calls"] += 1  # a backend without counters: every request is a call
            else:
                for key in SHARED_COUNTERS:
                    self[key] += after[key] - before[key]

    def as_stats(self) -> dict[str, float]:
        """The counters as numbers (ints, seconds as float)."""
        return {k: (float(v) if k == "llm_seconds" else int(v)) for k, v in self.items()}
