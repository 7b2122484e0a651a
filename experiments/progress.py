"""Progress inside the runs of an experiment, read by the driver from each run's flushed
``runs/<run>/episodes.csv``: per run in flight, its phase, budget done, success, LLM calls
and time left, as the progress bar's postfix on a terminal, else a line every
:data:`LINE_SECONDS`. Explained in ``docs/configuration.md`` (Progress inside the runs).
"""

from __future__ import annotations

import csv
import io
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .config import ExperimentConfig
from .results import Run

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
