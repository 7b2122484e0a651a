"""The pipeline from an ``instructions:`` block: :class:`InstructionsConfig`,
:func:`prepare_instructions` -> :class:`InstructionPlan` (``wrap``, ``report``, ``picture``).
``env`` must supply ``info["description"]``. See docs/instructions.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...agents.base import parse_config
from ...environments import language_for
from ..counting import RoleCounters
from .data import load_instruction_set
from .feedback import (
    DEFAULT_PER_ROUND,
    DEFAULT_RULE,
    MAX_ROUNDS,
    LLMFeedback,
    SimulatedFeedback,
    refine,
)
from .results import match_picture, match_scores
from .search import (
    DEFAULT_MARGIN,
    DEFAULT_THRESHOLD,
    DEFAULT_TOP_K,
    Exploration,
    Match,
    explore,
)
from .spec import make_chain
from .wrapper import InstructionFollowing, SubGoal, cell_check

MAX_EXPLORATION_EPISODES = 100_000
MAX_EXPLORATION_STEPS = 1_000_000
MAX_MATCHES = 10_000
"""Upper bounds of the instruction block's counts (``top_k`` and ``per_round`` share
``MAX_MATCHES``): a typo such as ``exploration_episodes: 1000000000000`` fails when the
experiment file is checked, not hours into a run."""

__all__ = ["InstructionPlan", "InstructionsConfig", "prepare_instructions"]


class InstructionsConfig(BaseModel):
    """Settings of instruction following (the ``instructions:`` block of an experiment),
    explained in docs/instructions.md. Exactly one of ``instruction``, ``chain``, ``task`` and
    ``set_id``."""

    model_config = ConfigDict(extra="forbid")

    instruction: str | None = None
    chain: list[str] | None = None
    task: str | None = None  # a task sentence broken into a chain (decompose: llm or rules)
    set_id: str | None = None  # an entry of the shipped maze set: its chain and ground truth
    decompose: Literal["llm", "rules"] = "llm"
    truth: list[list[list[int]]] | None = None  # per sub-goal, its cells [[row, col], ...]
    exploration_episodes: int = Field(100, ge=1, le=MAX_EXPLORATION_EPISODES)
    exploration_max_steps: int | None = Field(None, ge=1, le=MAX_EXPLORATION_STEPS)
    threshold: float = Field(DEFAULT_THRESHOLD, ge=-1.0, le=1.0)
    top_k: int = Field(DEFAULT_TOP_K, ge=1, le=MAX_MATCHES)
    margin: float | None = Field(DEFAULT_MARGIN, ge=0.0)
    strict: bool = False
    feedback: Literal["none", "simulated", "llm"] = "none"
    rule: Literal["probe", "sets", "vector"] = DEFAULT_RULE
    rounds: int = Field(MAX_ROUNDS, ge=0, le=MAX_ROUNDS)
    per_round: int = Field(DEFAULT_PER_ROUND, ge=1, le=MAX_MATCHES)
    form: Literal["potential", "instruction"] = "potential"
    reward_from: Literal["match", "truth"] = "match"
    match_on: Literal["description", "state"] = "description"
    bonus: float = Field(1.0, gt=0.0)
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    step_reward: float = 0.0
    backend: str | dict[str, Any] = "llamacpp"

    @field_validator("instruction", "task", "set_id")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty; expected a non-empty sentence")
        return value

    @field_validator("set_id")
    @classmethod
    def _shipped(cls, value: str | None) -> str | None:
        known = [item.id for item in load_instruction_set()]
        if value is not None and value not in known:
            raise ValueError(f"set_id {value!r} is not an entry of the shipped maze set; "
                             f"expected one of {', '.join(known)}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> InstructionsConfig:
        given = [n for n in ("instruction", "chain", "task", "set_id") if getattr(self, n)]
        if len(given) != 1:
            raise ValueError(f"give exactly one of instruction, chain, task and set_id; got "
                             f"{given or 'none'}")
        if self.chain is not None and not self.chain:
            raise ValueError("chain is empty; expected one or more sub-goal sentences")
        needs_truth = self.feedback == "simulated" or self.reward_from == "truth"
        if needs_truth and self.truth is None and self.set_id is None:
            raise ValueError(f"feedback {self.feedback!r} / reward_from {self.reward_from!r} "
                             "needs ground truth: give truth (cells per sub-goal) or set_id")
        return self


class InstructionPlan:
    """The result of :func:`prepare_instructions`: the chain, its matches, the exploration
    and the costs; :meth:`wrap` builds the training wrapper."""

    def __init__(self, config: InstructionsConfig, chain: tuple[str, ...],
                 matches: list[Match], exploration: Exploration,
                 truth: list[set[tuple[int, int]]] | None, counters: RoleCounters,
                 judges: list[Any], maze: Any = None) -> None:
        self.config, self.chain, self.matches = config, chain, matches
        self.exploration, self.truth, self.counters = exploration, truth, counters
        self.judges, self.maze = judges, maze

    def subgoals(self, env: gym.Env | None = None) -> list[SubGoal]:
        """The chain as :class:`SubGoal`s: matched descriptions; with ``match_on: state`` a
        check that the raw state (``state_of`` of ``env``'s language spec) is one explored with
        them; with ``reward_from: truth`` a check of the true cells."""
        if self.config.reward_from == "truth":
            return [SubGoal(text, check=cell_check(cells))
                    for text, cells in zip(self.chain, self.truth or [], strict=True)]
        if self.config.match_on == "description":
            return [SubGoal.of(found) for found in self.matches]
        if env is None:
            raise ValueError("match_on 'state' needs the environment (plan.subgoals(env))")
        state_of = language_for(env).state_of
        index = self.exploration.index()
        goals = []
        for found in self.matches:
            states = {_state_key(s) for t in found.texts for s in self.exploration.states[index[t]]}
            goals.append(SubGoal(found.instruction, check=lambda base, states=states: _state_key(
                state_of(base)) in states))
        return goals

    def wrap(self, env: gym.Env, pay: bool = True, **options: Any) -> InstructionFollowing:
        """``env`` (a LanguageObservation environment) wrapped in
        :class:`InstructionFollowing` with the plan's chain and settings; ``options`` go to
        the wrapper (``observe_index``, ``describe_subgoal``)."""
        c = self.config
        return InstructionFollowing(env, self.subgoals(env), form=c.form, bonus=c.bonus,
                                    gamma=c.gamma, step_reward=c.step_reward, pay=pay,
                                    **options)

    def in_order(self) -> list[bool]:
        """Per sub-goal: whether some exploration episode reached the matched states of every
        sub-goal up to it, in order (False: not seen reachable in this order)."""
        index = self.exploration.index()
        targets = [{index[t] for t in found.texts} for found in self.matches]
        best = 0
        for trace in self.exploration.traces:
            k = 0
            for i in trace:
                while k < len(targets) and i in targets[k]:
                    k += 1
            best = max(best, k)
        return [n < best for n in range(len(targets))]

    def stats(self) -> dict[str, float]:
        """Counters: ``decompositions``, ``judgements`` (feedback verdicts), ``satisfied``
        (verdicts that said yes) and the LLM counters of decomposition and feedback."""
        out = self.counters.as_stats()
        out["judgements"] = out["satisfied"] = 0
        for judge in self.judges:
            for key, value in judge.stats().items():
                out[key] = out.get(key, 0) + value
        return out

    def report(self) -> dict[str, Any]:
        """JSON-ready record of the preparation (the runner writes it to the results)."""
        in_order = self.in_order()
        rows = []
        index = self.exploration.index()
        for n, found in enumerate(self.matches):
            row: dict[str, Any] = {"subgoal": n + 1, **found.as_dict(),
                                   "reached_in_exploration_in_order": in_order[n]}
            cells = self.exploration.cells([index[t] for t in found.texts])
            if self.maze is not None:
                row["matched_cells"] = sorted(cells)
            if self.truth is not None:
                row["truth_cells"] = sorted(self.truth[n])
                row.update(match_scores(cells, self.truth[n]))
            rows.append(row)
        return {"chain": list(self.chain), "settings": self.config.model_dump(),
                "exploration": dict(self.exploration.cost), "matches": rows,
                "unreachable": [n + 1 for n, ok in enumerate(in_order) if not ok],
                "llm": self.stats()}

    def picture(self, path: str | Path | None = None) -> Any:
        """A picture of matched vs true cells (mazes only; see :func:`match_picture`); written
        as PNG when ``path`` is given."""
        if self.maze is None:
            raise ValueError("picture() draws mazes only; this environment is not a MazeEnv")
        index = self.exploration.index()
        matched = [self.exploration.cells([index[t] for t in found.texts])
                   for found in self.matches]
        return match_picture(self.maze, matched, self.truth, path)


def _state_key(state: Any) -> tuple[float, ...]:
    return tuple(round(float(v), 6) for v in np.asarray(state, dtype=np.float64).ravel())


def _truth_of(config: InstructionsConfig) -> tuple[list[str] | None, Any]:
    if config.set_id is None:
        return None, config.truth
    item = next(i for i in load_instruction_set() if i.id == config.set_id)  # the config checked it
    return list(item.chain), [list(map(list, step.cells)) for step in item.steps]


def prepare_instructions(config: InstructionsConfig | dict[str, Any], env: gym.Env,
                         seed: int = 0, agent: Any = None, backend: Any = None
                         ) -> InstructionPlan:
    """Read the instructions, explore ``env``, match every sub-goal and refine the matches
    with the configured feedback. ``agent``: explores instead of random moves; ``backend``:
    an LLM backend object to use instead of ``config.backend``."""
    config = parse_config(config, InstructionsConfig)
    counters = RoleCounters("decompositions")
    set_chain, truth_cells = _truth_of(config)
    llm = backend if backend is not None else config.backend
    if set_chain is not None:
        chain = make_chain(set_chain)
    elif config.task is not None:
        chain = make_chain(task=config.task, backend=llm, decompose=config.decompose,
                           counters=counters)
    else:
        chain = make_chain(config.instruction if config.instruction is not None
                           else config.chain)
    truth = None
    if truth_cells is not None:
        if len(truth_cells) != len(chain):
            raise ValueError(f"truth has {len(truth_cells)} cell lists for a chain of "
                             f"{len(chain)} sub-goals {list(chain)}; give one per sub-goal")
        truth = [{(int(r), int(c)) for r, c in cells} for cells in truth_cells]
    exploration = explore(env, config.exploration_episodes, agent=agent, seed=seed,
                          max_steps=config.exploration_max_steps)
    vectors = exploration.encode_texts(list(chain))
    shared: Any = LLMFeedback(llm) if config.feedback == "llm" else None
    judges = []
    matches = []
    for n, text in enumerate(chain):
        judge = SimulatedFeedback(truth[n]) if config.feedback == "simulated" else shared
        if judge is not None and judge not in judges:
            judges.append(judge)
        matches.append(refine(text, exploration, judge, rule=config.rule,
                              rounds=config.rounds if judge is not None else 0,
                              per_round=config.per_round, threshold=config.threshold,
                              top_k=config.top_k, vector=vectors[n], strict=config.strict,
                              margin=config.margin))
    base = env.unwrapped
    maze = base if hasattr(base, "grid") and hasattr(base, "goal") else None
    return InstructionPlan(config, chain, matches, exploration, truth, counters, judges, maze)
