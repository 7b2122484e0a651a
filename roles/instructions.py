"""Instruction following (elsciRL's feature, with ground truth): :func:`prepare_instructions`
runs an ``instructions:`` block (:class:`InstructionsConfig`) to an :class:`InstructionPlan`;
:func:`follow_rate` measures a trained agent; the shipped maze set and its ground truth
(:func:`load_instruction_set`, :func:`truth_cells`). See docs/instructions.md."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..agents.base import parse_config
from ..environments import language_for
from ..environments.maze import MAZE_LAYOUTS
from ..environments.rendering import canvas, fill_disk, fill_rect, write_png
from ..errors import checked
from .backends import RoleCounters
from .instruction_chain import (
    Count,
    InstructionFollowing,
    SubGoal,
    cell_check,
    check_instruction,
    make_chain,
)
from .instruction_search import (
    DEFAULT_MARGIN,
    DEFAULT_PER_ROUND,
    DEFAULT_RULE,
    DEFAULT_THRESHOLD,
    DEFAULT_TOP_K,
    MAX_ROUNDS,
    Exploration,
    LLMFeedback,
    Match,
    SimulatedFeedback,
    explore,
    refine,
    wrapper_of,
)

Cell = tuple[int, int]
MAX_EXPLORATION_EPISODES = 100_000
MAX_EXPLORATION_STEPS = 1_000_000
MAX_MATCHES = 10_000
"""Upper bounds of the instruction block's counts (``top_k`` and ``per_round`` share
``MAX_MATCHES``): a typo such as ``exploration_episodes: 1000000000000`` fails when the
experiment file is checked, not hours into a run."""


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


#: Fill colour of sub-goal 1, 2, ... (cycled).
SUBGOAL_COLOURS = ((66, 133, 244), (244, 160, 0), (171, 71, 188), (0, 172, 193),
                   (124, 179, 66), (239, 83, 80))


def match_scores(matched_cells: set[tuple[int, int]], truth: set[tuple[int, int]]
                 ) -> dict[str, float]:
    """Precision and recall of matched cells against true cells, and ``hit`` (any overlap)."""
    overlap = len(matched_cells & truth)
    return {"precision": overlap / len(matched_cells) if matched_cells else 0.0,
            "recall": overlap / len(truth) if truth else 0.0,
            "hit": float(overlap > 0)}


@checked
def follow_rate(agent: Any, env: Any, episodes: Count = 10, seed: int = 0,
                truth: Sequence[Sequence[Sequence[int]]] | None = None) -> dict[str, float]:
    """Greedy episodes of ``agent`` on ``env`` (an :class:`InstructionFollowing`
    environment): ``rate`` (chain done by matched states), ``truth_rate`` (true cells of every
    sub-goal visited in order; with ``truth``, mazes), ``env_success`` and ``mean_length``."""
    wrapper = wrapper_of(env, InstructionFollowing)
    if wrapper is None:
        raise ValueError("follow_rate needs an InstructionFollowing environment (plan.wrap(env))")
    targets = None if truth is None else [{(int(r), int(c)) for r, c in cells}
                                          for cells in truth]
    if targets is not None and len(targets) != len(wrapper.chain):
        raise ValueError(f"truth has {len(targets)} cell sets for a chain of "
                         f"{len(wrapper.chain)}")
    base = wrapper.unwrapped
    if hasattr(agent, "bind"):
        agent.bind(env)
    done = truth_done = success = 0
    lengths = []
    for n in range(episodes):
        obs, info = env.reset(seed=seed if n == 0 else None)
        k = 0

        def advance(k: int) -> int:
            while targets is not None and k < len(targets) and tuple(base.cell) in targets[k]:
                k += 1
            return k

        k = advance(k)
        length = 0
        while True:
            action = agent.act(agent.observe(obs, info), info.get("legal_moves"), False)
            obs, _, terminated, truncated, info = env.step(action)
            length += 1
            k = advance(k)
            if terminated or truncated:
                break
        done += bool(info.get("instruction_done"))
        truth_done += targets is not None and k == len(targets)
        success += bool(info.get("env_success", info.get("is_success", False)))
        lengths.append(length)
    out = {"episodes": episodes, "rate": done / episodes, "env_success": success / episodes,
           "mean_length": float(np.mean(lengths))}
    if targets is not None:
        out["truth_rate"] = truth_done / episodes
    return out


def match_picture(maze: Any, matched: Sequence[set[tuple[int, int]]],
                  truth: Sequence[set[tuple[int, int]]] | None = None,
                  path: str | Path | None = None, cell_pixels: int = 32) -> np.ndarray:
    """The maze with each sub-goal's matched cells filled in its colour (numbered by dots) and its
    true cells framed; the RGB array, also written as a PNG when ``path`` is given."""
    size = int(cell_pixels)
    grid = np.asarray(maze.grid)
    height, width = grid.shape
    image = canvas(height * size, width * size, (250, 250, 250))
    for r in range(height):
        for c in range(width):
            colour = (60, 60, 70) if grid[r, c] else (235, 235, 235)
            fill_rect(image, r * size, c * size, (r + 1) * size, (c + 1) * size, colour)
    gr, gc = maze.goal
    fill_rect(image, gr * size, gc * size, (gr + 1) * size, (gc + 1) * size, (70, 180, 80))
    fill_rect(image, gr * size + 3, gc * size + 3, (gr + 1) * size - 3, (gc + 1) * size - 3,
              (235, 235, 235))
    for n, cells in enumerate(truth or []):
        colour = SUBGOAL_COLOURS[n % len(SUBGOAL_COLOURS)]
        for r, c in cells:
            fill_rect(image, r * size + 1, c * size + 1, (r + 1) * size - 1, (c + 1) * size - 1,
                      colour)
            fill_rect(image, r * size + 4, c * size + 4, (r + 1) * size - 4, (c + 1) * size - 4,
                      (235, 235, 235))
    owners: dict[tuple[int, int], list[int]] = {}
    for n, cells in enumerate(matched):
        for cell in cells:
            owners.setdefault((int(cell[0]), int(cell[1])), []).append(n)
    inner = size - 12
    for (r, c), subgoals in owners.items():  # a cell matched by several: one stripe each
        width = inner / len(subgoals)
        for s, n in enumerate(subgoals):
            left = c * size + 6 + s * width
            fill_rect(image, r * size + 6, left, (r + 1) * size - 6, left + width,
                      SUBGOAL_COLOURS[n % len(SUBGOAL_COLOURS)])
            for dot in range(n + 1):  # sub-goal n + 1 has n + 1 white dots
                fill_disk(image, r * size + 9 + 3 * (dot // 3), left + 3 + 3 * (dot % 3), 1.1,
                          (255, 255, 255))
    if path is not None:
        write_png(path, image)
    return image


@dataclass(frozen=True)
class SubGoalTruth:
    """One sub-goal: its text, its ground-truth rule and the cells written by hand."""

    text: str
    rule: dict[str, Any]
    cells: tuple[Cell, ...]

    def derived(self, maze: str) -> list[Cell]:
        """The cells the rule gives on the named layout."""
        layout = MAZE_LAYOUTS[maze]
        return truth_cells(self.rule, layout.grid(), layout.start, layout.goal)


@dataclass(frozen=True)
class InstructionItem:
    """One entry of an instruction set (docs/instructions.md)."""

    id: str
    maze: str
    style: str
    steps: tuple[SubGoalTruth, ...]
    task: str | None = None

    @property
    def chain(self) -> tuple[str, ...]:
        return tuple(step.text for step in self.steps)

    @property
    def truth(self) -> list[set[Cell]]:
        """The cells of each step (the hand-written ones)."""
        return [set(step.cells) for step in self.steps]


def shipped_set_path() -> Path:
    """The path of the shipped maze instruction set."""
    return Path(str(resources.files("langadapt.roles") / "data" / "maze_instructions.yaml"))


def _cells(value: Any, where: str) -> tuple[Cell, ...]:
    try:
        cells = tuple((int(r), int(c)) for r, c in value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: cells {value!r}: expected a list of [row, col]") from None
    if not cells:
        raise ValueError(f"{where}: cells is empty; expected at least one [row, col]")
    return cells


def load_instruction_set(path: str | Path | None = None,
                         mazes: tuple[str, ...] | None = None) -> list[InstructionItem]:
    """The entries of an instruction-set YAML file (default: the shipped one, read once per
    process), optionally only those on the named ``mazes``. ValueError naming the entry for a
    malformed one."""
    items = _read_set(Path(path) if path is not None else shipped_set_path())
    return [item for item in items if mazes is None or item.maze in mazes]


@functools.lru_cache(maxsize=8)
def _read_set(source: Path) -> tuple[InstructionItem, ...]:
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{source}: expected a list of instruction entries")
    items, seen = [], set()
    for n, entry in enumerate(data):
        where = f"{source.name} entry {n} ({entry.get('id') if isinstance(entry, dict) else '?'})"
        if not isinstance(entry, dict) or not isinstance(entry.get("steps"), list):
            raise ValueError(f"{where}: expected a mapping with id, maze, steps")
        if entry.get("maze") not in MAZE_LAYOUTS:
            raise ValueError(f"{where}: maze {entry.get('maze')!r}; expected one of "
                             f"{list(MAZE_LAYOUTS)}")
        if entry.get("id") in seen:
            raise ValueError(f"{where}: the id is used twice")
        seen.add(entry.get("id"))
        steps = []
        for k, step in enumerate(entry["steps"]):
            if not isinstance(step, dict):
                raise ValueError(f"{where}: step {k} is not a mapping of text, truth, cells")
            steps.append(SubGoalTruth(check_instruction(step.get("text"), f"{where} step {k}"),
                                      dict(step.get("truth") or {"rule": "cells",
                                                                 "cells": step.get("cells")}),
                                      _cells(step.get("cells"), f"{where} step {k}")))
        if not steps:
            raise ValueError(f"{where}: steps is empty")
        items.append(InstructionItem(str(entry["id"]), entry["maze"],
                                     str(entry.get("style", "place")), tuple(steps),
                                     entry.get("task")))
    return tuple(items)


#: Corner names -> which end of (rows, cols) they are at (0: first, 1: last).
CORNERS: dict[str, tuple[int, int]] = {
    "top_left": (0, 0), "top_right": (0, 1), "bottom_left": (1, 0), "bottom_right": (1, 1),
}
RULES = ("corner", "dead_end", "junction", "next_to_goal", "offset_from_goal", "goal", "start",
         "cells")


def _free(grid: np.ndarray) -> list[Cell]:
    height, width = grid.shape
    return [(r, c) for r in range(height) for c in range(width) if grid[r, c] == 0]


def _orthogonal_free(grid: np.ndarray, cell: Cell) -> int:
    height, width = grid.shape
    r, c = cell
    return sum(1 for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0))
               if 0 <= r + dr < height and 0 <= c + dc < width and grid[r + dr, c + dc] == 0)


def dead_ends(grid: np.ndarray) -> list[Cell]:
    """Free cells with exactly one free orthogonal neighbour, row-major."""
    return [cell for cell in _free(grid) if _orthogonal_free(grid, cell) == 1]


def junctions(grid: np.ndarray) -> list[Cell]:
    """Free cells with three or more free orthogonal neighbours, row-major."""
    return [cell for cell in _free(grid) if _orthogonal_free(grid, cell) >= 3]


def _nearest(grid: np.ndarray, cells: Iterable[Cell], which: str) -> list[Cell]:
    if which not in CORNERS:
        raise ValueError(f"corner {which!r}: expected one of {sorted(CORNERS)}")
    height, width = grid.shape
    end_r, end_c = CORNERS[which]
    point = (0 if end_r == 0 else height - 1, 0 if end_c == 0 else width - 1)
    cells = list(cells)
    if not cells:
        return []
    dist = [(r - point[0]) ** 2 + (c - point[1]) ** 2 for r, c in cells]
    best = min(dist)
    return [cell for cell, d in zip(cells, dist, strict=True) if d - best < 1e-9]


def truth_cells(rule: Mapping[str, Any], grid: Any, start: Cell, goal: Cell) -> list[Cell]:
    """The cells of ``rule`` (docs/instructions.md) on a layout, row-major; ValueError for
    an unknown rule or a rule that selects no cell."""
    grid = np.asarray(grid)
    if not isinstance(rule, Mapping) or rule.get("rule") not in RULES:
        raise ValueError(f"ground-truth rule {rule!r}: expected a mapping with rule one of "
                         f"{list(RULES)}")
    kind = rule["rule"]
    goal, start = (int(goal[0]), int(goal[1])), (int(start[0]), int(start[1]))
    free = set(_free(grid))
    if kind == "corner":
        cells = _nearest(grid, sorted(free), str(rule.get("which")))
    elif kind in ("dead_end", "junction"):
        cells = dead_ends(grid) if kind == "dead_end" else junctions(grid)
        if not rule.get("include_goal", False):
            cells = [cell for cell in cells if cell != goal]
        if rule.get("near") is not None:
            cells = _nearest(grid, cells, str(rule["near"]))
    elif kind == "next_to_goal":
        cells = [(goal[0] + dr, goal[1] + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)
                 if (dr, dc) != (0, 0) and (goal[0] + dr, goal[1] + dc) in free]
    elif kind == "offset_from_goal":
        drow, dcol = (int(v) for v in rule["offset"])
        cells = [(goal[0] + drow, goal[1] + dcol)]
    elif kind == "goal":
        cells = [goal]
    elif kind == "start":
        cells = [start]
    else:
        cells = [(int(r), int(c)) for r, c in rule.get("cells", ())]
    bad = [cell for cell in cells if cell not in free]
    if not cells or bad:
        raise ValueError(f"ground-truth rule {dict(rule)!r} selects {cells} on this layout; "
                         f"expected one or more free cells (not free: {bad})")
    return sorted(set(cells))
