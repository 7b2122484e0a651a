"""Best-so-far return against LLM calls and against environment steps, for experiments with
LLM policy search (``llm_policy_search`` agents) beside step-wise learners.

Written into the results folder by the runner (rebuild with
``python -m langadapt.experiments.search_report DIR``):

- ``search_summary.md``: per agent, the best-so-far return (mean and 95% bootstrap interval
  over seeds) after 10, 30 and 100 LLM calls (random search: proposals; "–" where a run made
  fewer calls) and at the environment steps the LLM search had used by then (Q-learning /
  DQN: their best greedy evaluation so far);
- ``rounds.csv``: every round of every search run (prompt size, proposal, evaluated return,
  kept or not, requests, env steps), from the runs' ``done.json``;
- ``best_so_far.png``: the two curves for every agent.

For a search run the best-so-far return after a round is the kept policy's score (the mean
return of its evaluation episodes); for a step-wise learner it is the best mean return of the
greedy evaluations so far (``evaluation.every``), placed at the training steps taken.

Like the report, it holds the folder's lock and writes each file whole (see
:mod:`langadapt.experiments.results`); ``done.json`` counters of older versions are read under
today's names.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .config import load_config
from .plots import plot_best_so_far
from .report import text_cell
from .results import (
    ResultsFolderError,
    folder_lock,
    read_episodes,
    read_run_record,
    refuse_links,
    replacing,
    runs_of,
    write_csv,
    write_text,
    writing,
)
from .summary import mean_and_interval

CALL_MARKS = (10, 30, 100)
ROUND_COLUMNS = ("adapter", "agent", "seed", "round", "proposer", "requests", "corrections",
                 "skipped", "prompt_chars", "evaluated_return", "kept", "best_return",
                 "env_steps", "requests_total", "llm_calls_total", "llm_seconds", "error",
                 "proposal")


@dataclass
class RunCurve:
    """One run's best-so-far return: ``(calls, steps, best)`` points in order."""

    agent: str
    seed: int
    search: bool
    points: list[tuple[int, int, float]] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)

    def best_at(self, index: int, limit: float) -> float:
        """Best-so-far return once ``calls`` (index 0) or ``steps`` (1) reached ``limit``
        (nan before the first point, and for calls the run never reached)."""
        if index == 0 and (not self.points or self.points[-1][0] < limit):
            return math.nan
        best = math.nan
        for point in self.points:
            if point[index] > limit:
                break
            best = point[2]
        return best

    def steps_at(self, calls: int) -> float:
        """Environment steps used when the search had made ``calls`` calls (nan if it never
        did)."""
        return float(next((p[1] for p in self.points if p[0] >= calls), math.nan))


def run_curves(out_dir: Path) -> tuple[list[RunCurve], list[dict]]:
    """The curve of every finished run, and every search round (for ``rounds.csv``)."""
    config = load_config(out_dir / "config.yaml", data_only=True)
    episodes = read_episodes(out_dir / "episodes.csv")
    by_run: dict[tuple[str, str, int], list] = defaultdict(list)
    for e in episodes:
        by_run[(e.adapter, e.agent, e.seed)].append(e)
    curves, rounds = [], []
    for run in runs_of(config):
        summary = read_run_record(out_dir / "runs" / run.key / "done.json")
        if summary is None:
            continue
        name = run.agent.name
        if run.agent.type == "llm_policy_search":
            curve = RunCurve(name, run.seed, True, stats=summary.get("agent_stats", {}))
            for entry in summary.get("rounds", []):
                if entry["best_return"] is not None:
                    curve.points.append((entry["requests_total"], entry["env_steps"],
                                         float(entry["best_return"])))
                rounds.append({"adapter": run.adapter.name, "agent": name, "seed": run.seed}
                              | {k: entry.get(k) for k in ROUND_COLUMNS[3:]})
        else:
            curve = RunCurve(name, run.seed, False)
            steps, after, evals = 0, {}, defaultdict(list)
            for e in by_run[(run.adapter.name, name, run.seed)]:
                if e.phase == "train":
                    steps += e.length
                    after[e.episode] = steps
                elif e.phase == "eval":
                    evals[e.episode].append(e.return_)
            best = -math.inf
            for episode, returns in sorted(evals.items()):
                best = max(best, float(np.mean(returns)))
                curve.points.append((0, after.get(episode, 0), best))
        curves.append(curve)
    return curves, rounds


