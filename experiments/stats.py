"""The numbers of a report, from rows and run records (no file written here):
:func:`summarise` (one :class:`SummaryRow` per adapter x agent), the few-seed statistics
through ``rliable``, the optional extra ``stats`` (:func:`require_rliable`), every bootstrap
seeded; BALROG's published BabyAI leaderboard (:data:`BALROG_BABYAI`) and held-out success
per goal type (:func:`goals_markdown`). What each number means: docs/configuration.md.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium
import numpy as np
from scipy import stats

from ..environments.minigrid import GOAL_TYPES, MIXED, SUITE_LEVEL_ID
from .llm_rows import Fallbacks, added, fallback_share, role_fallbacks
from .results import Episode, read_run_record, runs_of
from .schema import ConfigError, ExperimentConfig

STATS_HINT = "pip install 'langadapt[stats]'"
BOOTSTRAP_REPS = 2_000
"""Bootstrap resamples per estimate (rliable's own default for profiles)."""
FEW_SEEDS = 5
"""Fewer seeds than this: the summary says its intervals are rough."""


@dataclass
class SummaryRow:
    adapter: str
    agent: str
    seeds: int
    final_return_mean: float
    final_return_low: float
    final_return_high: float
    final_success_rate: float
    best_return_mean: float
    best_return_low: float
    best_return_high: float
    best_success_rate: float
    best_chosen_at: float
    episodes_to_threshold: float
    steps_to_threshold: float
    seeds_reaching_threshold: int
    train_wall_time_s: float
    llm_calls: int
    cache_hits: int
    llm_fallbacks: int
    llm_seconds: float = math.nan
    cpu_seconds: float = math.nan
    llm_fallback_share: float = math.nan


SUMMARY_COLUMNS = tuple(field.name for field in fields(SummaryRow))
"""Columns of ``summary.csv``: the fields of :class:`SummaryRow`, in order."""


@dataclass(frozen=True)
class Cost:
    """LLM calls, seconds waiting for LLM answers and CPU seconds, summed over runs (nan:
    some run's figure is unknown, never zero), and the LLM roles' fallbacks
    (:mod:`.llm_rows`)."""

    llm_calls: float = 0.0
    llm_seconds: float = 0.0
    cpu_seconds: float = 0.0
    fallbacks: Fallbacks = field(default_factory=dict)
    descriptions: tuple[tuple[int, int], ...] = ()
    """Per run with an LLM adapter: (states it described, distinct descriptions)."""

    @classmethod
    def unknown(cls) -> Cost:
        return cls(math.nan, math.nan, math.nan)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.llm_calls + other.llm_calls, self.llm_seconds + other.llm_seconds,
                    self.cpu_seconds + other.cpu_seconds, added(self.fallbacks, other.fallbacks),
                    self.descriptions + other.descriptions)

    def cells(self) -> str:
        """``calls | LLM s | CPU s`` for a markdown table (empty where unknown)."""
        calls = "" if math.isnan(self.llm_calls) else f"{self.llm_calls:.0f}"
        return " | ".join([calls, *("" if math.isnan(v) else f"{v:.1f}"
                                    for v in (self.llm_seconds, self.cpu_seconds))])


def run_cost(record: dict[str, Any] | None) -> Cost:
    """What one ``done.json`` records: its adapter's and LLM roles' calls and seconds, and
    the CPU seconds of the process that ran it."""
    if record is None:
        return Cost.unknown()
    roles = record.get("llm_roles")
    sources = [record.get("adapter_stats"), *(roles.values() if isinstance(roles, dict) else [])]
    sources = [s for s in sources if isinstance(s, dict)]
    calls, llm = (sum(_number(s.get(key)) for s in sources)
                  for key in ("llm_calls", "llm_seconds"))
    cpu = record.get("cpu_seconds")
    counts = record.get("adapter_descriptions")
    described = ((int(_number(counts.get("states"))), int(_number(counts.get("descriptions")))),
                 ) if isinstance(counts, dict) and counts.get("states") else ()
    return Cost(calls, llm, _number(cpu) if cpu is not None else math.nan,
                role_fallbacks(record), described)


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    return float(value) if isinstance(value, int | float) else math.nan


