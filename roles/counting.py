"""What an LLM role costs, counted in the LLM layer's vocabulary, and its backend.

Every role (policy, advisor, reward shaping, policy search) has one ``stats()`` whose LLM
keys are those of :data:`langadapt.llm.STATS_KEYS` — ``llm_calls``, ``llm_cache_hits``,
``llm_fallbacks``, ``llm_seconds`` — beside the role's own counters (``decisions``,
``potentials``, ...). A role counts the share of its backend's counters that its own
requests caused, so an adapter and a role sharing one backend are not counted twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..llm import make_backend

__all__ = ["LLM_COUNTERS", "RoleCounters", "make_llm_backend"]

#: The LLM counters every role reports.
LLM_COUNTERS = ("llm_calls", "llm_cache_hits", "llm_fallbacks", "llm_seconds")

BackendSpec = str | dict[str, Any]


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


def _backend_counts(backend: Any) -> tuple[float, float] | None:
    """(calls, cache hits) the backend reports so far; None when it keeps no counters."""
    stats = getattr(backend, "stats", None)
    if not callable(stats):
        return None
    values = stats()
    return float(values.get("llm_calls", 0)), float(values.get("llm_cache_hits", 0))


class RoleCounters(dict):
    """A role's counters: its own (``names``, starting at 0) and :data:`LLM_COUNTERS`."""

    def __init__(self, *names: str) -> None:
        super().__init__(dict.fromkeys((*names, *LLM_COUNTERS), 0))
        self["llm_seconds"] = 0.0

    @contextmanager
    def llm_call(self, backend: Any) -> Iterator[None]:
        """Count one request to ``backend``: its calls, cache hits and seconds."""
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
                self["llm_calls"] += after[0] - before[0]
                self["llm_cache_hits"] += after[1] - before[1]

    def as_stats(self) -> dict[str, float]:
        """The counters as numbers (ints, seconds as float)."""
        return {k: (float(v) if k == "llm_seconds" else int(v)) for k, v in self.items()}