def _mean_ci(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "–"
    mean, low, high = mean_and_interval(values)
    return f"{mean:.3g}" + ("" if math.isnan(low) else f" [{low:.3g}, {high:.3g}]")


def summary_markdown(curves: list[RunCurve], title: str) -> str:
    agents = list(dict.fromkeys(c.agent for c in curves))
    search = [a for a in agents if any(c.search and c.agent == a for c in curves)]
    llm = [a for a in search if any(c.agent == a and c.stats.get("llm_calls", 0)
                                    + c.stats.get("llm_cache_hits", 0) > 0 for c in curves)]
    reference = (llm or search or [None])[0]
    most = max((c.points[-1][0] for c in curves if c.search and c.points), default=0)
    calls = sorted({*(k for k in CALL_MARKS if k <= most), most} - {0}) or list(CALL_MARKS)
    lines = [f"# {title}", "",
             "Best-so-far return, mean [95% bootstrap interval] over seeds, after N LLM calls "
             "(random search: N proposals):", "",
             "| agent | seeds | " + " | ".join(f"{k} calls" for k in calls)
             + " | env steps (all rounds) | skipped rounds | LLM calls (cache hits) | "
             "LLM seconds |",
             "|---|---:|" + "---:|" * (len(calls) + 4)]
    for agent in search:
        mine = [c for c in curves if c.agent == agent]
        cells = [_mean_ci([c.best_at(0, k) for c in mine]) for k in calls]
        steps = [c.points[-1][1] if c.points else math.nan for c in mine]
        total = {key: sum(c.stats.get(key, 0) for c in mine)
                 for key in ("skipped_rounds", "llm_calls", "llm_cache_hits", "llm_seconds")}
        lines.append(
            f"| {agent} | {len(mine)} | " + " | ".join(cells)
            + f" | {np.nanmean(steps):.0f} | {total['skipped_rounds']:.0f} | "
            f"{total['llm_calls']:.0f} ({total['llm_cache_hits']:.0f}) | "
            f"{total['llm_seconds']:.0f} |")
    if reference is not None:
        ref = [c for c in curves if c.agent == reference]
        reached = min((c.points[-1][0] if c.points else 0) for c in ref)
        marks = [(k, float(np.nanmean([c.steps_at(k) for c in ref])))
                 for k in calls if k <= reached]
        lines += ["", f"Best-so-far return at the environment steps {reference} had used after "
                  "N calls (mean over its seeds; step-wise learners: best greedy evaluation "
                  "so far):", "",
                  "| agent | seeds | " + " | ".join(
                      f"{k} calls: {steps:,.0f} steps" for k, steps in marks) + " |",
                  "|---|---:|" + "---:|" * len(marks)]
        for agent in agents:
            mine = [c for c in curves if c.agent == agent]
            cells = [_mean_ci([c.best_at(1, steps) for c in mine]) for _, steps in marks]
            lines.append(f"| {agent} | {len(mine)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_search_report(out_dir: Path | str, log: Callable[[str], None] | None = print) -> str:
    """Write ``search_summary.md``, ``rounds.csv`` and ``best_so_far.png``; returns the table."""
    out_dir = Path(out_dir)
    if not (out_dir / "config.yaml").is_file():  # before the lock: never a lock file elsewhere
        raise ResultsFolderError(f"{out_dir} is not a langadapt results folder: no config.yaml")
    again = ("free some space (or fix the folder) and rebuild: python -m "
             f"langadapt.experiments.search_report {out_dir}")
    with writing(out_dir, again), folder_lock(out_dir):
        refuse_links(out_dir)
        config = load_config(out_dir / "config.yaml", data_only=True)
        curves, rounds = run_curves(out_dir)
        title = f"{config.name}: best-so-far return"
        markdown = summary_markdown(curves, title)
        write_text(out_dir, "search_summary.md", markdown)
        with write_csv(out_dir, "rounds.csv") as handle:
            writer = csv.DictWriter(handle, fieldnames=ROUND_COLUMNS)
            writer.writeheader()
            for entry in rounds:  # an LLM's text as text, never a spreadsheet formula
                row = entry | {"proposal": json.dumps(entry["proposal"])}
                writer.writerow({k: text_cell(v) if isinstance(v, str) else v
                                 for k, v in row.items()})
        by_calls: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
        by_steps: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
        for c in curves:
            if c.search:
                by_calls[c.agent].append([(p[0], p[2]) for p in c.points])
            by_steps[c.agent].append([(p[1], p[2]) for p in c.points])
        with replacing(out_dir, "best_so_far.png") as temporary:
            plot_best_so_far(by_calls, by_steps, temporary, title=config.name)
    if log is not None:
        log(markdown)
        log(f"written: {out_dir}/search_summary.md, rounds.csv, best_so_far.png")
    return markdown


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m langadapt.experiments.search_report RESULTS_FOLDER")
    write_search_report(sys.argv[1])
