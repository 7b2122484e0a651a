"""BALROG's BabyAI leaderboard, and held-out success by goal type beside it.

:data:`BALROG_BABYAI`: zero-shot success in % over the ``MixedTrainLocal`` level's five goal
types (``num_dists`` 0), as published (balrog-ai/experiments, ``submissions/*/summary.json``,
read 2026-11); per task where the submission gives it. :func:`goals_markdown`: a mixed-goal
folder's held-out success per goal type, each row's goal drawn again from its seed by
langadapt's own level (never anything the folder names). Explained in
``docs/configuration.md`` (the suite report).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import cache
from typing import NamedTuple

import gymnasium
import numpy as np

from ..environments.babyai_goals import GOAL_TYPES, MIXED, SUITE_LEVEL_ID
from .config import ExperimentConfig
from .results import Episode

__all__ = ["BALROG_BABYAI", "Balrog", "episode_goals", "goals_markdown"]


class Balrog(NamedTuple):
    model: str
    date: str
    average: float
    se: float
    episodes_per_task: int
    tasks: tuple[float, float, float, float, float] | None


#: Sorted by average, best first.
BALROG_BABYAI: tuple[Balrog, ...] = (
    Balrog("Claude-3.5-Sonnet (VLM track)", "2024-11-03", 82.0, 5.4, 10,
            (100.0, 100.0, 100.0, 10.0, 100.0)),
    Balrog("Gemini-2.5-Pro-Exp-03-25", "2025-04-25", 80.0, 5.7, 10,
            (100.0, 100.0, 100.0, 0.0, 100.0)),
    Balrog("GPT-4o", "2024-09-24", 77.6, 3.7, 25, None),
    Balrog("Reka-Flash-3", "2025-03-13", 76.0, 6.0, 10, (100.0, 100.0, 100.0, 10.0, 70.0)),
    Balrog("grok-4", "2025-07-13", 76.0, 6.0, 10, (100.0, 60.0, 100.0, 30.0, 90.0)),
    Balrog("DeepSeek-R1", "2024-04-10", 74.0, 6.2, 10, (100.0, 80.0, 100.0, 0.0, 90.0)),
    Balrog("Llama-3.1-70B-Instruct", "2024-09-30", 73.2, 4.0, 25, None),
    Balrog("Llama-3.2-90B-Instruct", "2024-09-30", 72.0, 6.3, 10, None),
    Balrog("Claude-3.5-Sonnet", "2024-11-03", 68.0, 6.6, 10, (80.0, 80.0, 100.0, 0.0, 80.0)),
    Balrog("gemini-2.5-flash", "2025-07-19", 68.0, 6.6, 10, (100.0, 80.0, 100.0, 0.0, 60.0)),
    Balrog("Llama-3.3-70B-Instruct", "2024-12-09", 66.0, 6.7, 10, (90.0, 100.0, 50.0, 0.0, 90.0)),
    Balrog("grok-3", "2025-04-25", 62.0, 6.9, 10, (50.0, 90.0, 100.0, 0.0, 70.0)),
    Balrog("claude-3-5-haiku", "2024-12-09", 52.0, 7.1, 10, (100.0, 50.0, 60.0, 0.0, 50.0)),
    Balrog("GPT-4o-mini", "2024-09-24", 50.4, 4.5, 25, None),
    Balrog("mistral-nemo-instruct", "2024-12-09", 50.0, 7.1, 10, (80.0, 90.0, 40.0, 20.0, 20.0)),
    Balrog("deepseek_R1_distill_qwen32B", "2025-01-26", 48.0, 7.1, 10,
            (90.0, 40.0, 40.0, 0.0, 70.0)),
    Balrog("Llama-3.1-8B-Instruct", "2024-11-01", 36.0, 6.8, 10, (60.0, 70.0, 10.0, 0.0, 40.0)),
    Balrog("microsoft_phi-4", "2025-01-13", 32.0, 6.6, 10, (60.0, 70.0, 20.0, 0.0, 10.0)),
    Balrog("Llama-3.2-3B-Instruct", "2024-10-30", 20.0, 5.7, 10, (70.0, 20.0, 0.0, 0.0, 10.0)),
    Balrog("Qwen2.5-7B-it", "2024-11-15", 14.0, 4.9, 10, (40.0, 20.0, 0.0, 0.0, 10.0)),
    Balrog("Llama-3.2-1B-Instruct", "2024-10-30", 8.0, 3.8, 10, (40.0, 0.0, 0.0, 0.0, 0.0)),
)


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
