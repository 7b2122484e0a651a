"""Run an experiment: every (adapter x agent x seed) combination, written to disk as it goes
(the results folder: :mod:`.results`). A crash loses at most the runs in flight;
``resume=True`` keeps every finished run and redoes the others from their start. While
:func:`run_experiment` runs in the main thread, SIGTERM and SIGHUP raise
:class:`Interrupted` (a ``KeyboardInterrupt``, like SIGINT): the workers stop, the lock is
released, ``--resume`` continues. See docs/configuration.md.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tqdm.auto import tqdm

from ..adapters.prerender import reachable_inputs
from .config import ConfigError, ExperimentConfig
from .executors import ProcessExecutor, RayExecutor
from .one_run import make_adapter, make_env
from .progress import watching
from .report import write_report, write_search_report
from .results import (
    ResultsFolderError,
    Run,
    check_results,
    finished_runs,
    folder_lock,
    listing,
    merge_episodes,
    prepare_output,
    record_prerender,
    refuse_foreign,
    runs_of,
    write_failed_run,
    writing,
)

__all__ = [  # what the CLI, the benchmarks and the tests use from here
    "Interrupted",
    "ResultsFolderError",
    "Run",
    "RunsFailedError",
    "check_results",
    "executor_for",
    "finished_runs",
    "make_env",
    "prepare_output",
    "prerender",
    "prerendered_adapters",
    "run_experiment",
    "runs_of",
]


class RunsFailedError(RuntimeError):
    """Some runs failed; the others' results and the summary were written."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived while an experiment ran."""


def executor_for(config: ExperimentConfig, jobs: int | None = None):
    """The executor ``config.executor`` names; ``jobs`` overrides its ``jobs``."""
    spec = config.executor
    jobs = jobs if jobs is not None else spec.jobs
    if spec.type == "ray":
        return RayExecutor(spec, jobs)
    return ProcessExecutor(jobs or 1)


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


# ----------------------------------------------------------------------------- the experiment


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block (main thread only), SIGTERM and SIGHUP raise :class:`Interrupted`
    unless something else already handles them; the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(number: int, _frame: object) -> None:
        raise Interrupted(f"stopped by {signal.Signals(number).name}")

    previous = {}
    for number in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(number) in (signal.SIG_DFL, None):
            previous[number] = signal.signal(number, interrupt)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


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
    the report is written. The folder is locked for the whole run (a second writer gets a
    :class:`ResultsFolderError` naming this process); a folder that cannot be written is a
    :class:`ResultsFolderError` too, with the finished runs kept.
    """
    if config.tasks:
        raise ConfigError(f"experiment {config.name!r} is a suite (it has tasks): run it with "
                          "experiments.suite.run_suite or `langadapt run`")
    out_dir = Path(out_dir) if out_dir is not None else config.output_dir
    make_env(config).close()  # bad environment parameters fail before anything is written
    if config.evaluation.environment_params:
        make_env(config, evaluation=True).close()
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir} is a file; expected a results folder")
    refuse_foreign(out_dir)  # before the lock file: a folder of other files is never touched
    again = "free some space (or fix the folder) and run again with --resume"
    with signals_interrupt(), ExitStack() as folder:
        # a missing extra or an unreachable cluster fails before anything is written, too
        with executor_for(config, jobs) as executor:
            folder.enter_context(writing(out_dir, again))
            out_dir.mkdir(parents=True, exist_ok=True)
            folder.enter_context(folder_lock(out_dir))  # held until the report is written
            failures = _run_all(config, executor, out_dir, resume, force, progress, log)
        merge_episodes(config, out_dir)
        write_report(out_dir, log=log)
        if any(agent.type == "llm_policy_search" for agent in config.agents):
            write_search_report(out_dir, log=log)
    if failures:
        raise RunsFailedError(
            f"{listing(list(failures))} failed (the others' results are written; see "
            f"{out_dir / 'summary.md'}); run again with --resume to redo them: "
            + "; ".join(f"{key}: {error}" for key, error in failures.items())
        )
    return out_dir


def _run_all(config: ExperimentConfig, executor, out_dir: Path, resume: bool, force: bool,
             progress: bool, log: Callable[[str], None]) -> dict[str, str]:
    """Prepare the folder and run what is not finished; returns the failed runs' errors."""
    prepare_output(config, out_dir, resume=resume, force=force)
    done = set(finished_runs(out_dir)) if resume else set()
    todo = [run for run in runs_of(config) if run.key not in done]
    log(
        f"{config.name}: {len(runs_of(config))} runs "
        f"({len(config.adapters)} adapters x {len(config.agents)} agents x "
        f"{len(config.seed_list)} seeds), {len(done)} already finished, results in {out_dir}"
    )
    failures: dict[str, str] = {}
    if not todo:
        return failures
    adapters = prerendered_adapters(config, progress=progress)
    if adapters:
        record_prerender(
            out_dir,
            {n: {k: float(v) for k, v in a.stats().items()} for n, (a, _) in adapters.items()},
        )
    terminal = sys.stderr.isatty()  # the bar's; stdout elsewhere: a line a minute (.progress)
    bar = tqdm(total=len(todo), desc="runs", unit="run", disable=not (progress and terminal))
    lines = None if sys.stdout.isatty() else log
    try:
        with ExitStack() as stack:
            inside = stack.enter_context(watching(
                config, todo, out_dir, bar.set_postfix_str if terminal else None, lines)) \
                if progress else None
            for outcome in executor.run(config, [run.key for run in todo], out_dir):
                if outcome.error is not None:
                    failures[outcome.key] = outcome.error
                    write_failed_run(out_dir, outcome.key, outcome.error)
                if inside is not None:
                    inside.done(outcome.key)
                    if terminal:
                        bar.set_postfix_str(inside.status(), refresh=False)
                bar.update()
    finally:
        bar.close()
    return failures
