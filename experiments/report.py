"""The report writer: ``summary.csv``, ``summary.md`` and the plots of a results folder
(:func:`write_report`), of several folders (:func:`compare_folders`), and the policy-search
report (:func:`write_search_report`). Computed from ``episodes.csv`` and ``runs/*/done.json``
alone, after :func:`.results.check_results`; written whole through :mod:`.folders`; a CSV cell
is text, never a formula; a rebuild gives the same files (``python -m
langadapt.experiments.report DIR``). Tables and columns: docs/configuration.md,
docs/policy-search.md.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import numpy as np

from ..environments.minigrid import GOAL_TYPES
from .folders import (
    ResultsFolderError,
    bounded,
    folder_lock,
    inside,
    refuse_inside_results,
    refuse_links,
    replacing,
    write_csv,
    write_text,
    writing,
)
from .llm_rows import Fallbacks, description_notes, fallback_mark, fallback_notes
from .plots import plot_best_so_far, plot_final_returns, plot_learning_curves
from .results import (
    MAX_EPISODES_BYTES,
    MAX_RECORD_BYTES,
    NOT_FINISHED,
    Episode,
    check_results,
    folder_config,
    read_episodes,
    read_run_record,
    runs_of,
)
from .stats import (
    BALROG_BABYAI,
    FEW_SEEDS,
    SUMMARY_COLUMNS,
    StatsNotInstalled,
    SummaryRow,
    aggregate_estimates,
    folder_costs,
    goals_markdown,
    mean_and_interval,
    require_rliable,
    seed_scores,
    summarise,
)

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""Cell starts that make a spreadsheet read text as a formula (OWASP, CSV injection)."""
MAX_COMPARED_ROWS = 500_000
"""Most rows of episodes.csv a comparison reads over all its folders (about 1 KB of memory
each while summarised)."""
CALL_MARKS = (10, 30, 100)
ROUND_COLUMNS = ("adapter", "agent", "seed", "round", "proposer", "requests", "corrections",
                 "skipped", "prompt_chars", "evaluated_return", "kept", "best_return",
                 "env_steps", "requests_total", "llm_calls_total", "llm_seconds", "error",
                 "proposal")


