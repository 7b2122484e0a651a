"""Where the runs of an experiment execute: this machine's process pool, or a Ray cluster.

An executor is a context manager (entering it connects to a cluster or checks that it can)
whose ``run(config, keys, out_dir)`` yields one :class:`Outcome` per run as it finishes,
after the run's files are written to ``out_dir/runs/<key>/``. Workers build their adapters
and read what the driver's prerender computed from the experiment's store (``cache_dir``).

**Stopping.** The process pool's workers never outlive the run: when ``run`` ends early (an
exception, ``KeyboardInterrupt`` — which the runner raises for SIGTERM and SIGHUP too — or
the caller closing the generator) the workers are terminated before it returns, and each
worker asks the kernel (Linux ``prctl(PR_SET_PDEATHSIG)``) for SIGTERM when its parent dies,
so even a ``kill -9`` of ``langadapt run`` leaves no worker training. The runs they were
doing have no ``done.json``; ``--resume`` redoes them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from . import one_run
from .config import ExperimentConfig

PR_SET_PDEATHSIG = 1
"""``prctl`` option (linux/prctl.h): the signal a process gets when its parent dies."""


@dataclass(frozen=True)
class Outcome:
    """A run that ended: ``error`` is None when it finished, else why it failed."""

    key: str
    error: str | None = None


class ProcessExecutor:
    """Runs in ``jobs`` spawned processes of this machine (in this process when 1)."""

    def __init__(self, jobs: int = 1) -> None:
        self.jobs = jobs

    def __enter__(self) -> ProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, config: ExperimentConfig, keys: list[str], out_dir: Path
            ) -> Iterator[Outcome]:
        data = config.resolved()
        if self.jobs <= 1 or len(keys) <= 1:
            for key in keys:
                one_run.execute_run(data, key, str(out_dir))
                yield Outcome(key)
            return
        workers = min(self.jobs, len(keys))
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                   initializer=die_with_parent, initargs=(os.getpid(),))
        try:
            futures = {
                pool.submit(one_run.execute_run, data, key, str(out_dir)): key for key in keys
            }
            for future in as_completed(futures):
                future.result()
                yield Outcome(futures[future])
        except BaseException:  # an error, an interrupt, or the caller stopped: stop the workers
            stop_workers(pool)
            raise
        pool.shutdown(wait=True)


def stop_workers(pool: ProcessPoolExecutor, grace: float = 5.0) -> None:
    """Terminate a pool's worker processes (then kill those still alive after ``grace``
    seconds) and shut the pool down without waiting for its queued runs."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(grace)
        if process.is_alive():
            process.kill()
            process.join(grace)
    pool.shutdown(wait=False, cancel_futures=True)


def die_with_parent(parent: int) -> None:
    """Worker initializer: on Linux the kernel sends this worker SIGTERM when its parent
    dies; if the parent is gone already, exit at once."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the parent's own shutdown still stops this worker
    if os.getppid() != parent:
        os._exit(1)
