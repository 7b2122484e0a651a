"""Run an experiment: every (adapter x agent x seed) combination, written to disk as it goes.

Layout of a results folder::

    config.yaml               the resolved experiment (defaults filled in, seeds listed)
    runs/<run>/episodes.csv   one row per episode (process pool: appended and flushed as each
                              episode ends; Ray: written when the run's result arrives)
    runs/<run>/done.json      written when the run finished (rows, wall time, adapter counters)
    runs/<run>/failed.json    written instead when a Ray run failed (its error)
    prerender.json            what describing and encoding the reachable states cost, per pass
    episodes.csv              all runs' rows, in the experiment's order, once the runs end
    summary.csv, summary.md   per adapter x agent (see experiments.report)
    learning_curves.png, final_returns.png

A crash loses at most the runs in flight; ``resume=True`` keeps every finished run (a
``done.json`` whose ``episodes.csv`` has the rows it records) and redoes the others from
their start (an agent's half-trained weights are not saved).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from langadapt.experiments.config import (
    AdapterSpec,
    AgentSpec,
    ConfigError,
    ExperimentConfig,
    experiment_from_dict,
    load_config,
)

EPISODE_COLUMNS = (
    "adapter",
    "agent",
    "seed",
    "phase",
    "episode",
    "return",
    "length",
    "success",
    "wall_time",
    "llm_calls",
    "cache_hits",
    "llm_fallbacks",
)
"""Columns of ``episodes.csv``. ``phase`` is ``train``, ``eval`` (greedy evaluation during
training; ``episode`` is then the number of training episodes done), ``final`` (the
greedy evaluation of the final policy after training, ``episode`` likewise) or, with
``keep_best``, ``best`` (the same evaluation of the retained policy; ``episode`` is that of
the evaluation that chose it). ``llm_calls``
and ``cache_hits`` count what the episode cost the adapter: LLM requests made, and
lookups answered by the persistent description and embedding caches (the adapter's
in-memory memo, which serves repeated states within a run, is not counted);
``llm_fallbacks``: descriptions that came from the rule describer because the LLM failed."""


FINAL_EVAL_SEED = 10_000
"""The final greedy evaluation resets with ``seed + FINAL_EVAL_SEED`` (evaluations during
training use ``agents.training.EVAL_SEED_OFFSET``): held-out starts, the same for every run."""


class ResultsFolderError(ValueError):
    """A results folder that cannot be summarised as it is; the message says what to do."""


@dataclass(frozen=True)
class Run:
    """One (adapter, agent, seed) combination."""

    adapter: AdapterSpec
    agent: AgentSpec
    seed: int

    @property
    def key(self) -> str:
        return f"{self.adapter.name}__{self.agent.name}__seed{self.seed}"


def runs_of(config: ExperimentConfig) -> list[Run]:
    return [
        Run(adapter, agent, seed)
        for adapter in config.adapters
        for agent in config.agents
        for seed in config.seed_list
    ]


# ----------------------------------------------------------------------------- building


def make_env(config: ExperimentConfig, render_mode: str | None = None):
    import gymnasium

    import langadapt.environments  # noqa: F401  (registers the langadapt ids)

    params = dict(config.environment.params)
    if render_mode is not None:
        params["render_mode"] = render_mode
    try:
        return gymnasium.make(config.environment.id, **params)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"environment.params: {error}") from None


def adapter_settings(spec: AdapterSpec, cache_dir: str) -> dict[str, Any]:
    """The keyword arguments for ``adapters.make``, with the shared cache folder filled in."""
    settings = dict(spec.settings)
    if spec.type not in ("language", "llm") or not cache_dir:
        return settings
    folder = Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    embeddings = str(folder / "embeddings.sqlite")
    if spec.type == "language":
        settings.setdefault("embedding_cache_path", embeddings)
    else:
        settings.setdefault("cache_path", str(folder / "descriptions.sqlite"))
        settings.setdefault("embedding_cache_path", embeddings)
    return settings


def make_adapter(spec: AdapterSpec, env, cache_dir: str):
    from langadapt import adapters

    return adapters.make(spec.type, env, **adapter_settings(spec, cache_dir))


def wrap(env, adapter):
    from langadapt.adapters import LanguageObservation

    return LanguageObservation(env, adapter)


# ----------------------------------------------------------------------------- one run


def _served_from_cache(stats: dict[str, float]) -> float:
    return stats.get("llm_cache_hits", 0) + stats.get("embedding_cache_hits", 0)


def find_run(config: ExperimentConfig, run_key: str) -> Run:
    for run in runs_of(config):
        if run.key == run_key:
            return run
    raise ValueError(f"run {run_key!r} is not a run of experiment {config.name!r}")


def train_run(
    config: ExperimentConfig,
    run: Run,
    on_row: Callable[[dict[str, Any]], None],
    adapter: Any = None,
) -> dict[str, Any]:
    """Train and evaluate one combination, handing each episode's row to ``on_row``;
    returns what ``done.json`` records. ``adapter``: one to use instead of building the
    run's adapter (the Ray executor's shipped descriptions)."""
    import torch

    from langadapt import agents

    torch.set_num_threads(config.torch_threads)
    raw_env = make_env(config)
    if adapter is None:
        adapter = make_adapter(run.adapter, raw_env, config.cache_dir)
    env = wrap(raw_env, adapter)
    agent = agents.make_agent(
        run.agent.type,
        env.observation_space,
        env.action_space,
        seed=run.seed,
        **run.agent.params_for(run.adapter.name),
    )
    last_stats = _run_stats(adapter, agent)  # before the roles: shaping's scoring counts
    agent, env, eval_env, shaper = _llm_roles(config, run, agent, env, raw_env, adapter)
    started = time.perf_counter()
    rows = 0

    def record(episode_record) -> None:
        nonlocal last_stats, rows
        stats = _run_stats(adapter, agent, shaper)
        on_row(
            {
                "adapter": run.adapter.name,
                "agent": run.agent.name,
                "seed": run.seed,
                "phase": episode_record.phase,
                "episode": episode_record.episode,
                "return": repr(float(episode_record.return_)),
                "length": episode_record.length,
                "success": int(bool(episode_record.success)),
                "wall_time": f"{episode_record.wall_time:.6f}",
                "llm_calls": int(stats.get("llm_calls", 0) - last_stats.get("llm_calls", 0)),
                "cache_hits": int(_served_from_cache(stats) - _served_from_cache(last_stats)),
                "llm_fallbacks": int(
                    stats.get("llm_fallbacks", 0) - last_stats.get("llm_fallbacks", 0)
                ),
            }
        )
        rows += 1
        last_stats = stats

    loop = agents.train
    if run.agent.type == "llm_policy_search":  # rounds of proposals: the search's own loop
        loop = type(agent).search
    records = [] if not getattr(agent, "learns", True) else loop(  # a zero-shot LLM policy
        agent,
        env,
        episodes=config.training.episodes,
        steps=config.training.steps,
        eval_every=config.evaluation.every,
        eval_episodes=config.evaluation.episodes,
        seed=run.seed,
        progress=False,
        on_episode=record,
        **_retention(config),
        **({} if eval_env is env else {"eval_env": eval_env}),
    )
    if getattr(records, "best", None) is not None:  # keep_best: the retained policy first
        for episode_record in agents.evaluate(
            agent, eval_env, episodes=config.evaluation.final_episodes,
            seed=run.seed + FINAL_EVAL_SEED,
        ):
            episode_record.phase = "best"
            episode_record.episode = records.best.episode  # the evaluation that chose it
            record(episode_record)
        agent.restore(records.last_policy)
    final = agents.evaluate(
        agent, eval_env, episodes=config.evaluation.final_episodes, seed=run.seed + FINAL_EVAL_SEED
    )
    trained = sum(1 for r in records if r.phase == "train")
    for episode_record in final:
        episode_record.phase = "final"
        episode_record.episode = trained  # like eval rows: training episodes done
        record(episode_record)
    env.close()
    return {
        "run": run.key,
        "rows": rows,
        "wall_time": time.perf_counter() - started,
        "adapter_stats": {k: float(v) for k, v in adapter.stats().items()},
        **_agent_log(agent),
        "llm_roles": {name: role.llm_stats() for name, role in
                      (("agent", agent), ("reward_shaping", shaper)) if hasattr(role, "llm_stats")},
    }


def _llm_roles(config: ExperimentConfig, run: Run, agent: Any, env: Any, raw_env: Any,
               adapter: Any) -> tuple[Any, Any, Any, Any]:
    """(agent, training env, evaluation env, shaper): the run's advisor wrapped around the
    agent, reward shaping on the training env only (evaluation keeps the env's own reward),
    and the agent bound to the training env when it reads raw states (LLM roles)."""
    eval_env, shaper = env, None
    shaping = run.agent.reward_shaping or config.environment.reward_shaping
    if shaping is not None:
        from langadapt.adapters.reward_shaping import RewardShaping

        shaper = RewardShaping(raw_env, shaping)
        shaper.prepare()
        env, eval_env = wrap(shaper, adapter), wrap(make_env(config), adapter)
    if run.agent.advisor is not None:
        from langadapt.agents.advisor import LLMAdvisor

        agent = LLMAdvisor(agent, run.agent.advisor)
    if hasattr(agent, "bind"):
        agent.bind(env)
    return agent, env, eval_env, shaper


def _run_stats(adapter: Any, agent: Any, *others: Any) -> dict[str, float]:
    """The adapter's counters plus the LLM counters of the agent (LLM policy search, LLM
    policy, advisor) and of the reward shaping."""
    stats = dict(adapter.stats())
    for source in (agent, *others):
        for key, value in (source.stats() if hasattr(source, "stats") else {}).items():
            stats[key] = stats.get(key, 0) + value
    return stats


def _agent_log(agent: Any) -> dict[str, Any]:
    """What ``done.json`` keeps of an LLM policy search: its counters and every round."""
    if not hasattr(agent, "round_log"):
        return {}
    return {"agent_stats": agent.stats(), "rounds": agent.round_log}


def _retention(config: ExperimentConfig) -> dict[str, Any]:
    """``agents.train``'s step-based evaluation and best-policy retention settings, if set."""
    spec = config.evaluation
    if spec.every_steps is None and not spec.keep_best:
        return {}
    return {"eval_every_steps": spec.every_steps, "keep_best": spec.keep_best}