def folder_costs(config: ExperimentConfig, folder: Path) -> dict[tuple[str, str], Cost]:
    """``{(adapter, agent): Cost}`` of the finished runs of ``config`` in ``folder``."""
    costs: dict[tuple[str, str], Cost] = {}
    for run in runs_of(config):
        done = folder / "runs" / run.key / "done.json"
        if done.is_file():  # a failed run is not in the table either
            key = (run.adapter.name, run.agent.name)
            costs[key] = costs.get(key, Cost()) + run_cost(read_run_record(done))
    return costs


def mean_and_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% percentile-bootstrap interval, inside the values' range (nan with
    fewer than 2 values)."""
    if not values:
        return math.nan, math.nan, math.nan
    array = np.asarray(values, dtype=float)
    mean = float(array.mean())
    if len(array) < 2:
        return mean, math.nan, math.nan
    if np.all(array == array[0]):
        return float(array[0]), float(array[0]), float(array[0])
    interval = stats.bootstrap(
        (array,), np.mean, method="percentile", n_resamples=2000, rng=np.random.default_rng(0)
    ).confidence_interval
    # (a mean of resampled values can exceed the largest by a rounding error)
    low, high = max(float(interval.low), array.min()), min(float(interval.high), array.max())
    return mean, float(low), float(high)


def median_to_threshold(per_seed: list[int | None]) -> float:
    """Median over seeds, a seed that never reached the threshold (None) counted as never:
    nan when half or more never did."""
    if not per_seed:
        return math.nan
    median = float(np.median([math.inf if v is None else float(v) for v in per_seed]))
    return math.nan if math.isinf(median) else median


def _reached(returns: list[float], successes: list[bool], threshold: float | None) -> bool:
    return all(successes) if threshold is None else float(np.mean(returns)) >= threshold


def episodes_to_threshold(episodes: list[Episode], threshold: float | None) -> int | None:
    """Training episodes one seed needed before reaching the threshold (None: never)."""
    evaluations: dict[int, list[Episode]] = defaultdict(list)
    for e in episodes:
        if e.phase == "eval":
            evaluations[e.episode].append(e)
    if evaluations:
        for after, group in sorted(evaluations.items()):
            if _reached([e.return_ for e in group], [e.success for e in group], threshold):
                return after
        return None
    for e in sorted((e for e in episodes if e.phase == "train"), key=lambda e: e.episode):
        if _reached([e.return_], [e.success], threshold):
            return e.episode
    return None


def steps_before(episodes: list[Episode], after: int | None) -> int | None:
    """Environment steps of training in the first ``after`` training episodes (None: never)."""
    if after is None:
        return None
    return sum(e.length for e in episodes if e.phase == "train" and e.episode <= after)


def _phase_summary(by_seed: dict[int, list[Episode]], phase: str) -> tuple[float, ...]:
    """(mean, low, high, success rate) of one phase's episodes, seed means first."""
    seed_means = [float(np.mean([e.return_ for e in eps if e.phase == phase]))
                  for eps in by_seed.values() if any(e.phase == phase for e in eps)]
    rows = [e for eps in by_seed.values() for e in eps if e.phase == phase]
    success = float(np.mean([e.success for e in rows])) if rows else math.nan
    return (*mean_and_interval(seed_means), success)


def summarise(episodes: list[Episode], threshold: float | None,
              costs: dict[tuple[str, str], Cost] | None = None) -> list[SummaryRow]:
    """One row per adapter x agent; ``costs`` fill ``llm_seconds`` and ``cpu_seconds``."""
    costs = costs or {}
    groups: dict[tuple[str, str], dict[int, list[Episode]]] = defaultdict(
        lambda: defaultdict(list))
    for e in episodes:
        groups[(e.adapter, e.agent)][e.seed].append(e)
    rows = []
    for (adapter, agent), by_seed in groups.items():
        group = [e for eps in by_seed.values() for e in eps]
        chosen = [next(e.episode for e in eps if e.phase == "best")
                  for eps in by_seed.values() if any(e.phase == "best" for e in eps)]
        reached = [episodes_to_threshold(eps, threshold) for eps in by_seed.values()]
        steps = [steps_before(eps, after)
                 for eps, after in zip(by_seed.values(), reached, strict=True)]
        cost = costs.get((adapter, agent), Cost.unknown())
        rows.append(SummaryRow(
            adapter, agent, len(by_seed), *_phase_summary(by_seed, "final"),
            *_phase_summary(by_seed, "best"),
            float(np.median(chosen)) if chosen else math.nan,
            median_to_threshold(reached), median_to_threshold(steps),
            sum(r is not None for r in reached),
            float(np.mean([sum(e.wall_time for e in eps if e.phase == "train")
                           for eps in by_seed.values()])),
            sum(e.llm_calls for e in group), sum(e.cache_hits for e in group),
            sum(e.llm_fallbacks for e in group), cost.llm_seconds, cost.cpu_seconds,
            fallback_share(cost.fallbacks)))
    return rows


