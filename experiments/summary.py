"""Statistics of a results folder's episodes: per adapter x agent, what the summary reports
(see :mod:`langadapt.experiments.report` for what each column means). No files are read or
written here; the report and the plots share these numbers."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, fields

import numpy as np
from scipy import stats

from .costs import Cost
from .results import Episode


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


SUMMARY_COLUMNS = tuple(field.name for field in fields(SummaryRow))
"""Columns of ``summary.csv``: the fields of :class:`SummaryRow`, in order."""

#: Fewer seeds than this: the summary says its intervals are rough.
FEW_SEEDS = 5


def mean_and_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% percentile-bootstrap interval (``low``, ``high`` inside
    ``[min, max]`` of the values; nan with fewer than 2 values). Seeded, so a rebuilt report
    is identical."""
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
    """Median of the seeds' episodes (or steps) to threshold, a seed that never reached it
    counted as never (infinitely many): nan when half or more never did."""
    if not per_seed:
        return math.nan
    median = float(np.median([math.inf if v is None else float(v) for v in per_seed]))
    return math.nan if math.isinf(median) else median


def _reached(returns: list[float], successes: list[bool], threshold: float | None) -> bool:
    if threshold is None:
        return all(successes)
    return float(np.mean(returns)) >= threshold


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
    seed_means = [
        float(np.mean([e.return_ for e in eps if e.phase == phase]))
        for eps in by_seed.values()
        if any(e.phase == phase for e in eps)
    ]
    rows = [e for eps in by_seed.values() for e in eps if e.phase == phase]
    success = float(np.mean([e.success for e in rows])) if rows else math.nan
    return (*mean_and_interval(seed_means), success)


def summarise(episodes: list[Episode], threshold: float | None,
              costs: dict[tuple[str, str], Cost] | None = None) -> list[SummaryRow]:
    """One row per adapter x agent; ``costs`` (:mod:`.costs`, from the runs' records) fill
    ``llm_seconds`` and ``cpu_seconds`` (nan without them)."""
    costs = costs or {}
    groups: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for e in episodes:
        groups[(e.adapter, e.agent)].append(e)
    rows = []
    for (adapter, agent), group in groups.items():
        by_seed: dict[int, list[Episode]] = defaultdict(list)
        for e in group:
            by_seed[e.seed].append(e)
        final = _phase_summary(by_seed, "final")
        best = _phase_summary(by_seed, "best")
        chosen = [
            next(e.episode for e in eps if e.phase == "best")
            for eps in by_seed.values()
            if any(e.phase == "best" for e in eps)
        ]
        reached = [episodes_to_threshold(eps, threshold) for eps in by_seed.values()]
        steps = [steps_before(eps, after)
                 for eps, after in zip(by_seed.values(), reached, strict=True)]
        rows.append(
            SummaryRow(
                adapter,
                agent,
                len(by_seed),
                *final,
                *best,
                float(np.median(chosen)) if chosen else math.nan,
                median_to_threshold(reached),
                median_to_threshold(steps),
                sum(r is not None for r in reached),
                float(np.mean([_train_time(eps) for eps in by_seed.values()])),
                sum(e.llm_calls for e in group),
                sum(e.cache_hits for e in group),
                sum(e.llm_fallbacks for e in group),
                costs.get((adapter, agent), Cost.unknown()).llm_seconds,
                costs.get((adapter, agent), Cost.unknown()).cpu_seconds,
            )
        )
    return rows


def _train_time(episodes: list[Episode]) -> float:
    return sum(e.wall_time for e in episodes if e.phase == "train")
