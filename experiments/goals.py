"""Held-out success by goal type, for one agent over the five goal types of BALROG's BabyAI
level (``environment.params.goal: mixed``).

Each held-out episode's goal type is the one its seed draws: the level is made with the
folder's parameters (only langadapt's own level, never anything the folder names) and reset
with the seed. The rows of a run's ``final``, ``best`` and ``transfer`` phases were played in
the order of their held-out seeds, so row ``i`` is seed ``first + i``. :func:`goals_markdown`
gives success per goal type and the mean over the five (BALROG's suite mean), per
representation and agent (seeds pooled), beside BALROG's per-task figures.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import cache

import gymnasium
import numpy as np

from ..environments.babyai_goals import GOAL_TYPES, MIXED, SUITE_LEVEL_ID
from .config import ExperimentConfig
from .results import Episode

__all__ = ["goals_markdown", "episode_goals"]


def is_mixed_suite(config: ExperimentConfig) -> bool:
    """Whether ``config`` trains one agent over the suite level's five goal types."""
    return (config.environment.id.removeprefix("langadapt/") == SUITE_LEVEL_ID
            and config.environment.params.get("goal") == MIXED)


@cache
def _goals(params: tuple[tuple[str, object], ...], seeds: range) -> tuple[str, ...]:
    level = gymnasium.make(SUITE_LEVEL_ID, disable_env_checker=True, **dict(params)).unwrapped
    goals = []
    for seed in seeds:
        level.reset(seed=seed)
        goals.append(level.goal)
    return tuple(goals)


def episode_goals(config: ExperimentConfig, phase: str) -> Sequence[str]:
    """The goal type of each held-out episode of ``phase`` (final, best or transfer)."""
    evaluation = config.evaluation
    params = dict(config.environment.params)
    if phase == "transfer":
        params.update(evaluation.transfer.environment_params)
        seeds = evaluation.transfer.heldout_seeds.seeds
    else:
        params.update(evaluation.environment_params)
        seeds = evaluation.heldout_seeds.seeds
    return _goals(tuple(sorted(params.items())), seeds)


def _by_goal(config: ExperimentConfig, episodes: list[Episode], phase: str
             ) -> dict[tuple[str, str], dict[str, list[bool]]]:
    runs: dict[tuple[str, str, int], list[Episode]] = defaultdict(list)
    for e in episodes:
        if e.phase == phase:
            runs[(e.adapter, e.agent, e.seed)].append(e)
    table: dict[tuple[str, str], dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    goals = episode_goals(config, phase) if runs else ()
    for (adapter, agent, _), rows in runs.items():
        for goal, e in zip(goals, rows, strict=False):  # an unfinished run: its rows so far
            table[(adapter, agent)][goal].append(bool(e.success))
    return table


def goals_markdown(config: ExperimentConfig, episodes: list[Episode],
                   balrog: Sequence[tuple[str, dict[str, float]]] = ()) -> str:
    """The by-goal-type tables of a mixed-goal folder ('' for any other folder)."""
    if not is_mixed_suite(config) or config.evaluation.heldout_seeds is None:
        return ""
    out = ["", "## Success by goal type (held-out episodes, %, seeds pooled)", "",
           "| policy | episodes | " + " | ".join(GOAL_TYPES) + " | mean of the five |",
           "|---|---:|" + "---:|" * (len(GOAL_TYPES) + 1)]
    phases = [("final", ""), ("best", " (best)")]
    if config.evaluation.transfer is not None:
        phases.append(("transfer", " — test missions"))
    try:  # the folder's level parameters make the level again: a bad one is a line, no more
        tables = [(label, _by_goal(config, episodes, phase)) for phase, label in phases]
    except (TypeError, ValueError) as error:
        return f"\nNo table by goal type: the level's parameters were refused ({error}).\n"
    for label, table in tables:
        for (adapter, agent), goals in sorted(table.items()):
            rates = [100 * np.mean(goals[g]) if goals[g] else np.nan for g in GOAL_TYPES]
            count = sum(len(goals[g]) for g in GOAL_TYPES)
            cells = " | ".join("–" if np.isnan(r) else f"{r:.1f}" for r in rates)
            mean = "–" if np.isnan(rates).any() else f"{np.mean(rates):.1f}"
            out.append(f"| {adapter} / {agent}{label} | {count} | {cells} | {mean} |")
    for model, tasks in balrog:
        cells = " | ".join(f"{tasks[g]:.1f}" if g in tasks else "–" for g in GOAL_TYPES)
        mean = (f"{np.mean([tasks[g] for g in GOAL_TYPES]):.1f}"
                if all(g in tasks for g in GOAL_TYPES) else "–")
        out.append(f"| BALROG: {model} (zero-shot) | | {cells} | {mean} |")
    return "\n".join(out) + "\n"
