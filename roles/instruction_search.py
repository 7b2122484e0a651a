"""Search and feedback: :func:`explore` records the descriptions of the states visited
(encoded once), and :func:`match` keeps those scoring ``>= threshold`` within ``margin`` of the
best (at most ``top_k``; ties by text; a weak match flagged ``fallback``); judges (``none``,
:class:`SimulatedFeedback`, :class:`LLMFeedback`) and :func:`refine` with the rules ``probe``
(default), ``sets`` and ``vector`` (elsciRL's) refine a match. See docs/instructions.md."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
from pydantic import Field, Strict

from ..adapters import LanguageObservation
from ..environments import language_for
from ..errors import checked
from ..llm import LLMReplyError, parse_json_reply
from .backends import RoleCounters, make_llm_backend
from .instruction_chain import Cosine, Count

#: Cosine a description must reach to match an instruction (MiniLM, rule descriptions).
DEFAULT_THRESHOLD = 0.5
#: Most descriptions one instruction matches.
DEFAULT_TOP_K = 3
#: Descriptions scoring more than this below the best one are not kept.
DEFAULT_MARGIN = 0.02
#: Scores closer than this are equal (MiniLM vectors differ in the last bits between batches).
TIE = 1e-6


@dataclass
class Exploration:
    """What :func:`explore` saw (docs/instructions.md). ``states[i]``: the distinct raw
    states (tuples of floats) seen with ``texts[i]``; ``traces[e]``: the text indices episode
    ``e`` visited, in order (its reset state first)."""

    texts: list[str]
    vectors: np.ndarray
    states: list[list[tuple[float, ...]]]
    visits: list[int]
    traces: list[list[int]]
    cost: dict[str, float]
    encode: Callable[[list[str]], np.ndarray] | None = field(default=None, repr=False)
    checks: dict[int, set[int]] = field(default_factory=dict, repr=False)

    def index(self) -> dict[str, int]:
        """Text -> its index."""
        return {text: i for i, text in enumerate(self.texts)}

    def cells(self, indices: Sequence[int]) -> set[tuple[int, ...]]:
        """The raw states of the given text indices, as int tuples (maze cells)."""
        return {tuple(int(round(v)) for v in state) for i in indices for state in self.states[i]}

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        """L2-normalised vectors of ``texts`` with the exploration's encoder (cached)."""
        if self.encode is None:
            raise ValueError("this Exploration has no encoder (built from data); pass one")
        return _normalise(self.encode(texts))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: cost and the distinct states (texts, states, visits)."""
        return {"cost": dict(self.cost),
                "states": [{"description": t, "states": [list(s) for s in st], "visits": v}
                           for t, st, v in zip(self.texts, self.states, self.visits,
                                               strict=True)]}


@dataclass
class Match:
    """An instruction's matched descriptions, best first, with their scores.

    ``fallback``: no description reached the threshold, so only the best one is kept.
    ``feedback``: the rounds of feedback, each a list of ``{"description", "satisfied",
    "reason"}``; ``confirmed``: descriptions feedback said satisfy the instruction."""

    instruction: str
    texts: list[str]
    scores: list[float]
    fallback: bool
    best_score: float
    threshold: float
    top_k: int
    feedback: list[list[dict[str, Any]]] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)
    rule: str = "none"

    def as_dict(self) -> dict[str, Any]:
        return {"instruction": self.instruction, "matched": list(self.texts),
                "scores": [round(float(s), 6) for s in self.scores], "fallback": self.fallback,
                "best_score": round(float(self.best_score), 6), "threshold": self.threshold,
                "top_k": self.top_k, "rule": self.rule, "confirmed": list(self.confirmed),
                "feedback": self.feedback}


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def _find_adapter(env: gym.Env) -> Any:
    try:
        return env.get_wrapper_attr("adapter")
    except AttributeError:
        return None


def _state_reader(env: gym.Env) -> Callable[[Any], tuple[float, ...] | None]:
    try:
        state_of = language_for(env).state_of
        base = env.unwrapped

        def read(obs: Any) -> tuple[float, ...] | None:
            return tuple(float(v) for v in np.asarray(state_of(base)).ravel())
    except ValueError:  # no language spec: a small raw observation stands for the state
        def read(obs: Any) -> tuple[float, ...] | None:
            array = np.asarray(obs, dtype=np.float64).ravel()
            return tuple(float(v) for v in array) if array.size <= 16 else None
    return read


def wrapper_of(env: Any, kind: type) -> Any:
    """The first wrapper of class ``kind`` in ``env``'s chain (None when there is none)."""
    while env is not None and not isinstance(env, kind):
        env = getattr(env, "env", None)
    return env