def text_cell(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet shows as text: ``'`` before a formula start."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _cell(value: float | int | str) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4f}"
    return text_cell(value) if isinstance(value, str) else str(value)


TRAINING_COLUMNS = ("best_chosen_at", "episodes_to_threshold", "steps_to_threshold",
                    "seeds_reaching_threshold", "train_wall_time_s", "llm_calls", "cache_hits",
                    "llm_fallbacks", "llm_seconds", "cpu_seconds", "llm_fallback_share")
"""Columns of ``summary.csv`` that describe training: empty in the rows of kept policies
played again (``langadapt evaluate``), which trained nothing."""


def write_summary_csv(rows: list[SummaryRow], path: Path,
                      evaluated: Collection[tuple[str, str]] = ()) -> None:
    """``summary.csv``; the :data:`TRAINING_COLUMNS` empty in the ``evaluated`` rows
    (adapter, agent)."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUMMARY_COLUMNS)
        writer.writerows([
            "" if (row.adapter, row.agent) in evaluated and key in TRAINING_COLUMNS
            else _cell(v) for key, v in dataclasses.asdict(row).items()] for row in rows)


def evaluated_folder(folder: Path) -> bool:
    """Whether ``folder`` holds kept policies played again (``langadapt evaluate``), not
    training: its runs' ``done.json`` name the run folder they were evaluated from."""
    return any("evaluated_from" in (read_run_record(path) or {})
               for path in (folder / "runs").glob("*/done.json"))


def ci_text(point: float, low: float = math.nan, high: float = math.nan, form: str = ".3f",
        scale: float = 1.0, none: str = "") -> str:
    """``point [low, high]`` (``none`` for a nan point, no interval for a nan ``low``)."""
    if math.isnan(point):
        return none
    interval = "" if math.isnan(low) else f" [{scale * low:{form}}, {scale * high:{form}}]"
    return f"{scale * point:{form}}{interval}"


def _count(value: float, noun: str) -> str:
    return f"{value:.0f} {noun}" + ("" if round(value) == 1 else "s")


def summary_markdown(rows: list[SummaryRow], title: str, threshold: float | None,
                     fallbacks: dict[tuple[str, str], Fallbacks] | None = None,
                     evaluated: Collection[tuple[str, str]] = (),
                     descriptions: dict[tuple[str, str], Sequence[tuple[int, int]]] | None = None
                     ) -> str:
    """The summary table of ``summary.md``, a row whose LLM roles fell back marked and
    ``fallbacks`` (per adapter x agent, :mod:`.llm_rows`) said under it. ``evaluated``: the
    (adapter, agent) rows of kept policies played again (``langadapt evaluate``): their
    training cells (threshold, time, cost) are "–", and a table of such rows only has none
    of those columns."""
    target = ("every evaluation episode succeeds" if threshold is None
              else f"mean return >= {threshold}")
    retained = any(not math.isnan(r.best_return_mean) for r in rows)
    trained = not rows or any((r.adapter, r.agent) not in evaluated for r in rows)
    lines = [f"# {title}", "",
             "| adapter | agent | seeds | final policy greedy return, mean [95% CI] | success |"
             + (" retained policy return | success |" if retained else "")
             + (" chosen after (episodes) |" if retained and trained else "")
             + (f" episodes to threshold ({target}), median (seeds reaching) | steps to "
                "threshold, median | train wall time (s) | LLM calls | LLM s | CPU s | cache "
                "hits |" if trained else ""),
             "|---|---|---:|---:|---:|" + ("---:|---:|" if retained else "")
             + ("---:|" if retained and trained else "")
             + ("---:|---:|---:|---:|---:|---:|---:|" if trained else "")]
    for r in rows:
        none = (r.adapter, r.agent) in evaluated
        to_threshold = (f"never (0/{r.seeds})" if r.seeds_reaching_threshold == 0 else
                        f"{ci_text(r.episodes_to_threshold, form='.0f', none='never')} "
                        f"({r.seeds_reaching_threshold}/{r.seeds})")
        best = (f" {ci_text(r.best_return_mean, r.best_return_low, r.best_return_high)} |"
                f" {ci_text(r.best_success_rate, form='.0%')} |" if retained else "")
        if retained and trained:
            best += f" {'–' if none else ci_text(r.best_chosen_at, form='.0f')} |"
        training = ("" if not trained else " – | – | – | – | – | – | – |" if none else
                    f" {to_threshold} | "
                    f"{ci_text(r.steps_to_threshold, form=',.0f', none='never')} | "
                    f"{r.train_wall_time_s:.1f} | {r.llm_calls} | "
                    f"{ci_text(r.llm_seconds, form='.1f')} | "
                    f"{ci_text(r.cpu_seconds, form='.1f')} | {r.cache_hits} |")
        lines.append(
            f"| {r.adapter} | {r.agent}{fallback_mark(r.llm_fallback_share)} | {r.seeds} | "
            f"{ci_text(r.final_return_mean, r.final_return_low, r.final_return_high)} | "
            f"{r.final_success_rate:.0%} |{best}{training}")
    if evaluated and any((r.adapter, r.agent) in evaluated for r in rows):
        lines += ["", "Kept policies played again (`langadapt evaluate`)"
                  + (": " if not trained else ", the rows marked –: ")
                  + "nothing was trained, so there is no threshold, training time or cost; "
                  "those of the training are in its own folder's summary."]
    notes = fallback_notes(fallbacks or {}) + description_notes(descriptions or {})
    lines += ["", *notes, *([""] if notes else []),
              "Intervals: 95% percentile bootstrap over seeds of each seed's mean return."
              + (" LLM calls, LLM s (waiting for answers), CPU s and cache hits: totals over "
                 "the seeds' runs." if trained else "")]
    few = sorted({r.seeds for r in rows if r.seeds < FEW_SEEDS})
    if few:
        lines.append(
            f"Fewer than {FEW_SEEDS} seeds ({', '.join(map(str, few))}): the intervals are "
            "rough, read them as the spread of the seeds, not as a precise confidence interval.")
    if retained:
        lines.append(
            "Retained policy: the policy of the best greedy evaluation during training "
            "(keep_best), scored on the same final episodes as the final policy"
            + ("; chosen after: median over seeds of the training episodes done at that "
               "evaluation." if trained else "."))
    return "\n".join(lines) + "\n"


def seed_scores_markdown(episodes: Sequence[Episode],
                         marks: dict[tuple[str, str], str] | None = None) -> str:
    """Final success per adapter x agent (its fallback ``marks``) as IQM and mean over seeds
    (rliable), or one line naming the ``stats`` extra without it."""
    scores = seed_scores(episodes)
    if not scores:
        return ""
    try:
        require_rliable()
    except StatsNotInstalled as error:
        return f"\n{error}\n"
    lines = ["", "Final success (%) over seeds, rliable: IQM and mean with stratified "
             "bootstrap 95% intervals (none with one seed).", "",
             "| adapter | agent | seeds | IQM | mean |", "|---|---|---|---|---|"]
    for (adapter, agent), by_seed in scores.items():
        estimates = aggregate_estimates(np.array(list(by_seed.values()))[:, None])
        iqm, mean = (ci_text(*estimates[k], form=".1f", scale=100) for k in ("iqm", "mean"))
        lines.append(f"| {adapter} | {agent}{(marks or {}).get((adapter, agent), '')} | "
                     f"{len(by_seed)} | {iqm} | {mean} |")
    return "\n".join(lines) + "\n"


def prerender_markdown(path: Path) -> str:
    """What prerendering cost (before training), if it ran."""
    if not path.is_file():
        return ""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    passes = json.loads(bounded(path, MAX_RECORD_BYTES).read_text())
    for one in passes:
        for adapter, stats in one["adapters"].items():
            for key, value in stats.items():
                totals[adapter][key] += value
    lines = ["", f"Prerender ({len(passes)} pass{'es' if len(passes) != 1 else ''}, before "
             "training; not in the table's counts):"]
    for adapter, stats in totals.items():
        encoded = _count(stats["encoder_calls"], "text") + " encoded"
        if stats["llm_calls"] or stats["llm_cache_hits"]:
            lines.append(f"- {adapter}: {_count(stats['llm_calls'], 'LLM call')} "
                         f"({stats['llm_seconds']:.1f} s), "
                         f"{_count(stats['llm_cache_hits'], 'description')} from the cache, "
                         f"{encoded}")
        else:
            lines.append(f"- {adapter}: {encoded}, "
                         f"{_count(stats['embedding_cache_hits'], 'vector')} from the cache")
    return "\n".join(lines) + "\n"


def results_notes(failed: dict[str, str]) -> str:
    """The failed runs and those a stop left unfinished, in bold ('' when none)."""
    lines = [f"- **run {key} did not finish** and is not in the table (`--resume` goes on "
             f"with it): {error.removeprefix(NOT_FINISHED)}" if error.startswith(NOT_FINISHED)
             else f"- **run {key} failed** and is not in the table: {error}"
             for key, error in failed.items()]
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def _write_summary(out_dir: Path, rows: list[SummaryRow], markdown: str,
                   episodes: list[Episode], title: str, x_axis: str,
                   budgets: dict[str, int | None] | None = None,
                   evaluated: Collection[tuple[str, str]] = ()) -> None:
    with replacing(out_dir, "summary.csv") as temporary:
        write_summary_csv(rows, temporary, evaluated)
    write_text(out_dir, "summary.md", markdown)
    with replacing(out_dir, "learning_curves.png") as temporary:
        plot_learning_curves(episodes, temporary, title=title, x_axis=x_axis, budgets=budgets)
    with replacing(out_dir, "final_returns.png") as temporary:
        plot_final_returns(rows, temporary, title=title)


def write_report(out_dir: Path | str, log: Callable[[str], None] | None = print
                 ) -> list[SummaryRow]:
    """(Re)build ``summary.csv``, ``summary.md`` and the plots from ``episodes.csv``."""
    out_dir = Path(out_dir)
    if not (out_dir / "config.yaml").is_file():  # before the lock: never a lock file elsewhere
        raise ResultsFolderError(f"{out_dir} is not a langadapt results folder: expected "
                                 "config.yaml and episodes.csv")
    again = f"free some space (or fix the folder) and rebuild: langadapt report {out_dir}"
    with writing(out_dir, again), folder_lock(out_dir):
        refuse_links(out_dir)
        failed = check_results(out_dir)  # episodes.csv against config.yaml and runs/*/done.json
        config = folder_config(out_dir)
        threshold = config.evaluation.threshold
        episodes = read_episodes(out_dir / "episodes.csv")
        costs = folder_costs(config, out_dir)
        rows = summarise(episodes, threshold, costs)
        evaluated = {(r.adapter, r.agent) for r in rows} if evaluated_folder(out_dir) else set()
        params = " ".join(f"{k}={v}" for k, v in config.environment.params.items())
        title = f"{config.name} — {config.environment.id} {params}".strip()
        sampled = [a.name for a in config.agents if (a.params or {}).get("deterministic") is False]
        marks = {(r.adapter, r.agent): fallback_mark(r.llm_fallback_share) for r in rows}
        markdown = (summary_markdown(rows, title, threshold,
                                     {key: cost.fallbacks for key, cost in costs.items()},
                                     evaluated,
                                     {key: cost.descriptions for key, cost in costs.items()})
                    + (f"Sampled, not greedy: {', '.join(sampled)} (`deterministic: false`) act "
                       "in every evaluation by sampling their policy's legal actions.\n"
                       if sampled else "")
                    + seed_scores_markdown(episodes, marks)
                    + goals_markdown(config, episodes, [
                        (b.model, dict(zip(GOAL_TYPES, b.tasks, strict=True)))
                        for b in BALROG_BABYAI if b.tasks is not None], marks)
                    + prerender_markdown(out_dir / "prerender.json")
                    + results_notes(failed))
        in_steps = all(config.training_for(agent).steps for agent in config.agents)
        budgets = {agent.name: (config.training_for(agent).steps if in_steps
                                else config.training_for(agent).episodes)
                   for agent in config.agents}
        _write_summary(out_dir, rows, markdown, episodes, title,
                       "steps" if in_steps else "episodes", budgets, evaluated)
    if log is not None:
        log(markdown)
        log(f"written: {out_dir}/summary.csv, summary.md, learning_curves.png, final_returns.png")
    return rows


def compare_folders(folders: list[Path], out_dir: Path) -> str:
    """``langadapt report A B --out D``: the folders' rows in one summary, adapters named
    ``<folder>/<adapter>`` (the folders are only read; ``D`` is never a results folder)."""
    names = [folder.name for folder in folders]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ResultsFolderError(f"folders named {', '.join(repeated)} twice: their adapters "
                                 "would share names; copy or rename one")
    rows = sum(_rows(bounded(folder / "episodes.csv", MAX_EPISODES_BYTES))
               for folder in folders if (folder / "episodes.csv").is_file())
    if rows > MAX_COMPARED_ROWS:
        raise ResultsFolderError(f"{', '.join(map(str, folders))}: {rows:,} rows of "
                                 f"episodes.csv in all; a comparison reads at most "
                                 f"{MAX_COMPARED_ROWS:,}: compare fewer folders")
    episodes: list[Episode] = []
    in_steps, thresholds, costs, environments = [], set(), {}, {}
    evaluated: set[tuple[str, str]] = set()
    for folder in folders:
        config = folder_config(folder, "episodes.csv")
        check_results(folder)  # crafted or cut rows: refused before they are summarised
        these = [dataclasses.replace(e, adapter=f"{folder.name}/{e.adapter}")
                 for e in read_episodes(folder / "episodes.csv")]
        episodes += these
        if evaluated_folder(folder):
            evaluated |= {(e.adapter, e.agent) for e in these}
        in_steps.append(all(config.training_for(agent).steps for agent in config.agents))
        thresholds.add(config.evaluation.threshold)
        costs.update({(f"{folder.name}/{adapter}", agent): cost
                      for (adapter, agent), cost in folder_costs(config, folder).items()})
        environments[folder] = f"{config.environment.id} {config.environment.params}"
    threshold = thresholds.pop() if len(thresholds) == 1 else None
    refuse_inside_results(out_dir, "a comparison")
    rows = summarise(episodes, threshold, costs)
    title = "compared: " + ", ".join(names)
    markdown = summary_markdown(rows, title, threshold,
                                {key: cost.fallbacks for key, cost in costs.items()}, evaluated,
                                {key: cost.descriptions for key, cost in costs.items()})
    if len(set(environments.values())) > 1:
        markdown += ("\nThe folders' environments differ: "
                     + "; ".join(f"{folder}: {env}" for folder, env in environments.items())
                     + ".\n")
    with writing(out_dir, f"free some space and compare again into --out {out_dir}"):
        inside(out_dir.parent, out_dir.name).mkdir(parents=True, exist_ok=True)
        with folder_lock(out_dir):
            _write_summary(out_dir, rows, markdown, episodes, title,
                           "steps" if all(in_steps) else "episodes", evaluated=evaluated)
    return markdown


def _rows(path: Path) -> int:
    """Lines of a CSV file after its header, counted without parsing it."""
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b"")) - 1


