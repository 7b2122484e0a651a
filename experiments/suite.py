"""A suite: one experiment per task, and one report across the tasks.

An experiment file with a ``tasks`` block (task name -> environment params added to the
file's own) is a suite, e.g. BALROG's BabyAI suite, ``configs/babyai_suite.yaml``::

    environment: {id: langadapt/BabyAI-MixedTrainLocal-v0, params: {num_dists: 0}}
    tasks: {goto: {goal: goto}, pickup: {goal: pickup}, ...}

:func:`run_suite` runs each task as an ordinary experiment into ``<output>/<task>/`` (its
own ``episodes.csv``, ``summary.md``, plots; ``--resume`` and ``--force`` apply to each)
and then :func:`write_suite_report` writes, in ``<output>/``:

- ``suite.md``: per adapter x agent, each task's final success (mean over runs, stratified
  bootstrap 95% interval) and the suite's IQM and mean over runs x tasks with rliable's
  stratified bootstrap intervals (with a single run, e.g. a zero-shot LLM: the mean and its
  interval over the held-out episodes of each task instead, no IQM); then BALROG's published
  zero-shot BabyAI figures (:data:`BALROG_BABYAI`) beside them;
- ``suite.csv``: one row per adapter, agent, task and seed (its success rate and episodes);
- ``performance_profile.png``: rliable's performance profiles over runs x tasks.

``suite.yaml`` is the resolved suite file; ``langadapt report <output>`` rebuilds every
task's report and the suite report from the episodes alone.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from .config import ConfigError, ExperimentConfig, experiment_from_dict, load_config
from .one_run import make_env
from .report import text_cell, write_report
from .results import read_episodes
from .results_io import ResultsFolderError, replacing, write_text, writing
from .runner import run_experiment
from .stats import aggregate_estimates, plot_performance_profile, require_rliable

__all__ = ["BALROG_BABYAI", "SUITE_FILE", "run_suite", "task_configs", "write_suite_report"]

SUITE_FILE = "suite.yaml"

#: BALROG's leaderboard, BabyAI (``MixedTrainLocal``, five goal types, ``num_dists: 0``):
#: zero-shot progression in % over 50 episodes (10 per task), ± standard error as published
#: (None: not given). On BabyAI progression is the success rate.
BALROG_BABYAI: tuple[tuple[str, float, float | None], ...] = (
    ("Llama-3.2-1B-Instruct", 6.0, 3.4),
    ("Llama-3.2-3B-Instruct", 10.0, 4.2),
    ("Llama-3.1-8B-Instruct", 30.0, 6.5),
    ("GPT-4o-mini", 50.4, None),
    ("GPT-4o", 77.6, 3.7),
)


def task_configs(config: ExperimentConfig) -> dict[str, ExperimentConfig]:
    """The experiment of each task of a suite: the file's environment params with the task's
    added, named ``<name>-<task>``, written to ``<output>/<task>/``."""
    if not config.tasks:
        raise ConfigError(f"experiment {config.name!r} has no tasks block: it is not a suite")
    experiments = {}
    for task, params in config.tasks.items():
        data = config.resolved()
        data.pop("tasks")
        data["name"] = f"{config.name}-{task}"
        data["output"] = str(config.output_dir / task)
        data["environment"]["params"] = {**data["environment"]["params"], **params}
        experiments[task] = experiment_from_dict(data, f"{config.name}, task {task}")
    return experiments


def run_suite(config: ExperimentConfig, out_dir: Path | None = None, resume: bool = False,
              force: bool = False, progress: bool = True,
              log: Callable[[str], None] = print) -> Path:
    """Run every task of the suite ``config`` (see the module docstring), then its report."""
    require_rliable()  # the suite report needs it: fail before hours of training
    experiments = task_configs(config)
    for task, experiment in experiments.items():  # a bad task fails before any training
        try:
            make_env(experiment).close()
        except ConfigError as error:
            raise ConfigError(f"{config.name}, task {task}: {error}") from None
    out_dir = Path(out_dir) if out_dir is not None else config.output_dir
    for task, experiment in experiments.items():
        log(f"suite {config.name}: task {task}")
        run_experiment(experiment, out_dir=out_dir / task, resume=resume, force=force,
                       progress=progress, log=log)
        # after a task's folder took this suite (a refused --resume leaves the old file)
        with writing(out_dir, "free some space and run again with --resume"):
            write_text(out_dir, SUITE_FILE,
                       yaml.safe_dump(config.resolved(), sort_keys=False, allow_unicode=True))
    write_suite_report(out_dir, log=log, task_reports=False)
    return out_dir


# ----------------------------------------------------------------------------- the report


Outcomes = dict[str, dict[int, list[bool]]]
"""task -> seed -> the final evaluation's successes, of one adapter x agent (the agent
named ``<agent> (best)`` for the policy ``evaluation.keep_best`` kept)."""


def _outcomes(out_dir: Path, tasks: list[str]) -> dict[tuple[str, str], Outcomes]:
    found: dict[tuple[str, str], Outcomes] = defaultdict(lambda: defaultdict(dict))
    for task in tasks:
        path = out_dir / task / "episodes.csv"
        if not path.is_file():
            continue
        by_run: dict[tuple[str, str, int], list[bool]] = defaultdict(list)
        for e in read_episodes(path):
            if e.phase in ("final", "best"):
                agent = e.agent if e.phase == "final" else f"{e.agent} (best)"
                by_run[(e.adapter, agent, e.seed)].append(bool(e.success))
        for (adapter, agent, seed), successes in by_run.items():
            found[(adapter, agent)][task][seed] = successes
    return found


def _pct(point: float, low: float = float("nan"), high: float = float("nan")) -> str:
    if np.isnan(point):
        return "—"
    if np.isnan(low):
        return f"{100 * point:.1f}"
    return f"{100 * point:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _method_row(outcomes: Outcomes, tasks: list[str]) -> tuple[list[str], str, str, int, str]:
    """(per-task cells, suite IQM, suite mean, runs, what the intervals resample)."""
    seeds = sorted(set.intersection(*(set(outcomes.get(t, {})) for t in tasks)))
    cells = []
    for task in tasks:
        runs = outcomes.get(task, {})
        rates = np.array([[np.mean(v)] for v in runs.values()])
        if not len(rates):
            cells.append("—")
        elif len(rates) > 1:
            cells.append(_pct(*aggregate_estimates(rates)["mean"]))
        else:
            episodes = np.array(next(iter(runs.values())), dtype=float)[:, None]
            cells.append(_pct(*aggregate_estimates(episodes)["mean"]))
    if not seeds:
        return cells, "—", "—", 0, "no run has every task"
    if len(seeds) > 1:
        scores = np.array([[np.mean(outcomes[t][s]) for t in tasks] for s in seeds])
        estimates = aggregate_estimates(scores)
        return cells, _pct(*estimates["iqm"]), _pct(*estimates["mean"]), len(seeds), "runs"
    counts = {len(outcomes[t][seeds[0]]) for t in tasks}
    if len(counts) != 1:
        point = float(np.mean([np.mean(outcomes[t][seeds[0]]) for t in tasks]))
        return cells, "—", _pct(point), 1, "none (tasks have unequal episode counts)"
    episodes = np.array([outcomes[t][seeds[0]] for t in tasks], dtype=float).T
    return cells, "—", _pct(*aggregate_estimates(episodes)["mean"]), 1, "episodes (one run)"


def suite_markdown(config: ExperimentConfig, out_dir: Path) -> tuple[str, list[list[str]],
                                                                    dict[str, np.ndarray]]:
    """(suite.md, suite.csv rows, the runs x tasks matrices of the performance profile)."""
    tasks = list(config.tasks or {})
    found = _outcomes(out_dir, tasks)
    held = config.evaluation.heldout_seeds
    episodes = (f"held-out seeds [{held.first}, {held.first + held.count}), {held.count} "
                "episodes per task and run, the same for every row" if held is not None else
                f"{config.evaluation.final_episodes} final episodes per task and run")
    lines = [f"# {config.name} — {config.environment.id} suite", "",
             f"Greedy success (%) of the final policy on {episodes}. Per task: mean over runs "
             "with a stratified bootstrap 95% interval (one run: over its episodes). Suite: "
             "IQM and mean over runs x tasks, rliable's stratified bootstrap 95% intervals."
             + (" Rows `<agent> (best)`: the policy of the best evaluation during training "
                "(evaluation.keep_best; chosen on the training-time evaluation episodes, "
                "never on the held-out ones), on the same episodes."
                if config.evaluation.keep_best else ""), "",
             "| adapter | agent | " + " | ".join(tasks) + " | suite IQM | suite mean | runs "
             "| intervals over |",
             "|---|---|" + "---|" * len(tasks) + "---|---|---|---|"]
    rows, profiles = [["adapter", "agent", "task", "seed", "success_rate", "episodes"]], {}
    for (adapter, agent), outcomes in sorted(found.items(), key=lambda item: item[0][1]):
        cells, iqm, mean, runs, over = _method_row(outcomes, tasks)
        lines.append(f"| {adapter} | {agent} | " + " | ".join(cells)
                     + f" | {iqm} | {mean} | {runs} | {over} |")
        for task in tasks:
            for seed, successes in sorted(outcomes.get(task, {}).items()):
                rows.append([adapter, agent, task, str(seed), repr(float(np.mean(successes))),
                             str(len(successes))])
        seeds = sorted(set.intersection(*(set(outcomes.get(t, {})) for t in tasks)))
        if seeds:
            profiles[f"{adapter} / {agent}"] = np.array(
                [[np.mean(outcomes[t][s]) for t in tasks] for s in seeds])
    missing = [t for t in tasks if not (out_dir / t / "episodes.csv").is_file()]
    if missing:
        lines += ["", f"Tasks without results yet: {', '.join(missing)}."]
    lines += ["", "BALROG's published zero-shot figures on the same level (BabyAI "
              "MixedTrainLocal, num_dists 0; progression = success, %, 50 episodes: 10 per "
              "task, ± standard error as published):", "",
              "| model | BALROG BabyAI |", "|---|---|"]
    lines += [f"| {model} | {score:.1f}" + (f" ± {se:.1f}" if se is not None else "") + " |"
              for model, score, se in BALROG_BABYAI]
    return "\n".join(lines) + "\n", rows, profiles


def write_suite_report(out_dir: Path | str, log: Callable[[str], None] | None = print,
                       task_reports: bool = True) -> str:
    """(Re)build ``suite.md``, ``suite.csv`` and ``performance_profile.png`` of a suite
    folder (and, with ``task_reports``, every task's own report first)."""
    out_dir = Path(out_dir)
    if not (out_dir / SUITE_FILE).is_file():
        raise ResultsFolderError(f"{out_dir} is not a langadapt suite folder: expected "
                                 f"{SUITE_FILE}")
    require_rliable()
    config = load_config(out_dir / SUITE_FILE, data_only=True)
    if task_reports:
        for task in config.tasks or {}:
            if (out_dir / task / "episodes.csv").is_file():
                write_report(out_dir / task, log=None)
    markdown, rows, profiles = suite_markdown(config, out_dir)
    with writing(out_dir, f"free some space and rebuild: langadapt report {out_dir}"):
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(  # names as text, never formulas
            [[text_cell(c) for c in row[:3]] + row[3:] for row in rows])
        write_text(out_dir, "suite.csv", text.getvalue())
        write_text(out_dir, "suite.md", markdown)
        if profiles:
            with replacing(out_dir, "performance_profile.png") as temporary:
                plot_performance_profile(profiles, temporary, title=config.name)
    if log is not None:
        log(markdown)
        log(f"written: {out_dir}/suite.md, suite.csv" +
            (", performance_profile.png" if profiles else ""))
    return markdown
