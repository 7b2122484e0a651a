"""Summaries and plots of a results folder, computed from its ``episodes.csv`` alone.

``write_report(folder)`` is what ``langadapt report DIR`` runs and what the runner runs at
the end, so a rebuilt report is identical to the first one.

Per adapter x agent the summary gives:

- ``final_return_mean``, ``final_return_low``, ``final_return_high``: each seed's mean greedy
  return over the final evaluation episodes of its final ("last") policy, the mean over
  seeds and its 95% percentile-bootstrap interval over seeds (``scipy.stats.bootstrap``;
  always inside the seeds' range; empty with one seed). The markdown table says when there
  are fewer than 5 seeds, where such intervals are rough;
- ``final_success_rate``: the fraction of all final evaluation episodes that succeeded;
- ``best_*`` (with ``keep_best``): the same for the retained ("best") policy, and
  ``best_chosen_at``: the median over seeds of the training episodes done at the
  evaluation that chose it;
- ``episodes_to_threshold`` and ``seeds_reaching_threshold``: per seed, the training
  episodes completed before the first evaluation whose mean return reached the threshold
  (or, with no threshold set, whose every episode succeeded; without evaluations during
  training, the first training episode that did); the median over all seeds with the seeds
  that never got there counted as never (empty when half or more never did), shown as
  ``median (k/n seeds)``;
- ``train_wall_time_s``: mean wall time of a seed's training episodes, summed;
- ``llm_calls`` and ``cache_hits``: totals over all seeds and phases.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from langadapt.experiments.config import load_config

SUMMARY_COLUMNS = (
    "adapter",
    "agent",
    "seeds",
    "final_return_mean",
    "final_return_low",
    "final_return_high",
    "final_success_rate",
    "best_return_mean",
    "best_return_low",
    "best_return_high",
    "best_success_rate",
    "best_chosen_at",
    "episodes_to_threshold",
    "seeds_reaching_threshold",
    "train_wall_time_s",
    "llm_calls",
    "cache_hits",
    "llm_fallbacks",
)


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
    seeds_reaching_threshold: int
    train_wall_time_s: float
    llm_calls: int
    cache_hits: int
    llm_fallbacks: int


@dataclass
class Episode:
    adapter: str
    agent: str
    seed: int
    phase: str
    episode: int
    return_: float
    length: int
    success: bool
    wall_time: float
    llm_calls: int
    cache_hits: int
    llm_fallbacks: int = 0


def read_episodes(path: Path) -> list[Episode]:
    """The rows of an ``episodes.csv``; ValueError naming the file if it is not one."""
    from langadapt.experiments.runner import EPISODE_COLUMNS

    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in EPISODE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{path}: not a langadapt episodes file, missing columns {', '.join(missing)}"
            )
        try:
            return [_episode(row) for row in reader]
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path} line {reader.line_num}: {error}") from None


def _episode(row: dict[str, str]) -> Episode:
    return Episode(
        adapter=row["adapter"],
        agent=row["agent"],
        seed=int(row["seed"]),
        phase=row["phase"],
        episode=int(row["episode"]),
        return_=float(row["return"]),
        length=int(row["length"]),
        success=row["success"] in ("1", "True", "true"),
        wall_time=float(row["wall_time"]),
        llm_calls=int(row["llm_calls"]),
        cache_hits=int(row["cache_hits"]),
        llm_fallbacks=int(row.get("llm_fallbacks") or 0),
    )


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
    from scipy import stats

    interval = stats.bootstrap(
        (array,), np.mean, method="percentile", n_resamples=2000, rng=np.random.default_rng(0)
    ).confidence_interval
    # (a mean of resampled values can exceed the largest by a rounding error)
    low, high = max(float(interval.low), array.min()), min(float(interval.high), array.max())
    return mean, float(low), float(high)


def median_to_threshold(per_seed: list[int | None]) -> float:
    """Median of the seeds' episodes to threshold, a seed that never reached it counted as
    never (infinitely many): nan when half or more never did."""
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


def summarise(episodes: list[Episode], threshold: float | None) -> list[SummaryRow]:
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
        rows.append(
            SummaryRow(
                adapter,
                agent,
                len(by_seed),
                *final,
                *best,
                float(np.median(chosen)) if chosen else math.nan,
                median_to_threshold(reached),
                sum(r is not None for r in reached),
                float(np.mean([_train_time(eps) for eps in by_seed.values()])),
                sum(e.llm_calls for e in group),
                sum(e.cache_hits for e in group),
                sum(e.llm_fallbacks for e in group),
            )
        )
    return rows


def _train_time(episodes: list[Episode]) -> float:
    return sum(e.wall_time for e in episodes if e.phase == "train")


def _cell(value: float | int | str) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4f}"
    return str(value)


def write_summary_csv(rows: list[SummaryRow], path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUMMARY_COLUMNS)
        for row in rows:
            writer.writerow([_cell(v) for v in asdict(row).values()])


def _interval(mean: float, low: float, high: float) -> str:
    if math.isnan(mean):
        return ""
    return f"{mean:.3f}" + ("" if math.isnan(low) else f" [{low:.3f}, {high:.3f}]")


def summary_markdown(rows: list[SummaryRow], title: str, threshold: float | None) -> str:
    target = (
        "every evaluation episode succeeds" if threshold is None else f"mean return >= {threshold}"
    )
    retained = any(not math.isnan(r.best_return_mean) for r in rows)
    best_header = (
        " retained policy return | success | chosen after (episodes) |" if retained else ""
    )
    lines = [
        f"# {title}",
        "",
        "| adapter | agent | seeds | final policy greedy return, mean [95% CI] | success |"
        f"{best_header} episodes to threshold ({target}), median (seeds reaching) | "
        "train wall time (s) | LLM calls | cache hits |",
        "|---|---|---:|---:|---:|"
        + ("---:|---:|---:|" if retained else "")
        + "---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.seeds_reaching_threshold == 0:
            to_threshold = f"never (0/{r.seeds})"
        else:
            median = (
                "never" if math.isnan(r.episodes_to_threshold) else f"{r.episodes_to_threshold:.0f}"
            )
            to_threshold = f"{median} ({r.seeds_reaching_threshold}/{r.seeds})"
        best = ""
        if retained:
            chosen = "" if math.isnan(r.best_chosen_at) else f"{r.best_chosen_at:.0f}"
            success = "" if math.isnan(r.best_success_rate) else f"{r.best_success_rate:.0%}"
            best = (
                f" {_interval(r.best_return_mean, r.best_return_low, r.best_return_high)} |"
                f" {success} | {chosen} |"
            )
        lines.append(
            f"| {r.adapter} | {r.agent} | {r.seeds} | "
            f"{_interval(r.final_return_mean, r.final_return_low, r.final_return_high)} | "
            f"{r.final_success_rate:.0%} |{best} {to_threshold} | {r.train_wall_time_s:.1f} | "
            f"{r.llm_calls} | {r.cache_hits} |"
        )
    lines.append("")
    lines.append("Intervals: 95% percentile bootstrap over seeds of each seed's mean return.")
    few = sorted({r.seeds for r in rows if r.seeds < FEW_SEEDS})
    if few:
        lines.append(
            f"Fewer than {FEW_SEEDS} seeds ({', '.join(map(str, few))}): the intervals are "
            "rough, read them as the spread of the seeds, not as a precise confidence interval."
        )
    if retained:
        lines.append(
            "Retained policy: the policy of the best greedy evaluation during training "
            "(keep_best), scored on the same final episodes as the final policy; chosen after: "
            "median over seeds of the training episodes done at that evaluation."
        )
    return "\n".join(lines) + "\n"


def prerender_markdown(path: Path) -> str:
    """A note of what prerendering cost (LLM calls made before training), if it ran."""
    if not path.is_file():
        return ""
    import json

    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    passes = json.loads(path.read_text())
    for one in passes:
        for adapter, stats in one["adapters"].items():
            for key, value in stats.items():
                totals[adapter][key] += value
    lines = [
        "",
        f"Prerender ({len(passes)} pass{'es' if len(passes) != 1 else ''}, before training; "
        "not in the table's counts):",
    ]
    for adapter, stats in totals.items():
        encoded = _count(stats["encoder_calls"], "text") + " encoded"
        if stats["llm_calls"] or stats["llm_cache_hits"]:
            lines.append(
                f"- {adapter}: {_count(stats['llm_calls'], 'LLM call')} "
                f"({stats['llm_seconds']:.1f} s), "
                f"{_count(stats['llm_cache_hits'], 'description')} from the cache, {encoded}"
            )
        else:
            cached = _count(stats["embedding_cache_hits"], "vector")
            lines.append(f"- {adapter}: {encoded}, {cached} from the cache")
    return "\n".join(lines) + "\n"


def _count(value: float, noun: str) -> str:
    return f"{value:.0f} {noun}" + ("" if round(value) == 1 else "s")


def write_report(
    out_dir: Path | str, log: Callable[[str], None] | None = print
) -> list[SummaryRow]:
    """(Re)build ``summary.csv``, ``summary.md`` and the plots from ``episodes.csv``."""
    from langadapt.experiments.plots import plot_final_returns, plot_learning_curves
    from langadapt.experiments.runner import check_results, results_notes

    out_dir = Path(out_dir)
    failed = check_results(out_dir)  # episodes.csv against config.yaml and runs/*/done.json
    episodes_file = out_dir / "episodes.csv"
    config_file = out_dir / "config.yaml"
    if not episodes_file.is_file() or not config_file.is_file():
        raise FileNotFoundError(
            f"{out_dir} is not a langadapt results folder: expected episodes.csv and config.yaml"
        )
    config = load_config(config_file)
    threshold = config.evaluation.threshold
    episodes = read_episodes(episodes_file)
    rows = summarise(episodes, threshold)
    params = " ".join(f"{k}={v}" for k, v in config.environment.params.items())
    title = f"{config.name} — {config.environment.id} {params}"
    write_summary_csv(rows, out_dir / "summary.csv")
    markdown = summary_markdown(rows, title.strip(), threshold)
    markdown += prerender_markdown(out_dir / "prerender.json")
    markdown += results_notes(out_dir, failed)
    (out_dir / "summary.md").write_text(markdown)
    plot_learning_curves(episodes, out_dir / "learning_curves.png", title=title.strip())
    plot_final_returns(rows, out_dir / "final_returns.png", title=title.strip())
    if log is not None:
        log(markdown)
        log(f"written: {out_dir}/summary.csv, summary.md, learning_curves.png, final_returns.png")
    return rows
