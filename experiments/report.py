"""Summaries and plots of a results folder, computed from its ``episodes.csv`` alone.

``write_report(folder)`` is what ``langadapt report DIR`` runs and what the runner runs at
the end, so a rebuilt report is identical to the first one.

Per adapter x agent the summary gives:

- ``final_return_mean`` and ``final_return_ci95``: each seed's mean greedy return over the
  final evaluation episodes, then the mean over seeds and the half-width of its 95%
  Student-t interval (empty with one seed);
- ``final_success_rate``: the fraction of all final evaluation episodes that succeeded;
- ``episodes_to_threshold`` and ``seeds_reaching_threshold``: the training episodes
  completed before the first evaluation whose mean return reached the threshold (or, with
  no threshold set, whose every episode succeeded), averaged over the seeds that got
  there; without evaluations during training, the first training episode that did;
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
    "final_return_ci95",
    "final_success_rate",
    "episodes_to_threshold",
    "seeds_reaching_threshold",
    "train_wall_time_s",
    "llm_calls",
    "cache_hits",
)


@dataclass
class SummaryRow:
    adapter: str
    agent: str
    seeds: int
    final_return_mean: float
    final_return_ci95: float
    final_success_rate: float
    episodes_to_threshold: float
    seeds_reaching_threshold: int
    train_wall_time_s: float
    llm_calls: int
    cache_hits: int


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
    )


def mean_and_ci95(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval (nan with fewer than 2 values)."""
    if not values:
        return math.nan, math.nan
    array = np.asarray(values, dtype=float)
    if len(array) < 2:
        return float(array.mean()), math.nan
    from scipy import stats

    half = stats.t.ppf(0.975, len(array) - 1) * array.std(ddof=1) / math.sqrt(len(array))
    return float(array.mean()), float(half)


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


def summarise(episodes: list[Episode], threshold: float | None) -> list[SummaryRow]:
    groups: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for e in episodes:
        groups[(e.adapter, e.agent)].append(e)
    rows = []
    for (adapter, agent), group in groups.items():
        by_seed: dict[int, list[Episode]] = defaultdict(list)
        for e in group:
            by_seed[e.seed].append(e)
        finals = [e for e in group if e.phase == "final"]
        seed_finals = [
            float(np.mean([e.return_ for e in eps if e.phase == "final"]))
            for eps in by_seed.values()
            if any(e.phase == "final" for e in eps)
        ]
        mean, ci = mean_and_ci95(seed_finals)
        reached = [episodes_to_threshold(eps, threshold) for eps in by_seed.values()]
        reached = [r for r in reached if r is not None]
        rows.append(
            SummaryRow(
                adapter=adapter,
                agent=agent,
                seeds=len(by_seed),
                final_return_mean=mean,
                final_return_ci95=ci,
                final_success_rate=(
                    float(np.mean([e.success for e in finals])) if finals else math.nan
                ),
                episodes_to_threshold=float(np.mean(reached)) if reached else math.nan,
                seeds_reaching_threshold=len(reached),
                train_wall_time_s=float(
                    np.mean([_train_time(eps) for eps in by_seed.values()])
                ),
                llm_calls=sum(e.llm_calls for e in group),
                cache_hits=sum(e.cache_hits for e in group),
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


def summary_markdown(rows: list[SummaryRow], title: str, threshold: float | None) -> str:
    target = (
        "every evaluation episode succeeds" if threshold is None else f"mean return >= {threshold}"
    )
    lines = [
        f"# {title}",
        "",
        "| adapter | agent | seeds | final greedy return (mean ± 95% CI) | success | "
        f"episodes to threshold ({target}) | train wall time (s) | LLM calls | cache hits |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ci = "" if math.isnan(r.final_return_ci95) else f" ± {r.final_return_ci95:.3f}"
        to_threshold = (
            "never"
            if r.seeds_reaching_threshold == 0
            else f"{r.episodes_to_threshold:.0f} ({r.seeds_reaching_threshold}/{r.seeds} seeds)"
        )
        lines.append(
            f"| {r.adapter} | {r.agent} | {r.seeds} | {r.final_return_mean:.3f}{ci} | "
            f"{r.final_success_rate:.0%} | {to_threshold} | {r.train_wall_time_s:.1f} | "
            f"{r.llm_calls} | {r.cache_hits} |"
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

