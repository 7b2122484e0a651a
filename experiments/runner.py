"""Run an experiment: every (adapter x agent x seed) combination, written to disk as it goes.

Layout of a results folder::

    config.yaml               the resolved experiment (defaults filled in, seeds listed)
    runs/<run>/episodes.csv   one row per episode, appended and flushed as each one ends
    runs/<run>/done.json      written when the run finished (wall time, adapter counters)
    prerender.json            what describing and encoding the reachable states cost, per pass
    episodes.csv              all runs' rows, in the experiment's order, once the runs end
    summary.csv, summary.md   per adapter x agent (see experiments.report)
    learning_curves.png, final_returns.png

A crash loses at most the episode in flight; ``resume=True`` keeps every finished run and
redoes unfinished ones from their start (an agent's half-trained weights are not saved).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import yaml

from langadapt.experiments.config import AdapterSpec, AgentSpec, ConfigError, ExperimentConfig, parse_config

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
)
"""Columns of ``episodes.csv``. ``phase`` is ``train``, ``eval`` (greedy evaluation during
training; ``episode`` is then the number of training episodes done) or ``final`` (the
greedy evaluation after training, ``episode`` likewise). ``llm_calls``
and ``cache_hits`` count what the episode cost the adapter: LLM requests made, and
lookups answered by the persistent description and embedding caches (the adapter's
in-memory memo, which serves repeated states within a run, is not counted)."""


FINAL_EVAL_SEED = 10_000
"""The final greedy evaluation resets with ``seed + FINAL_EVAL_SEED`` (evaluations during
training use ``agents.training.EVAL_SEED_OFFSET``): held-out starts, the same for every run."""


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
    except TypeError as error:
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


def execute_run(config_data: dict[str, Any], run_key: str, out_dir: str) -> dict[str, Any]:
    """Train and evaluate one combination; returns what ``done.json`` records.

    Takes plain data so that it can run in a worker process.
    """
    import torch

    from langadapt import agents

    config = parse_config(config_data, "config.yaml")
    torch.set_num_threads(config.torch_threads)
    run = next(r for r in runs_of(config) if r.key == run_key)
    run_dir = Path(out_dir) / "runs" / run.key
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an unfinished earlier attempt: start this run afresh
    run_dir.mkdir(parents=True)

    raw_env = make_env(config)
    adapter = make_adapter(run.adapter, raw_env, config.cache_dir)
    env = wrap(raw_env, adapter)
    agent = agents.make_agent(
        run.agent.type,
        env.observation_space,
        env.action_space,
        seed=run.seed,
        **run.agent.params_for(run.adapter.name),
    )
    started = time.perf_counter()
    with open(run_dir / "episodes.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        writer.writeheader()
        handle.flush()
        last_stats = dict(adapter.stats())

        def record(episode_record) -> None:
            nonlocal last_stats
            stats = dict(adapter.stats())
            writer.writerow(
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
                }
            )
            handle.flush()
            last_stats = stats

        records = agents.train(
            agent,
            env,
            episodes=config.training.episodes,
            steps=config.training.steps,
            eval_every=config.evaluation.every,
            eval_episodes=config.evaluation.episodes,
            seed=run.seed,
            progress=False,
            on_episode=record,
        )
        final = agents.evaluate(
            agent, env, episodes=config.evaluation.final_episodes, seed=run.seed + FINAL_EVAL_SEED
        )
        trained = sum(1 for r in records if r.phase == "train")
        for episode_record in final:
            episode_record.phase = "final"
            episode_record.episode = trained  # like eval rows: training episodes done
            record(episode_record)
    summary = {
        "run": run.key,
        "wall_time": time.perf_counter() - started,
        "adapter_stats": {k: float(v) for k, v in adapter.stats().items()},
    }
    (run_dir / "done.json").write_text(json.dumps(summary, indent=2))
    env.close()
    return summary


# ----------------------------------------------------------------------------- the experiment


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
        try:
            existing = parse_config(yaml.safe_load(config_file.read_text()), config_file)
            same = existing.fingerprint() == config.fingerprint()
        except ConfigError:
            same = False
        if force:
            _remove_results(out_dir)
        elif not same:
            raise ConfigError(
                f"{out_dir} holds the results of a different experiment; choose another "
                "--out folder, or pass --force to replace them"
            )
        elif not resume:
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


def finished_runs(out_dir: Path) -> set[str]:
    return {p.parent.name for p in (out_dir / "runs").glob("*/done.json")}


def merge_episodes(config: ExperimentConfig, out_dir: Path) -> Path:
    """Concatenate the runs' episode files in the experiment's order into ``episodes.csv``."""
    target = out_dir / "episodes.csv"
    temporary = target.with_suffix(".csv.tmp")
    with open(temporary, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(EPISODE_COLUMNS)
        for run in runs_of(config):
            part = out_dir / "runs" / run.key / "episodes.csv"
            if part.exists():
                with open(part, newline="") as handle:
                    rows = csv.reader(handle)
                    next(rows, None)
                    writer.writerows(rows)
    os.replace(temporary, target)
    return target


def prerender(config: ExperimentConfig, progress: bool = True) -> dict[str, dict[str, float]]:
    """Describe and encode every reachable state once, so the runs find them cached.

    Only environments with an enumerable state set (the mazes) are prerendered; for the
    others this does nothing. Returns each prerendered adapter's counters.
    """
    from langadapt.adapters.prerender import reachable_inputs

    env = make_env(config)
    try:
        inputs = reachable_inputs(env)
    except ValueError:
        return {}
    counters = {}
    for spec in config.adapters:
        if spec.type == "raw":
            continue
        adapter = make_adapter(spec, env, config.cache_dir)
        adapter.prerender(inputs, progress=progress)
        counters[spec.name] = {k: float(v) for k, v in adapter.stats().items()}
    return counters


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


def run_experiment(
    config: ExperimentConfig,
    out_dir: Path | None = None,
    jobs: int = 1,
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> Path:
    """Run every combination of ``config``; returns the results folder."""
    from tqdm.auto import tqdm

    from langadapt.experiments.report import write_report

    out_dir = Path(out_dir) if out_dir is not None else config.output_dir
    make_env(config).close()  # bad environment parameters fail before anything is written
    prepare_output(config, out_dir, resume=resume, force=force)
    done = finished_runs(out_dir) if resume else set()
    todo = [run for run in runs_of(config) if run.key not in done]
    log(
        f"{config.name}: {len(runs_of(config))} runs "
        f"({len(config.adapters)} adapters x {len(config.agents)} agents x "
        f"{len(config.seed_list)} seeds), {len(done)} already finished, results in {out_dir}"
    )
    if todo:
        counters = prerender(config, progress=progress)
        if counters:
            record_prerender(out_dir, counters)
    data = config.resolved()
    bar = tqdm(total=len(todo), desc="runs", unit="run", disable=not progress)
    for key in _execute(data, [run.key for run in todo], str(out_dir), jobs):
        bar.set_postfix_str(key)
        bar.update()
    bar.close()
    merge_episodes(config, out_dir)
    write_report(out_dir, log=log)
    return out_dir


def _execute(data: dict[str, Any], keys: list[str], out_dir: str, jobs: int) -> Iterator[str]:
    if jobs <= 1 or len(keys) <= 1:
        for key in keys:
            execute_run(data, key, out_dir)
            yield key
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(execute_run, data, key, out_dir): key for key in keys}
        for future in as_completed(futures):
            future.result()
            yield futures[future]