def execute_run(config_data: dict[str, Any], run_key: str, out_dir: str) -> dict[str, Any]:
    """Train one combination into ``out_dir/runs/<key>/``, each episode's row flushed as it
    ends, and ``done.json`` last. Takes plain data so that it can run in a worker process."""
    config = experiment_from_dict(config_data, "config.yaml")
    run = find_run(config, run_key)
    run_dir = _fresh_run_dir(Path(out_dir), run.key)
    with open(run_dir / "episodes.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        writer.writeheader()

        def write(row: dict[str, Any]) -> None:
            writer.writerow(row)
            handle.flush()

        summary = train_run(config, run, write)
    _write_json(run_dir / "done.json", summary)
    return summary


def write_finished_run(
    out_dir: Path, run_key: str, rows: list[dict[str, Any]], summary: dict[str, Any]
) -> None:
    """Write a run whose rows arrived all at once (from a Ray worker): CSV, then done.json."""
    run_dir = _fresh_run_dir(out_dir, run_key)
    with open(run_dir / "episodes.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    _write_json(run_dir / "done.json", {**summary, "rows": len(rows)})


def write_failed_run(out_dir: Path, run_key: str, error: str) -> None:
    """Record a run that failed (its worker died more often than retried, or it raised)."""
    run_dir = _fresh_run_dir(out_dir, run_key)
    _write_json(run_dir / "failed.json", {"run": run_key, "error": error})


def _fresh_run_dir(out_dir: Path, run_key: str) -> Path:
    run_dir = out_dir / "runs" / run_key
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an unfinished earlier attempt: start this run afresh
    run_dir.mkdir(parents=True)
    return run_dir


def _write_json(path: Path, data: Any) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=2))
    os.replace(temporary, path)


