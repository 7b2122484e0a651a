"""Run an experiment (:func:`run_experiment`): every (adapter x agent x seed) combination,
written as it goes into the results folder; ``resume=True`` keeps every finished run; SIGTERM
and SIGHUP raise :class:`Interrupted` (a ``KeyboardInterrupt``); :func:`watching` shows the
progress inside the runs in flight. See docs/configuration.md.
"""

from __future__ import annotations

import csv
import io
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from ..adapters.prerender import reachable_inputs
from .executors import ProcessExecutor, RayExecutor
from .folders import ResultsFolderError, folder_lock, prepare_output, refuse_foreign, writing
from .folders import inside as inside_folder
from .one_run import check_build, make_adapter, make_env
from .report import write_report, write_search_report
from .results import (
    STOPPED_FILE,
    Run,
    check_results,
    finished_runs,
    listing,
    merge_episodes,
    record_prerender,
    resumable,
    runs_of,
    write_failed_run,
    write_stopped,
)
from .schema import ConfigError, ExperimentConfig

__all__ = [  # what the CLI, the benchmarks and the tests use from here
    "Interrupted",
    "ResultsFolderError",
    "Run",
    "RunsFailedError",
    "check_environments",
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
    """SIGTERM or SIGHUP (``signal``, its number) arrived while an experiment ran."""

    def __init__(self, message: str, number: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signal = int(number)


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
        raise Interrupted(f"stopped by {signal.Signals(number).name}", number)

    previous = {}
    for number in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(number) in (signal.SIG_DFL, None):
            previous[number] = signal.signal(number, interrupt)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def check_environments(config: ExperimentConfig, built: set[str] | None = None) -> None:
    """Build and close every environment a run builds (training, evaluation, transfer), and
    each (adapter, agent) on the first (:func:`.one_run.check_build`; ``built``: the agents
    a suite's other tasks built), so that bad parameters fail before anything is written or
    trained."""
    env = make_env(config)
    try:
        check_build(config, env, built)
    finally:
        env.close()
    if config.evaluation.environment_params:
        make_env(config, evaluation=True).close()
    if config.evaluation.transfer is not None:
        make_env(config, over=config.evaluation.transfer.environment_params).close()


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
    check_environments(config)  # bad environment parameters fail before anything is written
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
            try:
                failures = _run_all(config, executor, out_dir, resume, force, progress, log)
            except Exception as error:
                if getattr(error, "langadapt_stopped", None) is not None:
                    _report_stopped(config, out_dir, error, log)
                raise
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


def _report_stopped(config: ExperimentConfig, out_dir: Path, error: BaseException,
                    log: Callable[[str], None]) -> None:
    """After a run's error stopped the experiment: the summary of the finished runs, and a
    line saying they are kept and how the rest goes on."""
    merge_episodes(config, out_dir)
    write_report(out_dir, log=log)
    finished, left = len(finished_runs(out_dir)), error.langadapt_stopped  # type: ignore[attr-defined]
    kept = (f"the {finished} finished run{'s are' if finished != 1 else ' is'} kept and "
            f"summarised in {out_dir / 'summary.md'}" if finished else
            f"no run had finished ({out_dir / 'summary.md'} names those that did not)")
    log(f"stopped: run {getattr(error, 'langadapt_run_key', '?')} failed; {kept}; "
        f"{listing(left)} did not finish — fix the cause and go on with: langadapt run "
        f"YOUR_EXPERIMENT.yaml --out {out_dir} --resume")


def _run_all(config: ExperimentConfig, executor, out_dir: Path, resume: bool, force: bool,
             progress: bool, log: Callable[[str], None]) -> dict[str, str]:
    """Prepare the folder and run what is not finished; returns the failed runs' errors.
    A run's error that stops the experiment is recorded (``stopped.json``: it and the runs
    left unfinished, as ``error.langadapt_stopped``) before it goes on up."""
    prepare_output(config, out_dir, resume=resume, force=force)
    inside_folder(out_dir, STOPPED_FILE).unlink(missing_ok=True)  # an earlier stop: going on
    done = set(finished_runs(out_dir)) if resume else set()
    todo = [run for run in runs_of(config) if run.key not in done]
    state = _resumed(config, out_dir, done, todo) if resume else "0 already finished"
    log(
        f"{config.name}: {len(runs_of(config))} runs "
        f"({len(config.adapters)} adapters x {len(config.agents)} agents x "
        f"{len(config.seed_list)} seeds), {state}, results in {out_dir}"
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
    except Exception as error:
        if isinstance(error, (OSError, ResultsFolderError)):  # the folder's, not a run's
            raise
        finished = finished_runs(out_dir)
        left = [run.key for run in todo if run.key not in finished and run.key not in failures]
        write_stopped(out_dir, getattr(error, "langadapt_run_key", None),
                      " ".join(str(error).split()), left)
        error.langadapt_stopped = left  # type: ignore[attr-defined]
        raise
    finally:
        bar.close()
    return failures


def _resumed(config: ExperimentConfig, out_dir: Path, done: set[str], todo: list[Run]) -> str:
    """What ``--resume`` does with the folder's runs: ``2 finished, 1 continues from its
    checkpoint (raw__dqn__seed0 at step 24,000), 1 starts afresh``."""
    saved = {} if config.executor.type == "ray" else {  # Ray's runs keep no checkpoints
        run.key: checkpoint for run in todo
        if (checkpoint := resumable(out_dir, run.key)) is not None}
    continuing = ", ".join(f"{key} at step {c.steps:,}" for key, c in saved.items())
    parts = [f"{len(done)} finished"]
    if saved:
        parts.append(f"{len(saved)} {'continues' if len(saved) == 1 else 'continue'} from "
                     f"{'its' if len(saved) == 1 else 'their'} checkpoint ({continuing})")
    parts.append(f"{len(todo) - len(saved)} {'starts' if len(todo) - len(saved) == 1 else 'start'}"
                 " afresh")
    return ", ".join(parts)


# ----------------------------------------------------------------------------- progress


POLL_SECONDS = 2.0
"""How often the runs' files are read."""

LINE_SECONDS = 60.0
"""How often a status line is written when the output is not a terminal."""

RECENT = 20
"""Training success is shown over this many latest training episodes (no evaluation yet)."""


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``2.4 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class RunWatch:
    """What one run's ``episodes.csv`` says so far (read incrementally, whole lines only)."""

    run: Run
    path: Path
    train_budget: tuple[int, str]  # (amount, "steps" or "episodes")
    final_budget: int  # final evaluation episodes (twice with keep_best)
    started: float = field(default_factory=time.monotonic)
    offset: int = 0
    header: list[str] | None = None
    train_done: int = 0
    train_seconds: float = 0.0
    train_success: list[int] = field(default_factory=list)
    eval_success: dict[int, list[int]] = field(default_factory=dict)
    final_success: list[int] = field(default_factory=list)
    final_seconds: float = 0.0
    llm_calls: int = 0
    llm_wall: float = 0.0
    phase: str = ""

    def read(self) -> None:
        """Take in the rows written since the last read."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        lines = chunk[:end].decode("utf-8", errors="replace")
        rows = list(csv.reader(io.StringIO(lines)))
        if self.header is None and rows:
            self.header, rows = rows[0], rows[1:]
        for row in rows:
            if self.header is not None and len(row) == len(self.header):
                self._take(dict(zip(self.header, row, strict=True)))

    def _take(self, row: dict[str, str]) -> None:
        try:
            success, wall = int(row["success"]), float(row["wall_time"])
            calls, length = int(row["llm_calls"]), int(row["length"])
            phase, episode = row["phase"], int(row["episode"])
        except (KeyError, ValueError):
            return  # not a row of ours: progress is a courtesy, never an error
        self.phase = phase
        self.llm_calls += calls
        if calls:
            self.llm_wall += wall
        if phase == "train":
            self.train_done += length if self.train_budget[1] == "steps" else 1
            self.train_seconds += wall
            self.train_success = [*self.train_success[-(RECENT - 1):], success]
        elif phase == "eval":
            self.eval_success.setdefault(episode, []).append(success)
        else:
            self.final_success.append(success)
            self.final_seconds += wall

    def status(self) -> str:
        """One clause: ``<run>: train 1,200/5,000 steps (ETA 3 min), success 40% (last
        evaluation), 203 LLM calls, ~1.4 s/call``."""
        if not self.phase:
            return (f"{self.run.key}: started {duration(time.monotonic() - self.started)} ago, "
                    "no episode finished yet")
        if self.phase in ("train", "eval"):
            total, unit = self.train_budget
            left = (total - self.train_done) * self.train_seconds / max(self.train_done, 1)
            where = f"train {self.train_done:,}/{total:,} {unit} (ETA {duration(max(left, 0))})"
            if self.eval_success:
                last = self.eval_success[max(self.eval_success)]
                success = f"success {_share(last)} (last evaluation)"
            else:
                success = f"success {_share(self.train_success)} (last " \
                          f"{len(self.train_success)} training episodes)"
        else:
            done = len(self.final_success)
            left = (self.final_budget - done) * self.final_seconds / max(done, 1)
            where = f"final {done}/{self.final_budget} episodes (ETA {duration(max(left, 0))})"
            success = f"success {_share(self.final_success)}"
        parts = [f"{self.run.key}: {where}", success]
        if self.llm_calls:
            parts.append(f"{self.llm_calls:,} LLM calls, ~{self.llm_wall / self.llm_calls:.2f}"
                         " s/call")
        return ", ".join(parts)


def _share(successes: list[int]) -> str:
    return "—" if not successes else f"{100 * sum(successes) / len(successes):.0f}%"


def watch_for(config: ExperimentConfig, run: Run, out_dir: Path) -> RunWatch:
    training = config.training_for(run.agent)
    budget = (training.steps, "steps") if training.steps else (training.episodes or 0,
                                                                 "episodes")
    final = config.evaluation.final_episodes * (2 if config.evaluation.keep_best else 1)
    return RunWatch(run, out_dir / "runs" / run.key / "episodes.csv", budget, final)


Show = Callable[[str], None] | None


class Progress:
    """Watches the runs of ``todo`` in ``out_dir`` from a thread: ``bar(text)`` gets the
    status every :data:`POLL_SECONDS` (a bar's postfix), ``line(text)`` a line every
    :data:`LINE_SECONDS` (either may be None)."""

    def __init__(self, config: ExperimentConfig, todo: list[Run], out_dir: Path,
                 bar: Show, line: Show) -> None:
        self.watches = {run.key: watch_for(config, run, out_dir) for run in todo}
        self.total, self.finished = len(todo), 0
        self.bar, self.line = bar, line
        self.begun = time.time() - 1.0  # files older than this are an earlier attempt's
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def done(self, key: str) -> None:
        with self.lock:
            self.watches.pop(key, None)
            self.finished += 1

    def status(self) -> str:
        """The runs in flight, one clause each ("" when none has begun)."""
        clauses = []
        with self.lock:  # one reader of the files at a time (the thread, the driver)
            for watch in self.watches.values():
                try:
                    fresh = watch.path.stat().st_mtime >= self.begun
                except OSError:
                    continue
                if fresh:
                    watch.read()
                    clauses.append(watch.status())
        return "; ".join(clauses)

    def _loop(self) -> None:
        started = last = time.monotonic()
        while not self.stop.wait(POLL_SECONDS):
            now = time.monotonic()
            due = self.line is not None and now - last >= LINE_SECONDS
            if self.bar is None and not due:
                continue
            text = self.status()
            if self.bar is not None:
                self.bar(text)
            if due and self.line is not None:
                last = now
                self.line(f"[{duration(now - started)}] runs {self.finished}/{self.total} "
                          "done" + (f"; {text}" if text else ""))


@contextmanager
def watching(config: ExperimentConfig, todo: list[Run], out_dir: Path, bar: Show,
             line: Show) -> Iterator[Progress]:
    """A :class:`Progress` whose thread runs for the block."""
    progress = Progress(config, todo, out_dir, bar, line)
    thread = threading.Thread(target=progress._loop, name="langadapt-progress", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        progress.stop.set()
        thread.join(POLL_SECONDS + 1)
