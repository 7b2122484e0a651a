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
  ``median (k/n seeds)``; ``steps_to_threshold``: the same median in environment steps of
  training (the lengths of those training episodes, summed);
- ``train_wall_time_s``: mean wall time of a seed's training episodes, summed;
- ``llm_calls`` and ``cache_hits``: totals over all seeds and phases;
- ``llm_seconds`` and ``cpu_seconds``: totals over the seeds' runs of the time spent waiting
  for LLM answers and of the CPU time of the process that ran them, from the runs'
  ``done.json`` (:mod:`langadapt.experiments.costs`; empty for runs written before it).

``summary.md`` then gives each adapter x agent's final success over seeds as IQM and mean
with rliable's stratified bootstrap 95% intervals (:mod:`langadapt.experiments.stats`; a
line naming the ``stats`` extra without rliable). A suite's report across tasks is
:mod:`langadapt.experiments.suite`.

The numbers come from :mod:`langadapt.experiments.summary`, the plots from
:mod:`langadapt.experiments.plots`. Rebuilding holds the folder's lock and writes every file
whole (see :mod:`langadapt.experiments.results`): a symbolic link among the folder's files
is refused, a full disk is one line naming the folder, and the previous summary stays.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from ..environments.babyai_goals import GOAL_TYPES
from .balrog import BALROG_BABYAI
from .config import load_config
from .costs import folder_costs
from .goals import goals_markdown
from .plots import plot_final_returns, plot_learning_curves
from .results import (
    MAX_RECORD_BYTES,
    Episode,
    ResultsFolderError,
    bounded,
    check_results,
    folder_lock,
    read_episodes,
    refuse_links,
    replacing,
    write_text,
    writing,
)
from .stats import seed_scores_markdown
from .summary import FEW_SEEDS, SUMMARY_COLUMNS, SummaryRow, summarise

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""Cell starts that make a spreadsheet read text as a formula (OWASP, CSV injection)."""


def text_cell(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet shows as text: ``'`` before a formula start."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _cell(value: float | int | str) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4f}"
    return text_cell(value) if isinstance(value, str) else str(value)


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
        "steps to threshold, median | train wall time (s) | LLM calls | LLM s | CPU s | "
        "cache hits |",
        "|---|---|---:|---:|---:|"
        + ("---:|---:|---:|" if retained else "")
        + "---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.seeds_reaching_threshold == 0:
            to_threshold = f"never (0/{r.seeds})"
        else:
            median = (
                "never" if math.isnan(r.episodes_to_threshold) else f"{r.episodes_to_threshold:.0f}"
            )
            to_threshold = f"{median} ({r.seeds_reaching_threshold}/{r.seeds})"
        steps = "never" if math.isnan(r.steps_to_threshold) else f"{r.steps_to_threshold:,.0f}"
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
            f"{r.final_success_rate:.0%} |{best} {to_threshold} | {steps} | "
            f"{r.train_wall_time_s:.1f} | {r.llm_calls} | {_seconds(r.llm_seconds)} | "
            f"{_seconds(r.cpu_seconds)} | {r.cache_hits} |"
        )
    lines.append("")
    lines.append("Intervals: 95% percentile bootstrap over seeds of each seed's mean return. "
                 "LLM calls, LLM s (waiting for answers), CPU s and cache hits: totals over "
                 "the seeds' runs.")
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


def _seconds(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.1f}"


def prerender_markdown(path: Path) -> str:
    """A note of what prerendering cost (LLM calls made before training), if it ran."""
    if not path.is_file():
        return ""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    passes = json.loads(bounded(path, MAX_RECORD_BYTES).read_text())
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


def results_notes(episodes: list[Episode], failed: dict[str, str]) -> str:
    """Markdown lines under the summary: descriptions that were rule-language fallbacks, per
    adapter, and failed runs (empty when there are none)."""
    fallbacks: dict[str, int] = defaultdict(int)
    for e in episodes:
        fallbacks[e.adapter] += e.llm_fallbacks
    lines = [f"- **{adapter}: {count} description{'s' if count != 1 else ''} came from the rule "
             "describer, not the LLM** (the LLM failed and `fallback` is on): its rows are not "
             "a pure LLM result." for adapter, count in fallbacks.items() if count]
    lines += [f"- **run {key} failed** and is not in the table: {error}"
              for key, error in failed.items()]
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def write_report(
    out_dir: Path | str, log: Callable[[str], None] | None = print
) -> list[SummaryRow]:
    """(Re)build ``summary.csv``, ``summary.md`` and the plots from ``episodes.csv``,
    holding the folder's lock (see the module docstring)."""
    out_dir = Path(out_dir)
    if not (out_dir / "config.yaml").is_file():  # before the lock: never a lock file elsewhere
        raise ResultsFolderError(
            f"{out_dir} is not a langadapt results folder: expected config.yaml and episodes.csv"
        )
    again = f"free some space (or fix the folder) and rebuild: langadapt report {out_dir}"
    with writing(out_dir, again), folder_lock(out_dir):
        refuse_links(out_dir)
        failed = check_results(out_dir)  # episodes.csv against config.yaml and runs/*/done.json
        config = load_config(out_dir / "config.yaml", data_only=True)
        threshold = config.evaluation.threshold
        episodes = read_episodes(out_dir / "episodes.csv")
        rows = summarise(episodes, threshold, folder_costs(config, out_dir))
        params = " ".join(f"{k}={v}" for k, v in config.environment.params.items())
        title = f"{config.name} — {config.environment.id} {params}".strip()
        markdown = summary_markdown(rows, title, threshold)
        markdown += seed_scores_markdown(episodes)
        markdown += goals_markdown(config, episodes, [
            (b.model, dict(zip(GOAL_TYPES, b.tasks, strict=True)))
            for b in BALROG_BABYAI if b.tasks is not None])
        markdown += prerender_markdown(out_dir / "prerender.json")
        markdown += results_notes(episodes, failed)
        with replacing(out_dir, "summary.csv") as temporary:
            write_summary_csv(rows, temporary)
        write_text(out_dir, "summary.md", markdown)
        with replacing(out_dir, "learning_curves.png") as temporary:
            in_steps = all(config.training_for(agent).steps for agent in config.agents)
            budgets = {agent.name: (config.training_for(agent).steps if in_steps
                                    else config.training_for(agent).episodes)
                       for agent in config.agents}
            plot_learning_curves(episodes, temporary, title=title,
                                 x_axis="steps" if in_steps else "episodes", budgets=budgets)
        with replacing(out_dir, "final_returns.png") as temporary:
            plot_final_returns(rows, temporary, title=title)
    if log is not None:
        log(markdown)
        log(f"written: {out_dir}/summary.csv, summary.md, learning_curves.png, final_returns.png")
    return rows