@dataclasses.dataclass
class RunCurve:
    """One run's best-so-far return: ``(calls, steps, best)`` points in order."""

    agent: str
    seed: int
    search: bool
    points: list[tuple[int, int, float]] = dataclasses.field(default_factory=list)
    stats: dict[str, float] = dataclasses.field(default_factory=dict)

    def best_at(self, index: int, limit: float) -> float:
        """Best-so-far once ``calls`` (index 0) or ``steps`` (1) reached ``limit`` (nan
        before the first point, and for calls the run never reached)."""
        if index == 0 and (not self.points or self.points[-1][0] < limit):
            return math.nan
        best = math.nan
        for point in self.points:
            if point[index] > limit:
                break
            best = point[2]
        return best

    def steps_at(self, calls: int) -> float:
        """Environment steps used when the search had made ``calls`` calls (nan: never)."""
        return float(next((p[1] for p in self.points if p[0] >= calls), math.nan))


def run_curves(out_dir: Path) -> tuple[list[RunCurve], list[dict]]:
    """The curve of every finished run (a search's kept scores by round, a step-wise
    learner's best greedy evaluation so far), and every search round for ``rounds.csv``."""
    config = folder_config(out_dir)
    by_run: dict[tuple[str, str, int], list] = defaultdict(list)
    for e in read_episodes(out_dir / "episodes.csv"):
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