# ----------------------------------------------------------------------------- the folder


RESULT_FILES = (
    "config.yaml",
    "episodes.csv",
    "summary.csv",
    "summary.md",
    "learning_curves.png",
    "final_returns.png",
    "prerender.json",
)
"""What the runner writes at the top of a results folder (besides ``runs/``)."""


def prepare_output(config: ExperimentConfig, out_dir: Path, resume: bool, force: bool) -> None:
    """Create the results folder, refusing to mix two different experiments in one.

    ``force`` replaces an earlier experiment's results (only the files the runner writes);
    a folder that is not a results folder is never touched.
    """
    config_file = out_dir / "config.yaml"
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir} is a file; expected a results folder")
    if config_file.exists():
        if force:
            _remove_results(out_dir)
        else:
            try:
                existing = load_config(config_file)
            except ConfigError as error:
                reason = str(error).splitlines()[-1].strip()
                raise ConfigError(
                    f"{config_file} cannot be read ({reason}); this folder's experiment is "
                    "unknown: pass --force to replace its results, or choose another --out folder"
                ) from None
            if existing.fingerprint() != config.fingerprint():
                raise ConfigError(
                    f"{out_dir} holds the results of a different experiment; choose another "
                    "--out folder, or pass --force to replace them"
                )
            if not resume:
                raise ConfigError(
                    f"{out_dir} already holds results of this experiment; pass --resume to "
                    "continue it or --force to start again"
                )
    elif out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(
            f"{out_dir} exists and is not a langadapt results folder (no config.yaml); "
            "choose another --out folder (--force replaces only results folders)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    resolved = config.resolved()
    resolved["output"] = str(out_dir)
    config_file.write_text(yaml.safe_dump(resolved, sort_keys=False))


def _remove_results(out_dir: Path) -> None:
    shutil.rmtree(out_dir / "runs", ignore_errors=True)
    for name in RESULT_FILES:
        (out_dir / name).unlink(missing_ok=True)


def _csv_rows(path: Path) -> int | None:
    """Complete rows of a per-run ``episodes.csv`` (None if missing or malformed)."""
    try:
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not rows or tuple(rows[0]) != EPISODE_COLUMNS:
        return None
    if any(len(row) != len(EPISODE_COLUMNS) for row in rows[1:]):
        return None
    return len(rows) - 1


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def finished_runs(out_dir: Path) -> dict[str, int]:
    """Runs that finished, with their number of episode rows: a ``done.json`` and an
    ``episodes.csv`` holding exactly the rows it records (a truncated file is unfinished)."""
    finished = {}
    for done_file in (out_dir / "runs").glob("*/done.json"):
        record = _read_record(done_file)
        rows = _csv_rows(done_file.parent / "episodes.csv")
        if record is None or rows is None or rows == 0:
            continue
        if record.get("rows", rows) == rows:  # done.json of older versions has no "rows"
            finished[done_file.parent.name] = rows
    return finished


def failed_runs(out_dir: Path) -> dict[str, str]:
    """Runs recorded as failed, with their error."""
    failed = {}
    for path in (out_dir / "runs").glob("*/failed.json"):
        record = _read_record(path) or {}
        failed[path.parent.name] = str(record.get("error", "unknown error"))
    return failed


def check_results(out_dir: Path | str) -> dict[str, str]:
    """Check a results folder before it is summarised; returns the failed runs' errors.

    ``episodes.csv`` must hold, for every run that ``config.yaml`` names, exactly the rows
    its ``runs/<run>/done.json`` records; else :class:`ResultsFolderError` naming the runs
    and what to do (``--resume`` redoes unfinished runs and merges the file anew).
    """
    out_dir = Path(out_dir)
    config_file = out_dir / "config.yaml"
    if not config_file.is_file():
        raise ResultsFolderError(
            f"{out_dir} is not a langadapt results folder: expected config.yaml and episodes.csv"
        )
    config = load_config(config_file)
    resume = f"langadapt run {config_file} --resume"
    finished, failed = finished_runs(out_dir), failed_runs(out_dir)
    expected = [run.key for run in runs_of(config)]
    unfinished = [key for key in expected if key not in finished and key not in failed]
    if unfinished:
        raise ResultsFolderError(
            f"{out_dir}: interrupted — {_listing(unfinished)} of {len(expected)} runs "
            f"unfinished; run with --resume: {resume}"
        )
    episodes_file = out_dir / "episodes.csv"
    if not episodes_file.is_file():
        raise ResultsFolderError(
            f"{out_dir}: interrupted — all runs finished but episodes.csv was not written; "
            f"run with --resume: {resume}"
        )
    counts = _rows_per_run(episodes_file)
    wrong = [
        f"{run.key} ({counts.get((run.adapter.name, run.agent.name, str(run.seed)), 0)} of "
        f"{finished[run.key]} rows)"
        for run in runs_of(config)
        if run.key in finished
        and counts.get((run.adapter.name, run.agent.name, str(run.seed)), 0) != finished[run.key]
    ]
    if wrong:
        raise ResultsFolderError(
            f"{episodes_file} does not match runs/: {_listing(wrong)} — the file was cut or "
            f"edited; nothing was summarised. Rebuild it from runs/ with --resume: {resume}"
        )
    return {key: failed[key] for key in expected if key in failed}


def _rows_per_run(path: Path) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    try:
        with open(path, newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            missing = [c for c in ("adapter", "agent", "seed") if c not in header]
            if missing:
                raise ResultsFolderError(
                    f"{path}: not a langadapt episodes file, missing columns {', '.join(missing)}"
                )
            where = [header.index(c) for c in ("adapter", "agent", "seed")]
            for row in reader:
                if len(row) != len(header):
                    raise ResultsFolderError(
                        f"{path} line {reader.line_num}: {len(row)} fields, expected "
                        f"{len(header)} — the file was cut or edited; rebuild it with --resume"
                    )
                key = (row[where[0]], row[where[1]], row[where[2]])
                counts[key] = counts.get(key, 0) + 1
    except (UnicodeDecodeError, csv.Error) as error:
        raise ResultsFolderError(f"{path}: not a readable CSV file ({error})") from None
    return counts


def _listing(keys: list[str], most: int = 5) -> str:
    shown = ", ".join(keys[:most])
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return f"{len(keys)} run{'s' if len(keys) != 1 else ''} ({shown}{more})"


def results_notes(out_dir: Path | str, failed: dict[str, str]) -> str:
    """Markdown lines for the summary: failed runs and LLM descriptions that were
    rule-language fallbacks (empty when there are none)."""
    lines = []
    fallbacks: dict[str, int] = {}
    with open(Path(out_dir) / "episodes.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            count = int(row.get("llm_fallbacks") or 0)
            if count:
                fallbacks[row["adapter"]] = fallbacks.get(row["adapter"], 0) + count
    for adapter, count in fallbacks.items():
        lines.append(
            f"- **{adapter}: {count} description{'s' if count != 1 else ''} came from the rule "
            "describer, not the LLM** (the LLM failed and `fallback` is on): its rows are not "
            "a pure LLM result."
        )
    for key, error in failed.items():
        lines.append(f"- **run {key} failed** and is not in the table: {error}")
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def merge_episodes(config: ExperimentConfig, out_dir: Path) -> Path:
    """Concatenate the runs' episode files in the experiment's order into ``episodes.csv``."""
    target = out_dir / "episodes.csv"
    temporary = target.with_suffix(".csv.tmp")
    done = finished_runs(out_dir)
    with open(temporary, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(EPISODE_COLUMNS)
        for run in runs_of(config):
            if run.key in done:
                with open(out_dir / "runs" / run.key / "episodes.csv", newline="") as handle:
                    rows = csv.reader(handle)
                    next(rows, None)
                    writer.writerows(rows)
    os.replace(temporary, target)
    return target


# ----------------------------------------------------------------------------- prerender


def prerender(config: ExperimentConfig, progress: bool = True) -> dict[str, dict[str, float]]:
    """Describe and encode every reachable state once, so the runs find them cached.

    Only environments with an enumerable state set (the mazes) are prerendered; for the
    others this does nothing. Returns each prerendered adapter's counters.
    """
    counters = {}
    for name, (adapter, _) in prerendered_adapters(config, progress).items():
        counters[name] = {k: float(v) for k, v in adapter.stats().items()}
    return counters


def prerendered_adapters(config: ExperimentConfig, progress: bool = True) -> dict[str, tuple]:
    """``{adapter name: (adapter, inputs)}`` for every language and llm adapter, each
    having described and encoded every reachable input (empty for environments whose
    states cannot be enumerated)."""
    from langadapt.adapters.prerender import reachable_inputs

    env = make_env(config)
    try:
        inputs = reachable_inputs(env)
    except ValueError:
        return {}
    adapters = {}
    for spec in config.adapters:
        if spec.type == "raw":
            continue
        adapter = make_adapter(spec, env, config.cache_dir)
        adapter.prerender(inputs, progress=progress)
        adapters[spec.name] = (adapter, inputs)
    return adapters


def record_prerender(out_dir: Path, counters: dict[str, dict[str, float]]) -> None:
    """Append one prerender pass (what it cost each adapter) to ``prerender.json``."""
    path = out_dir / "prerender.json"
    passes = json.loads(path.read_text()) if path.exists() else []
    keep = ("llm_calls", "llm_cache_hits", "llm_failures", "llm_seconds", "encoder_calls",
            "embedding_cache_hits")
    passes.append(
        {
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "adapters": {
                name: {key: stats.get(key, 0) for key in keep} for name, stats in counters.items()
            },
        }
    )
    path.write_text(json.dumps(passes, indent=2))


# ----------------------------------------------------------------------------- the experiment


class RunsFailedError(RuntimeError):
    """Some runs failed; the others' results and the summary were written."""


def run_experiment(
    config: ExperimentConfig,
    out_dir: Path | None = None,
    jobs: int | None = None,
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> Path:
    """Run every combination of ``config`` with its executor; returns the results folder.

    ``jobs`` overrides ``config.executor.jobs``. Runs that fail under Ray are recorded
    (``failed.json``, a line in the summary) and :class:`RunsFailedError` is raised after
    the report is written.
    """
    from tqdm.auto import tqdm

    from langadapt.experiments.executors import executor_for
    from langadapt.experiments.report import write_report

    out_dir = Path(out_dir) if out_dir is not None else config.output_dir
    make_env(config).close()  # bad environment parameters fail before anything is written
    # a missing extra or an unreachable cluster fails before anything is written, too
    with executor_for(config, jobs) as executor:
        prepare_output(config, out_dir, resume=resume, force=force)
        done = set(finished_runs(out_dir)) if resume else set()
        todo = [run for run in runs_of(config) if run.key not in done]
        log(
            f"{config.name}: {len(runs_of(config))} runs "
            f"({len(config.adapters)} adapters x {len(config.agents)} agents x "
            f"{len(config.seed_list)} seeds), {len(done)} already finished, results in {out_dir}"
        )
        failures: dict[str, str] = {}
        if todo:
            adapters = prerendered_adapters(config, progress=progress)
            if adapters:
                record_prerender(
                    out_dir,
                    {n: {k: float(v) for k, v in a.stats().items()}
                     for n, (a, _) in adapters.items()},
                )
            bar = tqdm(total=len(todo), desc="runs", unit="run", disable=not progress)
            for outcome in executor.run(config, [run.key for run in todo], out_dir, adapters):
                if outcome.error is not None:
                    failures[outcome.key] = outcome.error
                    write_failed_run(out_dir, outcome.key, outcome.error)
                bar.set_postfix_str(outcome.key)
                bar.update()
            bar.close()
    merge_episodes(config, out_dir)
    write_report(out_dir, log=log)
    if any(agent.type == "llm_policy_search" for agent in config.agents):
        from langadapt.experiments.search_report import write_search_report

        write_search_report(out_dir, log=log)
    if failures:
        raise RunsFailedError(
            f"{_listing(list(failures))} failed (the others' results are written; see "
            f"{out_dir / 'summary.md'}); run again with --resume to redo them: "
            + "; ".join(f"{key}: {error}" for key, error in failures.items())
        )
    return out_dir
