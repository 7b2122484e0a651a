"""Where the runs of an experiment execute: this machine's process pool
(:class:`ProcessExecutor`) or a Ray cluster (:class:`RayExecutor`, one Ray task a run; Ray
imported only when used). An executor is a context manager whose ``run(config, keys,
out_dir)`` yields one :class:`Outcome` per run as it finishes, after its files are written.
Stopping, workers and the cluster: docs/configuration.md ("Stopping is clean"), docs/cluster.md.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from ..llm import CacheError, open_store
from . import one_run
from .config import worker_config
from .one_run import train_run
from .results import find_run, write_finished_run
from .schema import STORE_FILE, ConfigError, ExecutorSpec, ExperimentConfig

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
        if self.jobs <= 1 or len(keys) <= 1:
            for key in keys:  # the driver's config, validated once
                one_run.execute_run(config, key, str(out_dir))
                yield Outcome(key)
            return
        data = config.resolved()
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


# ----------------------------------------------------------------------------- Ray


CONNECT_TIMEOUT_S = 5.0
"""How long the driver waits for a head node's port before giving up on an address."""

HEAD_HINT = (
    "start a head node there with `ray start --head --port=6379` (and `ray start "
    "--address=HEAD_IP:6379` on every other machine), or leave --address out to start a "
    "local cluster"
)


class RayUnavailableError(ConfigError):
    """Ray is not installed, or the cluster cannot be reached."""


#: Ray reads this once, when it is imported: "0" makes a node use the loopback address
#: instead of the machine's network address. A cluster this process starts for itself
#: (no ``--address``) serves only this machine, so it stays on 127.0.0.1.
LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


#: The first bytes an HTTP/2 client sends (RFC 9113 section 3.4), then an empty SETTINGS frame.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4


def import_ray(local_cluster: bool = False) -> Any:
    """The ``ray`` module, else an error naming the extra that installs it.

    ``local_cluster``: this process will start its own single-machine cluster, which then
    listens on 127.0.0.1 only (unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` is set or Ray
    was imported already)."""
    if local_cluster and "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_ONLY_ENV, "0")
    try:
        import ray  # here, not at the top: Ray is the optional extra langadapt[ray]
    except ImportError:
        raise RayUnavailableError(
            "the ray executor needs Ray, which is not installed: pip install 'langadapt[ray]'"
        ) from None
    return ray


