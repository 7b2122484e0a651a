"""The Ray executor: same episodes as the process pool, workers reading the driver's store,
a missing extra, an unreachable address, dying workers, a killed driver, and a real
two-node cluster."""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from fake_ollama import FakeOllama

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.executors import RayUnavailableError
from langadapt.experiments.runner import (
    RunsFailedError,
    check_results,
    finished_runs,
    run_experiment,
    runs_of,
)

LANGADAPT = Path(sys.executable).parent / "langadapt"
RAY = Path(sys.executable).parent / "ray"
QUIET = {"progress": False, "log": lambda _: None}


#: An agent whose long training can be interrupted: Q-learning exploring at random throughout
#: (the random agent learns nothing, so an experiment does not train it at all).
EXPLORING = [{"type": "qlearning", "params": {"epsilon_start": 1.0, "epsilon_min": 1.0}}]


def experiment(tmp_path: Path, **changes) -> dict:
    data = {
        "name": "ray-tiny",
        "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "random"}],
        "training": {"episodes": 6},
        "seeds": 2,
        "evaluation": {"every": 3, "episodes": 1, "final_episodes": 2},
        "output": str(tmp_path / "out"),
        "cache_dir": str(tmp_path / "cache"),
    }
    data.update(changes)
    return data


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        rows = csv.DictReader(handle)
        return [{k: v for k, v in row.items() if k != "wall_time"} for row in rows]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(LANGADAPT), *args], capture_output=True, text=True, timeout=600,
                          **kwargs)


# ----------------------------------------------------------------------------- no cluster


def test_a_missing_ray_is_named_with_the_extra_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    config = experiment_from_dict(experiment(tmp_path, executor={"type": "ray"}))
    with pytest.raises(RayUnavailableError, match=r"pip install 'langadapt\[ray\]'"):
        run_experiment(config, **QUIET)
    assert not (tmp_path / "out").exists()


def test_an_unreachable_address_is_named_with_how_to_start_a_head_node(tmp_path):
    pytest.importorskip("ray")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment(tmp_path)))
    address = f"127.0.0.1:{_free_port()}"
    result = _cli("run", str(path), "--executor", "ray", "--address", address)
    assert result.returncode == 2
    assert address in result.stderr and "ray start --head" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


class _OtherNode:
    """Stands in for the ``ray`` module on a worker of another node than the driver's."""

    def get_runtime_context(self):
        return self

    def get_node_id(self):
        return "another node"