class StatsNotInstalled(ConfigError, ImportError):
    """``rliable`` is missing: one line naming :data:`STATS_HINT`."""


def require_rliable() -> tuple[Any, Any, Any]:
    """``(rliable.library, rliable.metrics, rliable.plot_utils)``, imported now."""
    try:
        from rliable import library, metrics, plot_utils  # noqa: PLC0415  (optional extra)
    except ImportError as error:
        raise StatsNotInstalled(
            f"IQM, stratified bootstrap intervals and performance profiles need rliable "
            f"({error}): {STATS_HINT}") from None
    return library, metrics, plot_utils


@contextmanager
def _seeded_global_rng(seed: int) -> Iterator[None]:
    """rliable resamples with numpy's global RNG: seed it for the call, then restore it."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def aggregate_estimates(scores: np.ndarray, reps: int = BOOTSTRAP_REPS, seed: int = 0
                        ) -> dict[str, tuple[float, float, float]]:
    """``{"iqm": (point, low, high), "mean": (...)}`` of a (runs x tasks) score matrix with
    rliable's stratified bootstrap 95% intervals (nan with one run)."""
    library, metrics, _ = require_rliable()
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or 0 in scores.shape or not np.isfinite(scores).all():
        raise ValueError(f"scores of shape {scores.shape}: expected a finite (runs x tasks) "
                         "matrix with at least one run and one task")

    def both(matrix: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(matrix), metrics.aggregate_mean(matrix)])

    if scores.shape[0] < 2:
        point = both(scores)
        return {"iqm": (float(point[0]), math.nan, math.nan),
                "mean": (float(point[1]), math.nan, math.nan)}
    with _seeded_global_rng(seed):
        points, intervals = library.get_interval_estimates({"scores": scores}, both, reps=reps)
    point, interval = points["scores"], intervals["scores"]
    return {name: (float(point[i]), float(interval[0, i]), float(interval[1, i]))
            for i, name in enumerate(("iqm", "mean"))}


def profile_estimates(score_dict: Mapping[str, np.ndarray], taus: np.ndarray,
                      reps: int = BOOTSTRAP_REPS, seed: int = 0) -> tuple[dict, dict]:
    """rliable's performance profiles (points, 95% bands) of each (runs x tasks) matrix."""
    library, _, _ = require_rliable()
    with _seeded_global_rng(seed):
        return library.get_interval_estimates(
            {k: np.asarray(v, dtype=float) for k, v in score_dict.items()},
            lambda m: library.score_distributions(m, taus), reps=reps)


def seed_scores(episodes: Sequence[Episode], phase: str = "final"
                ) -> dict[tuple[str, str], dict[int, float]]:
    """Per (adapter, agent): each seed's success rate over its ``phase`` episodes."""
    outcomes: dict[tuple[str, str], dict[int, list[bool]]] = defaultdict(
        lambda: defaultdict(list))
    for e in episodes:
        if e.phase == phase:
            outcomes[(e.adapter, e.agent)][e.seed].append(bool(e.success))
    return {key: {seed: float(np.mean(v)) for seed, v in sorted(by_seed.items())}
            for key, by_seed in outcomes.items()}


# ----------------------------------------------------------------------------- BALROG


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
                   balrog: Sequence[tuple[str, dict[str, float]]] = (),
                   marks: Mapping[tuple[str, str], str] | None = None) -> str:
    """The by-goal-type tables of a mixed-goal folder ('' for any other folder), a row
    carrying its fallback mark (``marks``, per adapter x agent)."""
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
            mark = (marks or {}).get((adapter, agent), "")
            out.append(f"| {adapter} / {agent}{label}{mark} | {count} | {cells} | {mean} |")
    for model, tasks in balrog:
        cells = " | ".join(f"{tasks[g]:.1f}" if g in tasks else "–" for g in GOAL_TYPES)
        mean = (f"{np.mean([tasks[g] for g in GOAL_TYPES]):.1f}"
                if all(g in tasks for g in GOAL_TYPES) else "–")
        out.append(f"| BALROG: {model} (zero-shot) | | {cells} | {mean} |")
    return "\n".join(out) + "\n"
