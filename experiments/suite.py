"""A suite: an experiment file with a ``tasks`` block runs one experiment per task into
``<output>/<task>/`` (:func:`run_suite`), then :func:`write_suite_report` writes ``suite.md``,
``suite.csv`` and ``performance_profile.png`` in ``<output>/`` (BALROG's figures beside them
on its level); :func:`merge_suites` puts several suite folders in one table. Every table and
rule: docs/configuration.md (Suites and held-out episodes).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from ..environments.minigrid import GOAL_TYPES
from .config import experiment_from_dict, load_config
from .folders import (
    ResultsFolderError,
    folder_lock,
    inside,
    refuse_inside_results,
    replacing,
    write_text,
    writing,
)
from .llm_rows import fallback_mark, fallback_notes, fallback_share, row_models
from .plots import plot_performance_profile
from .report import ci_text, text_cell, write_report
from .results import check_results, read_episodes
from .runner import check_environments, run_experiment
from .schema import ConfigError, ExperimentConfig
from .stats import BALROG_BABYAI, Cost, aggregate_estimates, folder_costs, require_rliable

__all__ = ["BALROG_BABYAI", "SUITE_FILE", "merge_suites", "run_suite", "task_configs",
           "write_suite_report"]

SUITE_FILE = "suite.yaml"


def task_dir(out_dir: Path, task: str) -> Path:
    """A suite's task folder, refused when it is a symbolic link: a suite is read and written
    only inside itself (a link would send another experiment's rows in, or writes out)."""
    return inside(out_dir, task, "remove the link; a task's results live in the suite folder")

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
    built: set[str] = set()  # an agent on the same spaces is built once for every task
    for task, experiment in experiments.items():  # a bad task fails before any training
        try:
            check_environments(experiment, built)
        except ConfigError as error:
            raise ConfigError(f"{config.name}, task {task}: {error}") from None
    out_dir = Path(out_dir) if out_dir is not None else config.output_dir
    folders = {task: task_dir(out_dir, task) for task in experiments}  # --force follows no link
    for task, experiment in experiments.items():
        log(f"suite {config.name}: task {task}")
        run_experiment(experiment, out_dir=folders[task], resume=resume, force=force,
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
        path = task_dir(out_dir, task) / "episodes.csv"
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
    return ci_text(point, low, high, form=".1f", scale=100, none="—")


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


BALROG_TASKS = ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")
"""BALROG's five BabyAI tasks, by the task names of ``configs/babyai_suite.yaml``."""
BALROG_EPISODES = 10
"""BALROG's episodes per task."""
BALROG_LEVEL = ("BabyAI-MixedTrainLocal-v0", {"num_dists": 0})
"""BALROG's level: the environment id's ending and its params."""

Source = tuple[ExperimentConfig, Path, str]
"""A suite folder in a table: its suite file, the folder, the prefix of its adapter names."""


def balrog_level(config: ExperimentConfig) -> bool:
    """Whether the suite plays BALROG's BabyAI environment (its params aside: they are in
    :func:`protocol_vs_balrog`)."""
    return config.environment.id.endswith(BALROG_LEVEL[0])


def protocol_vs_balrog(config: ExperimentConfig) -> str:
    """``same`` or how a suite's protocol differs from BALROG's (level, tasks, episodes)."""
    params = config.environment.params
    parts = [] if params == BALROG_LEVEL[1] else [f"params {params} (BALROG: {BALROG_LEVEL[1]})"]
    tasks = list(config.tasks or {})
    if sorted(tasks) != sorted(BALROG_TASKS):
        parts.append(f"tasks {', '.join(tasks)} (BALROG: its {len(BALROG_TASKS)})")
    episodes = config.evaluation.final_episodes
    if episodes != BALROG_EPISODES:
        parts.append(f"{episodes} episodes per task (BALROG: {BALROG_EPISODES})")
    return "; ".join(parts) or "same"


def _episodes_text(config: ExperimentConfig) -> str:
    held = config.evaluation.heldout_seeds
    return (f"held-out seeds [{held.first}, {held.first + held.count}), {held.count} "
            "episodes per task and run, the same for every row" if held is not None else
            f"{config.evaluation.final_episodes} final episodes per task and run")


def suite_costs(config: ExperimentConfig, out_dir: Path) -> dict[tuple[str, str], Cost]:
    """Per adapter x agent, what its runs cost over the suite's tasks (stats.folder_costs)."""
    total: dict[tuple[str, str], Cost] = {}
    for task in config.tasks or {}:
        folder = task_dir(out_dir, task)
        if (folder / "config.yaml").is_file():
            task_config = load_config(folder / "config.yaml", data_only=True)
            for key, cost in folder_costs(task_config, folder).items():
                total[key] = total.get(key, Cost()) + cost
    return total


def suite_markdown(config: ExperimentConfig, out_dir: Path) -> tuple[str, list[list[str]],
                                                                    dict[str, np.ndarray]]:
    """(suite.md, suite.csv rows, the runs x tasks matrices of the performance profile)."""
    return suite_tables([(config, Path(out_dir), "")],
                        f"# {config.name} — {config.environment.id} suite")


def suite_tables(sources: list[Source], title: str) -> tuple[str, list[list[str]],
                                                              dict[str, np.ndarray]]:
    """:func:`suite_markdown` of one or more suite folders: their rows in one table, tasks
    matched by name (a row's suite IQM and mean are over its own suite's tasks)."""
    tasks = list(dict.fromkeys(t for config, _, _ in sources for t in config.tasks or {}))
    found: dict[tuple[str, str], tuple[Outcomes, ExperimentConfig]] = {}
    costs: dict[tuple[str, str], Cost] = {}
    models: dict[tuple[str, str], str] = {}
    for config, folder, prefix in sources:
        for (adapter, agent), outcomes in _outcomes(folder, list(config.tasks or {})).items():
            found[(prefix + adapter, agent)] = (outcomes, config)
            models[(prefix + adapter, agent)] = row_models(config, adapter,
                                                           agent.removesuffix(" (best)"))
        costs.update({(prefix + a, agent): cost
                      for (a, agent), cost in suite_costs(config, folder).items()})
    named = any(models.values())
    texts = list(dict.fromkeys(_episodes_text(config) for config, _, _ in sources))
    episodes = texts[0] if len(texts) == 1 else "each row's own episodes (see its protocol)"
    balrog = any(balrog_level(config) for config, _, _ in sources)
    lines = [title, "",
             f"Greedy success (%) of the final policy on {episodes}. Per task: mean over runs "
             "with a stratified bootstrap 95% interval (one run: over its episodes). Suite: "
             "IQM and mean over runs x tasks, rliable's stratified bootstrap 95% intervals. "
             "LLM calls, LLM s (waiting for answers) and CPU s: totals over the row's runs."
             + (" Rows `<agent> (best)`: the policy of the best evaluation during training "
                "(evaluation.keep_best; chosen on the training-time evaluation episodes, "
                "never on the held-out ones), on the same episodes."
                if any(config.evaluation.keep_best for config, _, _ in sources) else "")
             + (" Model: the LLMs a row asks (backend and model, as its file names them)."
                if named else ""), "",
             "| adapter | agent | " + ("model | " if named else "") + " | ".join(tasks)
             + " | suite IQM | suite mean | runs | intervals over | LLM calls | LLM s | CPU s |"
             + (" protocol vs BALROG |" if balrog else ""),
             "|---|---|" + ("---|" if named else "") + "---|" * len(tasks)
             + "---|---|---|---|---:|---:|---:|" + ("---|" if balrog else "")]
    rows, profiles = [["adapter", "agent", "task", "seed", "success_rate", "episodes"]], {}
    for (adapter, agent), (outcomes, config) in sorted(found.items(),
                                                       key=lambda item: item[0][1]):
        own = list(config.tasks or {})
        cells, iqm, mean, runs, over = _method_row(outcomes, own)
        by_task = dict(zip(own, cells, strict=True))
        cost = costs.get((adapter, agent.removesuffix(" (best)")), Cost.unknown())
        mark = fallback_mark(fallback_share(cost.fallbacks))
        model = f"{models[(adapter, agent)] or '—'} | " if named else ""
        lines.append(f"| {adapter} | {agent}{mark} | {model}"
                     + " | ".join(by_task.get(t, "—") for t in tasks)
                     + f" | {iqm} | {mean} | {runs} | {over} | {cost.cells()} |"
                     + (f" {protocol_vs_balrog(config)} |" if balrog else ""))
        for task in own:
            for seed, successes in sorted(outcomes.get(task, {}).items()):
                rows.append([adapter, agent, task, str(seed), repr(float(np.mean(successes))),
                             str(len(successes))])
        seeds = sorted(set.intersection(*(set(outcomes.get(t, {})) for t in tasks)))
        if seeds:
            profiles[f"{adapter} / {agent}"] = np.array(
                [[np.mean(outcomes[t][s]) for t in tasks] for s in seeds])
    notes = fallback_notes({key: cost.fallbacks for key, cost in costs.items()})
    if notes:
        lines += ["", *notes]
    missing = [prefix + t for config, folder, prefix in sources for t in config.tasks or {}
               if not (task_dir(folder, t) / "episodes.csv").is_file()]
    if missing:
        lines += ["", f"Tasks without results yet: {', '.join(missing)}."]
    if balrog:
        lines += ["", "BALROG's leaderboard, zero-shot on the same level (BabyAI "
                  "MixedTrainLocal, num_dists 0; progression = success, %, ± standard error "
                  "as published; experiments/stats.py); a row whose protocol is not `same` "
                  "is not measured as they are:", "",
                  "| model | date | BabyAI | episodes per task | "
                  + " | ".join(GOAL_TYPES) + " |", "|---|---|---|---:|" + "---:|" * 5]
        lines += [f"| {b.model} | {b.date} | {b.average:.1f} ± {b.se:.1f} | "
                  f"{b.episodes_per_task} | "
                  + " | ".join("–" if v is None else f"{v:.0f}" for v in
                               (b.tasks or (None,) * 5)) + " |" for b in BALROG_BABYAI]
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
    folders = [task_dir(out_dir, task) for task in config.tasks or {}]  # all, before a write
    for folder in folders if task_reports else []:
        if (folder / "episodes.csv").is_file():
            write_report(folder, log=None)
    markdown, rows, profiles = suite_markdown(config, out_dir)
    _write_suite(out_dir, f"free some space and rebuild: langadapt report {out_dir}",
                 markdown, rows, profiles, config.name, log)
    return markdown


def _write_suite(out_dir: Path, again: str, markdown: str, rows: list[list[str]],
                 profiles: dict[str, np.ndarray], title: str,
                 log: Callable[[str], None] | None) -> None:
    """``suite.csv`` (names as text, never formulas), ``suite.md`` and the profile, holding
    the folder's lock (one writer, as in a results folder)."""
    with writing(out_dir, again), folder_lock(out_dir):
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(
            [[text_cell(c) for c in row[:3]] + row[3:] for row in rows])
        write_text(out_dir, "suite.csv", text.getvalue())
        write_text(out_dir, "suite.md", markdown)
        if profiles:
            with replacing(out_dir, "performance_profile.png") as temporary:
                plot_performance_profile(profiles, temporary, title=title)
    if log is not None:
        log(markdown)
        log(f"written: {out_dir}/suite.md, suite.csv"
            + (", performance_profile.png" if profiles else ""))


def merge_suites(folders: list[Path], out_dir: Path,
                 log: Callable[[str], None] | None = print) -> str:
    """``langadapt report A B``: the rows of several suite folders in one suite table,
    adapters named ``<folder>/<adapter>``, tasks matched by name (``suite.md``, ``suite.csv``
    and ``performance_profile.png`` in ``out_dir``; the folders are only read). Suites of
    different environments, or one task name with different params, are refused."""
    require_rliable()
    names = [folder.name for folder in folders]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ResultsFolderError(f"folders named {', '.join(repeated)} twice: their rows "
                                 "would share names; copy or rename one")
    configs = [load_config(folder / SUITE_FILE, data_only=True) for folder in folders]
    levels = [f"{c.environment.id} {c.environment.params}" for c in configs]
    if len(set(levels)) > 1:
        raise ResultsFolderError("suites of different environments (their tasks are not the "
                                 "same tasks): " + "; ".join(
                                     f"{folder}: {level}" for folder, level in
                                     zip(folders, levels, strict=True)))
    seen: dict[str, tuple[Path, dict]] = {}
    for folder, config in zip(folders, configs, strict=True):
        for task, params in (config.tasks or {}).items():
            first = seen.setdefault(task, (folder, params))
            if first[1] != params:
                raise ResultsFolderError(f"task {task} is {first[1]} in {first[0]} but {params} "
                                         f"in {folder}: not the same task")
            if (task_dir(folder, task) / "episodes.csv").is_file():
                check_results(folder / task)  # cut or crafted rows: refused before the table
    refuse_inside_results(out_dir, "a merged table")
    sources = [(config, folder, f"{folder.name}/")
               for folder, config in zip(folders, configs, strict=True)]
    markdown, rows, profiles = suite_tables(sources, "# suites: " + ", ".join(names))
    again = f"free some space and merge again into --out {out_dir}"
    with writing(out_dir, again):
        inside(out_dir.parent, out_dir.name).mkdir(parents=True, exist_ok=True)
    _write_suite(out_dir, again, markdown, rows, profiles, ", ".join(names), log)
    return markdown
