"""The Ray executor: every (adapter, agent, seed) run is one Ray task.

The driver (the ``langadapt run`` process) connects to a cluster (``address``: ``auto``,
``HOST:PORT`` or ``ray://HOST:PORT``) or starts a local one, submits one task per run with
its CPU and GPU request, and writes each run's files into the results folder as its result
arrives. Shipped with every task: the resolved experiment and, for environments whose
states can be enumerated, the prerendered ``(vector, text)`` of every reachable input of
each language and llm adapter (:class:`~langadapt.experiments.executors.ShippedAdapter`),
so workers need neither an LLM nor the encoder. Otherwise workers build the adapters
themselves: the encoder from the installed package, LLM answers from the configured
backend. A worker on another node keeps its LLM answers in a cache of its own and returns
them with the run's result; the driver imports them into the experiment's cache.

**Connecting.** Before ``ray.init`` the driver checks the address it would join: the given
one or, as Ray does, ``RAY_ADDRESS`` (which overrides it) and, for ``auto``, the cluster Ray
finds on this machine. A TCP connection to ``HOST:PORT`` and an HTTP/2 exchange (Ray's GCS
and client server speak gRPC) must succeed within :data:`CONNECT_TIMEOUT_S`; otherwise the
error is one line naming the address — instead of a minute of ``gcs_client`` warnings from
``ray.init`` retrying a port where no cluster answers.

Ray itself is imported only when this executor is used (:func:`import_ray`): it is the
optional ``ray`` extra.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..llm import AnswerCache, answer_key
from .config import ConfigError, ExecutorSpec, ExperimentConfig, experiment_from_dict
from .executors import Outcome, ShippedAdapter, ship
from .one_run import ANSWERS_FILE, make_adapter, make_env, train_run
from .results import find_run, write_finished_run

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

    def run(
        self, config: ExperimentConfig, keys: list[str], out_dir: Path, prerendered: dict
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
        data = {**config.resolved(), "cache_dir": cache_dir}
        shared = ray.put((data, ship(config, prerendered)))
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
            if result["descriptions"]:
                merge_descriptions(result["descriptions"], cache_dir)
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


def run_on_worker(shared: tuple[dict, dict], run_key: str, driver_node: str) -> dict[str, Any]:
    """One run on a Ray worker: its rows, its ``done.json`` summary and, on a node other
    than the driver's, the LLM descriptions it asked for (JSONL text, else None)."""
    ray = import_ray()
    data, shipped = shared
    on_driver_node = ray.get_runtime_context().get_node_id() == driver_node
    if not on_driver_node or not data["cache_dir"]:
        data = {**data, "cache_dir": str(node_cache_dir(data["cache_dir"]))}
    config = experiment_from_dict(data, "config.yaml")
    run = find_run(config, run_key)
    adapter = None
    table = shipped.get(run.adapter.name)
    if table is not None:  # a fresh copy: the counters are per run
        adapter = ShippedAdapter(
            table.kind, table.observation_space, table.state_dtype, table.table
        ).bind(lambda: make_adapter(run.adapter, make_env(config), config.cache_dir))
    rows: list[dict[str, Any]] = []
    summary = train_run(config, run, rows.append, adapter=adapter)
    descriptions = None
    if not on_driver_node:
        descriptions = export_descriptions(config.cache_dir)
    return {"rows": rows, "summary": summary, "descriptions": descriptions}


def node_cache_dir(driver_cache_dir: str) -> Path:
    """This node's cache folder for an experiment whose driver caches in ``driver_cache_dir``."""
    tag = hashlib.sha256(driver_cache_dir.encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"langadapt-ray-cache-{os.getuid()}" / tag
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _description_cache(path: Path) -> Any:
    return AnswerCache(path)


def export_descriptions(cache_dir: str) -> str | None:
    """The LLM description cache of ``cache_dir`` as JSONL text (None if it has none)."""
    path = Path(cache_dir) / ANSWERS_FILE
    if not path.is_file():
        return None
    cache = _description_cache(path)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "descriptions.jsonl"
        try:
            count = cache.export_jsonl(out)
        finally:
            cache.close()
        return out.read_text() if count else None


def merge_descriptions(jsonl: str, cache_dir: str) -> None:
    """Import a worker's exported descriptions into the experiment's cache."""
    if not cache_dir:
        return
    folder = Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    cache = _description_cache(folder / ANSWERS_FILE)
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "descriptions.jsonl"
        source.write_text(jsonl)
        try:
            import_answers(cache, source)
        finally:
            cache.close()


def import_answers(cache: Any, source: Path) -> None:
    """Add the answers of a JSONL export to ``cache`` (the first answer for a key wins)."""
    if hasattr(cache, "import_jsonl"):
        cache.import_jsonl(source)
        return
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            answer, created = record.pop("answer"), record.pop("created", None)
            key = answer_key(record["backend"], record["identity"], record["options"],
                             record["schema"], record["messages"])
            cache.put(key, answer, record, created)