@checked
def explore(env: gym.Env, episodes: Count = 100, agent: Any = None, seed: int = 0,
            encoder: Any = None, max_steps: Count | None = None,
            checks: Sequence[Callable[[Any], bool]] = ()) -> Exploration:
    """Run ``episodes`` exploration episodes on ``env`` (``agent`` exploring, never learning, or
    random legal moves from ``seed``; each cut at ``max_steps``) and record the descriptions
    seen, encoded by ``encoder`` (default: the environment's adapter, in one batch);
    ``checks`` are evaluated on the unwrapped environment in every state visited."""
    encoder = encoder if encoder is not None else _find_adapter(env)
    if encoder is None or not callable(getattr(encoder, "encode_many", None)):
        raise ValueError("explore() needs an encoder: wrap the environment in "
                         "LanguageObservation with a text adapter, or pass encoder=")
    before = _encoder_calls(encoder)
    started = time.perf_counter()
    wrapper = wrapper_of(env, LanguageObservation) if agent is None else None
    batch = wrapper is not None and callable(getattr(wrapper.adapter, "prerender", None))
    runner = _batched_episodes(wrapper) if batch else _stepped_episodes(env, agent)
    read_state = _state_reader(env)
    base = env.unwrapped
    checks = list(checks)
    hits: list[set[int]] = [set() for _ in checks]
    rng = np.random.default_rng(seed)
    keys: dict[Any, int] = {}
    inputs: list[Any] = []
    texts_of: list[str | None] = []
    states: list[dict[tuple[float, ...], None]] = []
    visits: list[int] = []
    traces: list[list[int]] = []
    steps = 0
    for episode in range(episodes):
        trace: list[int] = []
        for key, item, text, obs in runner(seed if episode == 0 else None, rng, max_steps):
            i = keys.get(key)
            if i is None:
                i = keys[key] = len(inputs)
                inputs.append(item)
                texts_of.append(text)
                states.append({})
                visits.append(0)
            visits[i] += 1
            state = read_state(obs)
            if state is not None:
                states[i][state] = None
            for check, found in zip(checks, hits, strict=True):
                if check(base):
                    found.add(i)
            trace.append(i)
        steps += len(trace) - 1
        traces.append(trace)
    if batch:
        wrapper.adapter.prerender(inputs, progress=False)
        texts_of = wrapper.adapter.describe_many(inputs)
    # inputs that share a description (a history the text ignores) become one state
    index: dict[str, int] = {}
    remap = [index.setdefault(text, len(index)) for text in texts_of]
    texts = list(index)
    merged_states: list[dict[tuple[float, ...], None]] = [{} for _ in texts]
    merged_visits = [0] * len(texts)
    for i, j in enumerate(remap):
        merged_states[j].update(states[i])
        merged_visits[j] += visits[i]
    traces = [[remap[i] for i in trace] for trace in traces]
    vectors = _normalise(encoder.encode_many(texts))
    cost = {"episodes": episodes, "steps": steps,
            "seconds": round(time.perf_counter() - started, 4),
            "encoder_calls": _encoder_calls(encoder) - before, "distinct_states": len(texts)}
    return Exploration(texts, vectors, [list(s) for s in merged_states], merged_visits, traces,
                       cost, encoder.encode_many,
                       {id(check): {remap[i] for i in found}
                        for check, found in zip(checks, hits, strict=True)})


def _random_move(info: dict[str, Any], env: gym.Env, rng: np.random.Generator) -> int:
    legal = info.get("legal_moves")
    moves = list(legal) if legal else list(range(int(env.action_space.n)))
    return int(moves[int(rng.integers(len(moves)))])


