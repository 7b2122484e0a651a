"""Where the runs of an experiment execute: this machine's process pool, or a Ray cluster.

An executor is a context manager (entering it connects to a cluster or checks that it can)
whose ``run(config, keys, out_dir, prerendered)`` yields one :class:`Outcome` per run as it
finishes, after the run's files are written to ``out_dir/runs/<key>/``.
``prerendered``: the driver's prerendered adapters (``runner.prerendered_adapters``),
which the Ray executor turns into :class:`ShippedAdapter` tables for its workers.

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
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

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

    def run(
        self, config: ExperimentConfig, keys: list[str], out_dir: Path, prerendered: dict
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


# ----------------------------------------------------------------------------- shipping


class ShippedAdapter:
    """An adapter's ``(vector, text)`` for every reachable input, computed once by the
    driver and shipped with the runs, so that a worker needs neither an LLM nor the
    encoder: each input is one dict look-up. An input the table lacks (a state the
    prerender could not enumerate) goes to the real adapter, built on first need.

    Counters follow the real adapter's: each distinct input a run meets counts as
    served by the persistent caches (a description for an ``llm`` adapter, and a vector).
    Only adapters whose text ignores the action history are shipped.
    """

    def __init__(
        self,
        kind: str,
        observation_space: Any,
        state_dtype: np.dtype,
        table: dict[bytes, tuple[np.ndarray, str]],
    ) -> None:
        self.kind = kind
        self.observation_space = observation_space
        self.state_dtype = np.dtype(state_dtype)
        self.table = table
        self._seen: set[bytes] = set()
        self._build: Callable[[], Any] | None = None
        self._real: Any = None

    @classmethod
    def from_prerendered(cls, kind: str, adapter: Any, inputs: list) -> ShippedAdapter | None:
        """The table of a prerendered ``adapter`` over ``inputs``; None when the adapter's
        text depends on the history (``uses_history``) and cannot be tabled by state."""
        if getattr(adapter, "uses_history", True):
            return None
        dtype = np.dtype(adapter.state_dtype)
        table = {}
        for state, legal, history in inputs:
            key = _key(state, legal, dtype)
            if key is not None:
                vector, text = adapter.adapt(state, legal, history)
                table[key] = (np.array(vector, dtype=np.float32), text)
        return cls(kind, adapter.observation_space, dtype, table)

    def bind(self, build: Callable[[], Any]) -> ShippedAdapter:
        """Set how to build the real adapter for inputs the table lacks."""
        self._build = build
        return self

    def adapt(
        self, state: Any, legal_moves: Any = (), episode_action_history: Any = ()
    ) -> tuple[np.ndarray, str]:
        key = _key(state, legal_moves, self.state_dtype)
        hit = self.table.get(key) if key is not None else None
        if hit is None:
            return self._real_adapter().adapt(state, legal_moves, episode_action_history)
        if key not in self._seen:
            self._seen.add(key)
        return hit

    def __call__(self, state, legal_moves=(), episode_action_history=(), encode=True):
        vector, text = self.adapt(state, legal_moves, episode_action_history)
        return vector if encode else text

    def _real_adapter(self) -> Any:
        if self._real is None:
            if self._build is None:
                raise ValueError("this shipped adapter has no real adapter to ask (call bind)")
            self._real = self._build()
        return self._real

    def stats(self) -> dict[str, float]:
        stats = dict(self._real.stats()) if self._real is not None else {}
        served = len(self._seen)
        stats["shipped_inputs"] = served
        stats["embedding_cache_hits"] = stats.get("embedding_cache_hits", 0) + served
        if self.kind == "llm":
            stats["llm_cache_hits"] = stats.get("llm_cache_hits", 0) + served
        return stats


def _key(state: Any, legal_moves: Any, dtype: np.dtype) -> bytes | None:
    try:
        return np.asarray(state, dtype=dtype).tobytes() + bytes(list(legal_moves))
    except (TypeError, ValueError, OverflowError):
        return None  # not a plain state and moves < 256: the real adapter decides


def ship(config: ExperimentConfig, prerendered: dict[str, tuple]) -> dict[str, ShippedAdapter]:
    """Shipped tables of the prerendered adapters that can be tabled, by adapter name."""
    kinds = {spec.name: spec.type for spec in config.adapters}
    shipped = {}
    for name, (adapter, inputs) in prerendered.items():
        table = ShippedAdapter.from_prerendered(kinds[name], adapter, inputs)
        if table is not None:
            shipped[name] = table
    return shipped
