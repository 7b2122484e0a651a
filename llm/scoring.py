"""`decide`: one LLM decision among known replies, scored when it can be, generated when
not. See docs/llm.md, "Scoring known replies".
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .replies import enumerate_replies, parse_json_reply

__all__ = ["Decision", "decide", "softmax"]


@dataclass(frozen=True)
class Decision:
    """One decision: the ``value``, each candidate's probability (keyed by
    ``json.dumps(value, sort_keys=True)``; None when generated), the ``method`` and the reply."""

    value: Any
    probabilities: dict[str, float] | None
    method: Literal["scored", "generated"]
    reply: str

    def probability(self, value: Any) -> float | None:
        """The probability of ``value`` (0.0 if not a candidate; None when generated)."""
        if self.probabilities is None:
            return None
        return self.probabilities.get(_key(value), 0.0)


def _key(value: Any) -> str:
    """A value's key in `Decision.probabilities`: its JSON, object keys sorted."""
    return json.dumps(value, sort_keys=True)


def softmax(log_probs: Sequence[float], temperature: float = 1.0) -> list[float]:
    """Probabilities from log-probabilities divided by ``temperature`` (0 puts all the mass
    on the first largest); -inf entries get 0. Trusts `decide`'s checks (temperature >= 0)
    and `check_scores`' (no NaN, not all -inf)."""
    values = [float(v) for v in log_probs]
    top = max(values)
    if temperature == 0:
        best = values.index(top)
        return [1.0 if i == best else 0.0 for i in range(len(values))]
    weights = [math.exp((v - top) / temperature) for v in values]
    total = sum(weights)
    return [w / total for w in weights]


def _count(backend: Any, name: str) -> None:
    runtime = getattr(backend, "runtime", None)
    if runtime is not None and callable(getattr(runtime, "count", None)):
        runtime.count(name)


def decide(backend: Any, messages: Sequence[Mapping[str, str]], schema: dict[str, Any], *,
           max_tokens: int | None = None, seed: int | None = None, rng: Any = None,
           temperature: float | None = None) -> Decision:
    """The decision among the values ``schema`` allows: the most probable, or one sampled with
    ``rng`` at ``temperature`` (None: 1); the backend's `LLMError`s are raised."""
    if temperature is not None and (isinstance(temperature, bool)
                                    or not isinstance(temperature, (int, float))
                                    or not temperature >= 0):
        raise ValueError(f"temperature={temperature!r}: expected a number >= 0 or None")
    candidates = enumerate_replies(schema)
    if candidates and getattr(backend, "supports_scoring", False):
        texts = [text for _, text in candidates]
        scores = backend.score(messages, texts, seed=seed)
        probs = softmax(scores, 1.0 if temperature is None else float(temperature))
        if rng is None:
            index = probs.index(max(probs))
        else:
            index = int(rng.choice(len(probs), p=probs))
        _count(backend, "llm_scored")
        return Decision(
            value=candidates[index][0],
            probabilities={_key(value): p for (value, _), p in zip(candidates, probs, strict=True)},
            method="scored", reply=texts[index])
    extra: dict[str, Any] = {"schema": schema, "max_tokens": max_tokens}
    if seed is not None:
        extra["seed"] = seed
    reply = backend.chat(messages, **extra)
    value = parse_json_reply(reply, source=_where(backend))
    _count(backend, "llm_generated")
    return Decision(value=value, probabilities=None, method="generated", reply=reply)


def _where(backend: Any) -> str:
    where = getattr(backend, "where", None)
    return where() if callable(where) else type(backend).__name__
