"""Re-make the measured figures of docs/instructions.md: instruction matching
(:func:`evaluate_matching`), following (:func:`evaluate_following`) and decomposition
(:func:`evaluate_decomposition`) on an instruction set with ground truth.

``python scripts/instruction_figures.py matching|following|decomposition [key=json ...]``
prints the summary as JSON (e.g. ``matching feedback='"simulated"'``). A script, not part
of the package.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from langadapt import adapters, agents
from langadapt.adapters import LanguageObservation
from langadapt.environments import MazeEnv
from langadapt.roles.backends import RoleCounters
from langadapt.roles.instruction_chain import make_chain
from langadapt.roles.instruction_search import (
    DEFAULT_MARGIN,
    DEFAULT_PER_ROUND,
    DEFAULT_RULE,
    DEFAULT_THRESHOLD,
    DEFAULT_TOP_K,
    MAX_ROUNDS,
    Exploration,
    LLMFeedback,
    SimulatedFeedback,
    explore,
    refine,
)
from langadapt.roles.instructions import (
    InstructionItem,
    follow_rate,
    load_instruction_set,
    match_scores,
    prepare_instructions,
)


def maze_exploration(maze: str, episodes: int = 100, seed: int = 0,
                     language: dict[str, Any] | None = None, **env_params: Any) -> Exploration:
    """Random exploration of a maze layout through the rule-language adapter."""
    env = MazeEnv(maze, **env_params)
    adapter = adapters.make("language", env, describer_options=dict(language or {}))
    return explore(LanguageObservation(env, adapter), episodes=episodes, seed=seed)


def evaluate_matching(items: Sequence[InstructionItem] | None = None, feedback: str = "none",
                      rule: str = DEFAULT_RULE, threshold: float = DEFAULT_THRESHOLD,
                      top_k: int = DEFAULT_TOP_K, rounds: int = MAX_ROUNDS,
                      per_round: int = DEFAULT_PER_ROUND, episodes: int = 100, seed: int = 0,
                      backend: Any = "llamacpp", styles: Sequence[str] | None = None,
                      explorations: dict[str, Exploration] | None = None,
                      margin: float | None = DEFAULT_MARGIN) -> dict[str, Any]:
    """Matching figures on an instruction set (docs/instructions.md). ``feedback``:
    ``none``, ``simulated`` (the set's cells) or ``llm`` (``backend`` judges). ``styles``:
    only these styles (``place``, ``worded``). ``explorations``: maze name -> a ready
    :class:`Exploration` (filled in and reused across calls when given a dict)."""
    if feedback not in ("none", "simulated", "llm"):
        raise ValueError(f"feedback={feedback!r}: expected none, simulated or llm")
    items = list(items) if items is not None else load_instruction_set()
    explorations = explorations if explorations is not None else {}
    llm = LLMFeedback(backend) if feedback == "llm" else None
    started = time.perf_counter()
    rows, seen = [], set()
    for item in items:
        if styles is not None and item.style not in styles:
            continue
        if item.maze not in explorations:
            explorations[item.maze] = maze_exploration(item.maze, episodes, seed)
        exploration = explorations[item.maze]
        for step in item.steps:
            if (item.maze, step.text) in seen:
                continue
            seen.add((item.maze, step.text))
            truth = set(step.cells)
            source = (SimulatedFeedback(truth) if feedback == "simulated" else llm)
            found = refine(step.text, exploration, source, rule=rule,
                           rounds=rounds if source is not None else 0, per_round=per_round,
                           threshold=threshold, top_k=top_k, margin=margin)
            index = exploration.index()
            cells = exploration.cells([index[t] for t in found.texts])
            visited = {cell for cell in truth if cell in exploration.cells(range(len(
                exploration.texts)))}
            rows.append({"maze": item.maze, "style": item.style, "text": step.text,
                         "truth": sorted(truth), "matched": sorted(cells),
                         "fallback": found.fallback, "best_score": round(found.best_score, 4),
                         "labels": sum(len(r) for r in found.feedback),
                         "truth_visited": len(visited) / len(truth),
                         **match_scores(cells, truth)})
    summary = _summary(rows)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    if llm is not None:
        summary.update({k: v for k, v in llm.stats().items() if k.startswith("llm_")})
    return {"rows": rows, "summary": summary,
            "settings": {"feedback": feedback, "rule": rule, "threshold": threshold,
                         "top_k": top_k, "margin": margin, "rounds": rounds, "per_round": per_round,
                         "episodes": episodes, "seed": seed}}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(values: list[float]) -> float:
        return round(float(np.mean(values)), 3) if values else float("nan")

    out: dict[str, Any] = {"subgoals": len(rows)}
    for style in (None, "place", "worded"):
        part = [r for r in rows if style is None or r["style"] == style]
        suffix = "" if style is None else f"_{style}"
        out[f"precision{suffix}"] = mean([r["precision"] for r in part])
        out[f"recall{suffix}"] = mean([r["recall"] for r in part])
        out[f"hit{suffix}"] = mean([r["hit"] for r in part])
    wrong = [r for r in rows if r["hit"] == 0]
    right = [r for r in rows if r["hit"] > 0]
    out["fallback"] = mean([float(r["fallback"]) for r in rows])
    out["flagged_when_wrong"] = mean([float(r["fallback"]) for r in wrong])
    out["flagged_when_right"] = mean([float(r["fallback"]) for r in right])
    out["labels_per_subgoal"] = mean([r["labels"] for r in rows])
    return out


def evaluate_following(items: Sequence[InstructionItem] | None = None,
                       feedback: str = "simulated", form: str = "instruction",
                       reward_from: str = "match", episodes: int = 300,
                       seeds: Sequence[int] = (0,), observe: bool = True,
                       eval_episodes: int = 3, chains_only: bool = True,
                       max_steps: int = 100, **instructions: Any) -> dict[str, Any]:
    """Instructed Q-learning on the set's chains (docs/instructions.md). ``observe``:
    the wrapper shows the agent the current sub-goal (False: elsciRL's setting, the chain
    index hidden). ``instructions``: more fields of the ``instructions:`` block."""
    items = [i for i in (items if items is not None else load_instruction_set())
             if len(i.steps) > 1 or not chains_only]
    shared: dict[str, Any] = {}
    rows = []
    started = time.perf_counter()
    for item in items:
        if item.maze not in shared:
            shared[item.maze] = adapters.make("language", MazeEnv(item.maze))
        for seed in seeds:
            def env(maze: str = item.maze, adapter: Any = shared[item.maze]) -> Any:
                return LanguageObservation(MazeEnv(maze, max_steps=max_steps), adapter)

            plan = prepare_instructions(
                {"chain": list(item.chain), "truth": [list(map(list, s.cells))
                                                      for s in item.steps],
                 "feedback": feedback, "form": form, "reward_from": reward_from,
                 "gamma": 0.95, **instructions}, env(), seed=seed)
            options = {} if observe else {"observe_index": False, "describe_subgoal": False}
            train_env = plan.wrap(env(), **options)
            agent = agents.make_agent(
                "qlearning", train_env.observation_space, train_env.action_space, seed=seed,
                alpha=0.5, gamma=0.95, epsilon_decay=float(0.05 ** (2.0 / episodes)))
            agents.train(agent, train_env, episodes=episodes, seed=seed, progress=False)
            rate = follow_rate(agent, plan.wrap(env(), pay=False, **options),
                               episodes=eval_episodes, seed=seed + 1000,
                               truth=[s.cells for s in item.steps])
            report = plan.report()
            rows.append({"id": item.id, "seed": seed,
                         "first_success_episode": train_env.first_success_episode,
                         "match_precision": [m["precision"] for m in report["matches"]],
                         **rate})
    return {"rows": rows,
            "summary": {"chains": len(rows),
                        "truth_rate": round(float(np.mean([r["truth_rate"] for r in rows])), 3),
                        "rate": round(float(np.mean([r["rate"] for r in rows])), 3),
                        "seconds": round(time.perf_counter() - started, 1)},
            "settings": {"feedback": feedback, "form": form, "reward_from": reward_from,
                         "episodes": episodes, "seeds": list(seeds), "observe": observe}}


def evaluate_decomposition(items: Sequence[InstructionItem] | None = None,
                           decompose: str = "llm", backend: Any = "llamacpp") -> dict[str, Any]:
    """For every entry with a task sentence: the chain read from it (or the error), whether
    it equals the entry's chain (case and final period ignored), and the LLM calls."""
    items = [i for i in (items if items is not None else load_instruction_set()) if i.task]
    counters = RoleCounters("decompositions")
    rows = []
    for item in items:
        try:
            got: Any = list(make_chain(task=item.task, decompose=decompose, backend=backend,
                                       counters=counters))
        except ValueError as error:
            got = f"error: {error}"
        norm = [t.lower().strip(" .") for t in got] if isinstance(got, list) else None
        rows.append({"id": item.id, "task": item.task, "expected": list(item.chain),
                     "got": got, "exact": norm == [t.lower() for t in item.chain]})
    return {"rows": rows, "summary": {"tasks": len(rows),
                                      "exact": sum(r["exact"] for r in rows),
                                      **counters.as_stats()}}


if __name__ == "__main__":
    what, settings = sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])
    function = {"matching": evaluate_matching, "following": evaluate_following,
                "decomposition": evaluate_decomposition}[what]
    print(json.dumps(function(**{k: json.loads(v) for k, v in settings.items()})["summary"]))