def _meanci_text(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    return ci_text(*mean_and_interval(values), form=".3g") if values else "–"


def search_markdown(curves: list[RunCurve], title: str) -> str:
    """``search_summary.md``: best-so-far return after N LLM calls, and at the environment
    steps the first LLM search had used by then."""
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
        steps = [c.points[-1][1] if c.points else math.nan for c in mine]
        total = {key: sum(c.stats.get(key, 0) for c in mine)
                 for key in ("skipped_rounds", "llm_calls", "llm_cache_hits", "llm_seconds")}
        lines.append(
            f"| {agent} | {len(mine)} | "
            + " | ".join(_meanci_text([c.best_at(0, k) for c in mine]) for k in calls)
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
            lines.append(f"| {agent} | {len(mine)} | " + " | ".join(
                _meanci_text([c.best_at(1, steps) for c in mine]) for _, steps in marks) + " |")
    return "\n".join(lines) + "\n"


def write_search_report(out_dir: Path | str, log: Callable[[str], None] | None = print) -> str:
    """Write ``search_summary.md``, ``rounds.csv`` and ``best_so_far.png``; returns the table."""
    out_dir = Path(out_dir)
    if not (out_dir / "config.yaml").is_file():  # before the lock: never a lock file elsewhere
        raise ResultsFolderError(f"{out_dir} is not a langadapt results folder: no config.yaml")
    again = ("free some space (or fix the folder) and rebuild: python -m "
             f"langadapt.experiments.report {out_dir}")
    with writing(out_dir, again), folder_lock(out_dir):
        refuse_links(out_dir)
        config = folder_config(out_dir)
        curves, rounds = run_curves(out_dir)
        markdown = search_markdown(curves, f"{config.name}: best-so-far return")
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
        sys.exit("usage: python -m langadapt.experiments.report RESULTS_FOLDER")
    write_report(sys.argv[1])
    if any(a.type == "llm_policy_search" for a in folder_config(Path(sys.argv[1])).agents):
        write_search_report(sys.argv[1])
