"""Feedback that refines a match: judges (``none``, :class:`SimulatedFeedback`,
:class:`LLMFeedback`) and :func:`refine` with the rules ``probe`` (default), ``sets`` and
``vector`` (elsciRL's). See docs/instructions.md."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Annotated, Any

import numpy as np
from pydantic import Field, Strict

from ...llm import LLMReplyError, parse_json_reply
from ..counting import RoleCounters, make_llm_backend
from .search import (
    DEFAULT_MARGIN,
    DEFAULT_THRESHOLD,
    DEFAULT_TOP_K,
    TIE,
    Exploration,
    Match,
    _normalise,
    rank,
    select,
)
from .spec import Cosine, Count, checked_arguments

__all__ = ["JUDGE_SCHEMA", "DEFAULT_PER_ROUND", "DEFAULT_RULE", "MAX_ROUNDS",
           "REFINE_RULES", "LLMFeedback", "SimulatedFeedback", "refine"]

MAX_ROUNDS = 3
#: States shown to the judge per round.
DEFAULT_PER_ROUND = 3
#: The refinement rule (chosen by measurement, docs/instructions.md).
DEFAULT_RULE = "probe"
REFINE_RULES = ("probe", "sets", "vector")

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"satisfied": {"type": "boolean"},
                   "reason": {"type": "string", "maxLength": 80}},
    "required": ["satisfied", "reason"],
    "additionalProperties": False,
}
JUDGE_SYSTEM = (
    "You check whether an agent has carried out an instruction. You are given the instruction "
    "and a description of the agent's current state. Answer only from the description."
)
JUDGE_USER = (
    "Instruction: {instruction}\nState: {description}\n"
    'Is the instruction satisfied in this state? Reply with JSON {{"satisfied": true or false, '
    '"reason": "<a few words>"}}.'
)


class SimulatedFeedback:
    """Ground-truth feedback (docs/instructions.md). ``truth``: states (tuples, e.g.
    maze cells) that satisfy the instruction, or a callable; ``on_env=True``: the callable
    takes the unwrapped environment and must be given to ``explore(checks=[...])``."""

    kind = "simulated"

    def __init__(self, truth: Collection[Sequence[float]] | Callable[[Any], bool],
                 on_env: bool = False) -> None:
        self.on_env = bool(on_env)
        if callable(truth):
            self.truth: Any = truth
        else:
            try:
                self.truth = {tuple(int(round(float(v))) for v in state) for state in truth}
            except (TypeError, ValueError):
                raise ValueError(f"simulated feedback truth {truth!r}: expected states such as "
                                 "[[row, col], ...] or a callable") from None
            if not self.truth:
                raise ValueError("simulated feedback truth is empty; expected at least one "
                                 "state")
        self.counters = RoleCounters("judgements", "satisfied")

    def judge(self, instruction: str, description: str, states: Sequence[tuple[float, ...]],
              exploration: Exploration | None = None, index: int | None = None
              ) -> tuple[bool, str]:
        verdict, reason = self._verdict(states, exploration, index)
        self.counters["judgements"] += 1
        self.counters["satisfied"] += verdict
        return verdict, reason

    def _verdict(self, states: Sequence[tuple[float, ...]], exploration: Exploration | None,
                 index: int | None) -> tuple[bool, str]:
        if self.on_env:
            hits = (exploration.checks.get(id(self.truth)) if exploration is not None
                    else None)
            if hits is None:
                raise ValueError("simulated feedback with an environment check needs the check "
                                 "passed to explore(checks=[...])")
            return index in hits, "environment check"
        if callable(self.truth):
            return any(bool(self.truth(state)) for state in states), "ground-truth predicate"
        cells = {tuple(int(round(v)) for v in state) for state in states}
        return bool(cells & self.truth), "ground-truth states"

    def stats(self) -> dict[str, float]:
        return self.counters.as_stats()


class LLMFeedback:
    """The LLM judges each state (docs/instructions.md). ``backend``: a spec for
    :func:`langadapt.llm.make_backend` (``"llamacpp"`` by default) or an object with
    ``chat``. A reply that does not parse is a ``ValueError`` quoting it."""

    kind = "llm"

    def __init__(self, backend: Any = "llamacpp", max_tokens: int = 96) -> None:
        self._spec = backend
        self._backend: Any = None
        self.max_tokens = max_tokens
        self.counters = RoleCounters("judgements", "satisfied")

    @property
    def backend(self) -> Any:
        if self._backend is None:
            self._backend = make_llm_backend(self._spec)
        return self._backend

    def judge(self, instruction: str, description: str, states: Sequence[tuple[float, ...]],
              exploration: Exploration | None = None, index: int | None = None
              ) -> tuple[bool, str]:
        messages = [{"role": "system", "content": JUDGE_SYSTEM},
                    {"role": "user", "content": JUDGE_USER.format(instruction=instruction,
                                                                  description=description)}]
        with self.counters.llm_call(self.backend):
            reply = self.backend.chat(messages, schema=JUDGE_SCHEMA, max_tokens=self.max_tokens)
        try:
            data = parse_json_reply(reply)
            verdict, reason = data["satisfied"], data.get("reason", "")
        except (LLMReplyError, TypeError, KeyError, AttributeError):
            verdict, reason = None, ""
        if not isinstance(verdict, bool):
            raise ValueError(f"the LLM's judgement {reply!r} of {description!r} is not JSON "
                             '{"satisfied": true/false, "reason": ...}')
        self.counters["judgements"] += 1
        self.counters["satisfied"] += verdict
        return verdict, str(reason)[:200]

    def stats(self) -> dict[str, float]:
        return self.counters.as_stats()


# ------------------------------------------------------------------------- refinement
def _probe_scores(vectors: np.ndarray, labels: dict[int, bool], anchor: np.ndarray,
                  l2: float = 1.0, iterations: int = 200) -> np.ndarray:
    """Probability of "satisfied" for every row of ``vectors`` from a logistic regression on
    the judged rows and ``anchor`` (the instruction, one satisfying example)."""
    x = np.vstack([anchor[None, :], vectors[list(labels)]]).astype(np.float64)
    y = np.array([1.0, *(1.0 if v else 0.0 for v in labels.values())])
    w = np.zeros(x.shape[1])
    b = 0.0
    lr = 1.0
    for _ in range(iterations):  # plain gradient descent: a handful of points, 384 features
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        grad = p - y
        w -= lr * (x.T @ grad / len(y) + l2 * w / len(y))
        b -= lr * grad.mean()
    return 1.0 / (1.0 + np.exp(-(vectors.astype(np.float64) @ w + b)))


def _ranking(rule: str, instruction_vector: np.ndarray, vectors: np.ndarray,
             labels: dict[int, bool], moved: np.ndarray) -> np.ndarray:
    if rule == "vector":
        return vectors @ _normalise(moved)
    if rule == "probe" and labels:
        return _probe_scores(vectors, labels, instruction_vector)
    return vectors @ instruction_vector


@checked_arguments
def refine(instruction: str, exploration: Exploration, feedback: Any,
           rule: str = DEFAULT_RULE,
           rounds: Annotated[int, Strict(), Field(ge=0, le=MAX_ROUNDS)] = MAX_ROUNDS,
           per_round: Count = DEFAULT_PER_ROUND,
           threshold: Cosine = DEFAULT_THRESHOLD, top_k: Count = DEFAULT_TOP_K,
           vector: np.ndarray | None = None, strict: bool = False,
           margin: float | None = DEFAULT_MARGIN) -> Match:
    """Match ``instruction`` with ``feedback`` (a source with ``judge``, or None for no
    feedback) refining it by ``rule`` over at most ``rounds`` rounds of ``per_round`` states
    (docs/instructions.md)."""
    if rule not in REFINE_RULES:
        raise ValueError(f"feedback rule {rule!r}: expected one of {list(REFINE_RULES)}")
    texts, vectors = exploration.texts, exploration.vectors
    if vector is None:
        vector = exploration.encode_texts([instruction])[0]
    instruction_vector = _normalise(vector)
    cosine = vectors @ instruction_vector
    if feedback is None or rounds == 0:
        return select(instruction, cosine, texts, threshold, top_k, strict, margin=margin)
    labels: dict[int, bool] = {}
    log: list[list[dict[str, Any]]] = []
    moved = instruction_vector.astype(np.float64).copy()
    for _ in range(rounds):
        scores = _ranking(rule, instruction_vector, vectors, labels, moved)
        asked = [i for i in rank(scores, texts) if i not in labels][:per_round]
        if not asked:
            break
        verdicts = []
        for i in asked:
            satisfied, reason = feedback.judge(instruction, texts[i], exploration.states[i],
                                               exploration, i)
            labels[i] = bool(satisfied)
            verdicts.append({"description": texts[i], "satisfied": bool(satisfied),
                             "reason": reason})
            if rule == "vector":
                step = 0.5 * (vectors[i] - moved)
                moved = moved + step if satisfied else moved - step
        log.append(verdicts)
    positives = [i for i, ok in labels.items() if ok]
    scores = _ranking(rule, instruction_vector, vectors, labels, moved)
    if rule == "vector":
        result = select(instruction, scores, texts, threshold, top_k, strict, rule, margin)
    else:
        chosen = sorted(positives, key=lambda i: (-round(float(cosine[i]) / TIE), texts[i]))
        extra: list[int] = []
        if rule == "probe" and chosen:
            extra = [i for i in rank(scores, texts)
                     if i not in labels and scores[i] > 0.5][:top_k]
        kept = chosen + extra
        if kept:
            result = Match(instruction, [texts[i] for i in kept],
                           [float(cosine[i]) for i in kept], False, float(cosine.max()),
                           threshold, top_k, rule=rule)
        else:  # nothing confirmed: the best unjudged-negative states, flagged
            masked = np.where([labels.get(i) is False for i in range(len(texts))], -np.inf,
                              cosine)
            if np.isneginf(masked).all():
                masked = cosine
            result = select(instruction, masked, texts, threshold, top_k, strict, rule, margin)
            result.fallback = True
    result.feedback = log
    result.confirmed = [texts[i] for i in positives]
    return result