def test_a_worker_on_another_node_copies_the_store_and_returns_what_it_added(
        tmp_path, monkeypatch):
    from langadapt.experiments import executors
    from langadapt.experiments.runner import prerender
    from langadapt.llm import SQLiteStore

    monkeypatch.setattr(executors, "import_ray", _OtherNode)
    monkeypatch.setattr(executors.tempfile, "tempdir", str(tmp_path / "node"))
    for env, prerendered in [({"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}}, True),
                             ({"id": "langadapt/CartPole-v0", "params": {}}, False)]:
        data = experiment(tmp_path, environment=env, adapters=[{"type": "language"}], seeds=1,
                          cache_dir=str(tmp_path / f"cache-{prerendered}"))
        config = experiment_from_dict(data)
        prerender(config, progress=False)
        driver = SQLiteStore(Path(config.cache_dir) / "cache.sqlite")
        shipped = ({**config.resolved(), "cache_dir": config.cache_dir}, list(driver.rows()))
        (run,) = runs_of(config)
        result = executors.run_on_worker(shipped, run.key, "the driver's node")
        stats = result["summary"]["adapter_stats"]
        if prerendered:  # every state was in the driver's store: nothing new comes back
            assert stats["encoder_calls"] == 0 and result["store_rows"] == []
        else:  # CartPole's states are encoded on the worker and come back as rows
            assert stats["encoder_calls"] > 0
            assert len(result["store_rows"]) == stats["encoder_calls"]
            driver.insert_rows(result["store_rows"])
            assert len(driver) == stats["encoder_calls"]
        driver.close()


# ----------------------------------------------------------------------------- a local cluster


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


def _answer(request: dict) -> str:
    digest = hashlib.sha256(request["messages"][-1]["content"].encode()).hexdigest()[:6]
    return f"A corridor cell, code {digest}."


def test_ray_gives_the_same_episodes_as_the_process_pool(local_ray, tmp_path):
    with FakeOllama(models=("tiny",), reply=_answer) as server:
        data = experiment(
            tmp_path,
            adapters=[
                {"type": "raw"},
                {"type": "language"},
                {"type": "llm", "settings": {"backend": "ollama", "model": "tiny",
                                             "host": server.host, "action_history_length": 0}},
            ],
            agents=[
                {"type": "qlearning"},
                {"type": "dqn", "params": {"hidden_sizes": [16], "learning_starts": 20,
                                           "batch_size": 8}},
            ],
            seeds=1,
        )
        pool = experiment_from_dict({**data, "output": str(tmp_path / "pool")})
        run_experiment(pool, **QUIET)
        chats = server.requests["/api/chat"]
        on_ray = experiment_from_dict(
            {**data, "output": str(tmp_path / "ray"), "executor": {"type": "ray"}}
        )
        run_experiment(on_ray, **QUIET)
        assert server.requests["/api/chat"] == chats  # the workers asked the LLM nothing
    assert _rows(tmp_path / "ray" / "episodes.csv") == _rows(tmp_path / "pool" / "episodes.csv")
    for run in runs_of(on_ray):
        done = json.loads((tmp_path / "ray" / "runs" / run.key / "done.json").read_text())
        if run.adapter.type != "raw":  # answered from the driver's store
            assert done["adapter_stats"]["llm_calls"] == 0
            assert done["adapter_stats"]["encoder_calls"] == 0
            assert done["adapter_stats"]["embedding_cache_hits"] > 0
    assert check_results(tmp_path / "ray") == {}


def _descendants(root: int) -> list[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _kill_one_task_worker(kills: list[int], stop: threading.Event) -> None:
    """SIGKILL the first worker process (a descendant of this test) running a run."""
    while not stop.is_set():
        for pid in _descendants(os.getpid()):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if title.startswith(b"ray::run_on_worker"):
                os.kill(pid, signal.SIGKILL)
                kills.append(pid)
                return
        time.sleep(0.05)


@pytest.mark.parametrize("retries", [0, 1])
def test_a_worker_that_dies_is_retried_or_reported_and_the_others_are_kept(
    local_ray, tmp_path, retries
):
    config = experiment_from_dict(
        experiment(tmp_path, training={"episodes": 1500}, seeds=2,
                   executor={"type": "ray", "max_retries": retries, "jobs": 2},
                   agents=EXPLORING)
    )
    kills: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_one_task_worker, args=(kills, stop), daemon=True)
    killer.start()
    try:
        if retries == 0:
            with pytest.raises(RunsFailedError, match="1 run .* failed") as error:
                run_experiment(config, **QUIET)
            assert "--resume" in str(error.value)
        else:
            run_experiment(config, **QUIET)
    finally:
        stop.set()
        killer.join()
    assert len(kills) == 1
    out = config.output_dir
    failed = check_results(out)
    finished = finished_runs(out)
    if retries == 0:
        assert len(failed) == 1 and len(finished) == 1
        (key,) = failed
        assert "died" in failed[key].lower() or "crash" in failed[key].lower(), failed[key]
        assert f"run {key} failed" in (out / "summary.md").read_text()
    else:
        assert failed == {} and len(finished) == 2


# ----------------------------------------------------------------------------- killed drivers


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.2)


def _kill_driver_mid_run_then_resume(
    tmp_path: Path, args: list[str], env: dict[str, str] | None = None
) -> None:
    """Start ``langadapt run`` with ``args``, SIGKILL it (and the processes it started)
    once one run has finished, check the folder is 'interrupted', resume, check it is whole."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment(tmp_path, training={"episodes": 1500}, seeds=3,
                                              agents=EXPLORING)))
    out = tmp_path / "out"
    driver = subprocess.Popen(
        [str(LANGADAPT), "run", str(path), "--no-progress", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env,
    )
    try:
        _wait_for(lambda: len(finished_runs(out)) >= 1 if out.exists() else False, 300,
                  "a finished run")
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and what it started
        driver.wait()
    kept = finished_runs(out)
    assert 1 <= len(kept) < 3
    stamps = {k: (out / "runs" / k / "episodes.csv").stat().st_mtime_ns for k in kept}
    report = _cli("report", str(out))
    assert report.returncode == 2 and "interrupted" in report.stderr
    resumed = _cli("run", str(path), "--resume", "--no-progress", *args, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert check_results(out) == {} and len(finished_runs(out)) == 3
    for key, stamp in stamps.items():  # finished runs were kept, not redone
        assert (out / "runs" / key / "episodes.csv").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_resume_after_the_driver_of_a_local_cluster_was_killed(tmp_path):
    pytest.importorskip("ray")
    _kill_driver_mid_run_then_resume(tmp_path, ["--executor", "ray", "--jobs", "1"])


# `ray start` for a second node on this machine, kept on 127.0.0.1. Ray refuses a worker
# node while loopback-only mode is on (conftest), and with it off it swaps 127.0.0.1 for
# the machine's network address; keeping the address as given keeps every connection of
# the test cluster on the loopback interface.
LOOPBACK_WORKER_NODE = (
    "import sys, ray._private.services as services; "
    "services.resolve_ip_for_localhost = lambda host: host; "
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"
)


@pytest.mark.slow
def test_a_two_node_cluster_runs_resumes_and_merges_worker_caches(tmp_path):
    """`ray start --head` and a second `ray start --address` node on 127.0.0.1; a driver
    killed mid-run and resumed; then a CartPole experiment (nothing to prerender) whose LLM
    adapter asks a fake Ollama server from the workers, their answers merged back."""
    pytest.importorskip("ray")
    port = _free_port()
    temp = Path(f"/tmp/la-ray-{os.getpid()}")
    common = ["--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
              "--object-store-memory", str(100 * 1024 * 1024)]
    # loopback only, for this test: no token authentication between the nodes and drivers
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    head = subprocess.Popen(
        [str(RAY), "start", "--head", "--port", str(port), "--temp-dir", str(temp),
         "--include-dashboard", "false", *common],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env,
    )
    nodes: list[subprocess.Popen] = [head]
    try:
        address = f"127.0.0.1:{port}"
        _wait_for(lambda: _port_open(port), 120, "the head node")
        nodes.append(subprocess.Popen(
            [sys.executable, "-c", LOOPBACK_WORKER_NODE, "start", "--address", address,
             *common],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env=dict(env, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1"),
        ))
        _wait_for(lambda: _alive_nodes(address, env) == 2, 120, "two nodes")
        _kill_driver_mid_run_then_resume(tmp_path / "maze", ["--executor", "ray", "--address",
                                                             address, "--jobs", "1"], env)
        _cartpole_answers_come_back(tmp_path / "cartpole", address, env)
    finally:
        for node in reversed(nodes):
            os.killpg(node.pid, signal.SIGTERM)  # `ray start --block` stops its processes
        for node in reversed(nodes):
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _alive_nodes(address: str, env: dict[str, str]) -> int:
    code = (f"import ray, logging; ray.init(address={address!r}, logging_level=logging.ERROR); "
            "print(sum(n['Alive'] for n in ray.nodes()))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env)
    return int(result.stdout.strip() or 0)


def _cartpole_answers_come_back(tmp_path: Path, address: str, env: dict[str, str]) -> None:
    tmp_path.mkdir(parents=True)
    with FakeOllama(models=("tiny",), reply=_answer) as server:
        data = experiment(
            tmp_path,
            environment={"id": "langadapt/CartPole-v0", "params": {}},
            adapters=[{"type": "llm", "settings": {"backend": "ollama", "model": "tiny",
                                                   "host": server.host,
                                                   "action_history_length": 0}}],
            training={"episodes": 2}, seeds=2,
            evaluation={"episodes": 1, "final_episodes": 1},
        )
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump(data))
        result = _cli("run", str(path), "--executor", "ray", "--address", address,
                      "--no-progress", env=env)
        assert result.returncode == 0, result.stderr
        prompts = {json.dumps(body["messages"], sort_keys=True) for body in server.chat_bodies}
        done = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*/done.json")]
    assert len(prompts) > 0 and len(done) == 2
    from langadapt.llm import SQLiteStore

    merged = SQLiteStore(tmp_path / "cache" / "cache.sqlite")
    try:  # what every worker asked, on either node, is in the driver's store
        assert sum("messages" in meta for _, _, meta, _ in merged.rows()) == len(prompts)
    finally:
        merged.close()