def _batched_episodes(wrapper: Any) -> Callable[..., Any]:
    """Episodes on the environment under ``wrapper``, yielding (key, adapter input, None,
    obs) per state; the adapter describes the inputs later."""
    inner, adapter = wrapper.env, wrapper.adapter
    all_moves = list(range(int(inner.action_space.n)))
    keep = wrapper.history_length

    def run(seed: int | None, rng: np.random.Generator, max_steps: int | None) -> Any:
        obs, info = inner.reset(seed=seed)
        history: list[tuple[Any, int]] = []
        n, done = 0, False
        while True:
            legal = info.get("legal_moves")
            legal = list(all_moves if legal is None else legal)
            shown = tuple(history if keep is None else history[len(history) - keep:] if keep
                          else ())
            hkey = adapter.history_key(shown) if adapter.uses_history else None
            yield ((np.asarray(obs).tobytes(), tuple(legal), hkey),
                   (np.array(obs, copy=True), legal, shown), None, obs)
            if done or (max_steps is not None and n >= max_steps):
                return
            action = _random_move(info, inner, rng)
            previous = obs
            obs, _, terminated, truncated, info = inner.step(action)
            history.append((previous, action))
            done = terminated or truncated
            n += 1

    return run


def _stepped_episodes(env: gym.Env, agent: Any) -> Callable[..., Any]:
    """Episodes on ``env`` itself (random moves or ``agent``), yielding (key, None, text,
    obs) per state from ``info["description"]``."""
    if agent is not None and callable(getattr(agent, "bind", None)):
        agent.bind(env)

    def text_of(info: dict[str, Any]) -> str:
        text = info.get("description")
        if not isinstance(text, str):
            raise ValueError('explore() needs info["description"]: wrap the environment in '
                             "LanguageObservation with a text adapter")
        return text

    def run(seed: int | None, rng: np.random.Generator, max_steps: int | None) -> Any:
        obs, info = env.reset(seed=seed)
        n, done = 0, False
        while True:
            text = text_of(info)
            yield text, None, text, obs
            if done or (max_steps is not None and n >= max_steps):
                return
            if agent is None:
                action = _random_move(info, env, rng)
            else:
                action = int(agent.act(agent.observe(obs, info), info.get("legal_moves"),
                                       True))
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            n += 1

    return run


def _encoder_calls(encoder: Any) -> int:
    stats = getattr(encoder, "stats", None)
    if callable(stats):
        return int(stats().get("encoder_calls", 0))
    return int(getattr(encoder, "calls", 0))


def rank(scores: np.ndarray, texts: Sequence[str]) -> list[int]:
    """Indices by score, best first; scores within :data:`TIE` are ordered by text."""
    rounded = np.round(np.asarray(scores, dtype=np.float64) / TIE) * TIE
    return sorted(range(len(texts)), key=lambda i: (-rounded[i], texts[i]))


def select(instruction: str, scores: np.ndarray, texts: Sequence[str], threshold: float,
           top_k: int, strict: bool = False, rule: str = "none",
           margin: float | None = DEFAULT_MARGIN) -> Match:
    """The :class:`Match` of given scores (see :func:`match`)."""
    if not len(texts):
        raise ValueError(f"no states to match instruction {instruction!r} against: the "
                         "exploration saw none")
    order = rank(scores, texts)
    floor = threshold if margin is None else max(threshold, float(scores[order[0]]) - margin)
    kept = [i for i in order if scores[i] >= floor - TIE][:top_k]
    fallback = not kept
    if fallback:
        if strict:
            raise ValueError(
                f"instruction {instruction!r} matches no state above the threshold "
                f"{threshold} (best: {float(scores[order[0]]):.3f}, {texts[order[0]]!r}); "
                "lower the threshold, reword it, or turn strict off to take the best match")
        kept = order[:1]
    return Match(instruction, [texts[i] for i in kept], [float(scores[i]) for i in kept],
                 fallback, float(scores[order[0]]), threshold, top_k, rule=rule)


@checked
def match(instruction: str, exploration: Exploration, threshold: Cosine = DEFAULT_THRESHOLD,
          top_k: Count = DEFAULT_TOP_K, strict: bool = False,
          vector: np.ndarray | None = None, margin: float | None = DEFAULT_MARGIN) -> Match:
    """Match one instruction against the explored descriptions (docs/instructions.md).
    ``vector``: the instruction's vector when already encoded; ``margin=None``: no margin."""
    if vector is None:
        vector = exploration.encode_texts([instruction])[0]
    scores = exploration.vectors @ _normalise(vector)
    return select(instruction, scores, exploration.texts, threshold, top_k, strict,
                  margin=margin)


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
        self.max_tokens = max_tokens
        self.counters = RoleCounters("judgements", "satisfied")

    @cached_property
    def backend(self) -> Any:
        return make_llm_backend(self._spec)

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


@checked
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