def address_to_join(address: str | None, ray: Any = None) -> str | None:
    """The address ``ray.init(address=address)`` would join: ``RAY_ADDRESS`` overrides
    ``address``; ``auto`` is the cluster Ray finds on this machine (asked of ``ray`` when
    given; a :class:`RayUnavailableError` when there is none). None: start a local cluster."""
    given = os.environ.get("RAY_ADDRESS") or address
    if given != "auto" or ray is None:
        return given
    try:  # Ray's own look-up (ray_current_cluster, running GCS processes); not public API,
        # and imported here because Ray is the optional extra
        from ray._private.services import get_ray_address_from_environment
    except ImportError:
        return given
    try:
        return get_ray_address_from_environment("auto", None)
    except ConnectionError as error:
        raise RayUnavailableError(
            f"cannot connect to a Ray cluster at auto ({error}); {HEAD_HINT}"
        ) from None


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail within about ``timeout`` seconds, with one line naming ``address``, when no Ray
    cluster answers there: nothing listens at its port, or what listens does not speak
    HTTP/2 (gRPC) as Ray's GCS and client server do. ``auto`` is not checked here (see
    :func:`address_to_join`)."""
    if address == "auto":
        return
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host:
        host, port = target, "10001" if address.startswith("ray://") else "6379"
    try:
        number = int(port)
    except ValueError:
        raise RayUnavailableError(
            f"--address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT"
        ) from None
    try:
        with socket.create_connection((host, number), timeout=timeout) as connection:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return  # TLS first: no plain HTTP/2 to check
            connection.sendall(HTTP2_PREFACE)
            frame = _receive(connection, 9, time.monotonic() + timeout)
    except OSError as error:
        raise RayUnavailableError(
            f"cannot reach a Ray cluster at {address} ({error or type(error).__name__}); "
            f"{HEAD_HINT}"
        ) from None
    if len(frame) < 9 or frame[3] != HTTP2_SETTINGS:
        raise RayUnavailableError(
            f"no Ray cluster answers at {address}: something listens there but does not "
            f"speak Ray's protocol (gRPC); check the host and port — {HEAD_HINT}"
        )


def _receive(connection: socket.socket, size: int, deadline: float) -> bytes:
    """Up to ``size`` bytes before ``deadline`` (fewer if the peer closes; timeout raises)."""
    data = b""
    while len(data) < size:
        connection.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


class RayExecutor:
    """Runs as Ray tasks. ``jobs``: most runs in flight (default: all, Ray queues them)."""

    def __init__(self, spec: ExecutorSpec, jobs: int | None = None) -> None:
        self.ray = import_ray(local_cluster=spec.address is None)
        self.spec = spec
        self.jobs = jobs
        self.startup_seconds: float | None = None
        self._started_here = False

    def __enter__(self) -> RayExecutor:
        self._started_here = self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started_here:
            self.ray.shutdown()
            self._started_here = False

    def connect(self) -> bool:
        """Join ``spec.address`` or start a local cluster; False if this process already
        had Ray running (it is then used as it is)."""
        ray = self.ray
        if ray.is_initialized():
            return False
        started = time.perf_counter()
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        address = self.spec.address
        joined = address_to_join(address, ray)
        if joined is not None:
            check_reachable(joined)
        if address is not None:
            options["address"] = address
        elif self.jobs is not None:
            options["num_cpus"] = max(1, int(self.jobs * self.spec.cpus_per_run + 0.999))
        try:
            ray.init(**options)
        except (ConnectionError, TimeoutError) as error:
            where = f"at {joined}" if joined else "on this machine"
            raise RayUnavailableError(
                f"cannot connect to a Ray cluster {where} ({error}); {HEAD_HINT}"
            ) from None
        self.startup_seconds = time.perf_counter() - started
        return True

    def run(self, config: ExperimentConfig, keys: list[str], out_dir: Path
            ) -> Iterator[Outcome]:
        ray = self.ray
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor.run outside its `with` block")
        task = ray.remote(
            num_cpus=self.spec.cpus_per_run,
            num_gpus=self.spec.gpus_per_run,
            max_retries=self.spec.max_retries,
        )(run_on_worker)
        cache_dir = str(Path(config.cache_dir).resolve()) if config.cache_dir else ""
        store = open_store(Path(cache_dir) / STORE_FILE, 1) if cache_dir else None
        other_nodes = sum(node["Alive"] for node in ray.nodes()) > 1
        rows = list(store.rows()) if other_nodes and store is not None and store.usable else []
        shared = ray.put(({**config.resolved(), "cache_dir": cache_dir}, rows))
        driver_node = ray.get_runtime_context().get_node_id()
        queue, pending = list(keys), {}
        while queue or pending:
            while queue and (self.jobs is None or len(pending) < self.jobs):
                key = queue.pop(0)
                pending[task.remote(shared, key, driver_node)] = key
            ready, _ = ray.wait(list(pending), num_returns=1)
            key = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except ray.exceptions.RayError as error:
                yield Outcome(key, _short_error(error))
                continue
            if store is not None and result["store_rows"]:
                store.insert_rows(result["store_rows"])
            write_finished_run(out_dir, key, result["rows"], result["summary"])
            yield Outcome(key)


def _short_error(error: BaseException) -> str:
    """The last line of a task's error (Ray puts the worker's traceback before it)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1].strip() if lines else ''}"


# ----------------------------------------------------------------------------- the worker


def run_on_worker(shared: tuple[dict, list], run_key: str, driver_node: str
                  ) -> dict[str, Any]:
    """One run on a Ray worker: its rows, its ``done.json`` summary and, on a node other
    than the driver's, the rows its run added to the node's store (else [])."""
    ray = import_ray()
    data, store_rows = shared
    driver_cache_dir = data["cache_dir"]
    on_driver_node = ray.get_runtime_context().get_node_id() == driver_node
    if not on_driver_node or not driver_cache_dir:
        data = {**data, "cache_dir": str(node_cache_dir(driver_cache_dir))}
    config = worker_config(data)
    store, first = None, 0
    if not on_driver_node and driver_cache_dir:  # the driver's store, copied into the node's
        store = open_store(Path(config.cache_dir) / STORE_FILE, 1)
        copied = Path(config.cache_dir) / f"copied-{_rows_tag(store_rows)}"
        if not copied.exists():  # once per node and experiment, not per run
            store.insert_rows(store_rows)
            copied.touch()
        first = store.last_row()
    rows: list[dict[str, Any]] = []
    summary = train_run(config, find_run(config, run_key), rows.append)
    try:
        added = list(store.rows(after=first)) if store is not None else []
    except CacheError:  # the node's file could not be used: nothing was stored
        added = []
    return {"rows": rows, "summary": summary, "store_rows": added}


def _rows_tag(rows: list) -> str:
    """A short tag of the driver's shipped rows (their number and last key)."""
    return hashlib.sha256(f"{len(rows)} {rows[-1][0] if rows else ''}".encode()).hexdigest()[:12]


def node_cache_dir(driver_cache_dir: str) -> Path:
    """This node's cache folder for an experiment whose driver caches in ``driver_cache_dir``."""
    tag = hashlib.sha256(driver_cache_dir.encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"langadapt-ray-cache-{os.getuid()}" / tag
    folder.mkdir(parents=True, exist_ok=True)
    return folder
