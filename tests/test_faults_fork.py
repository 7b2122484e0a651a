"""Copies and forks of a LanguageObservation environment (issue 22, rows 4 and 13).

- ``copy.deepcopy`` of the wrapper failed with ``cannot pickle '_thread.lock'`` (the
  adapter holds a model, locks and a database); now the copy shares the adapter and steps
  independently of the original.
- A process that had used the MiniLM encoder and then forked (gymnasium's
  ``AsyncVectorEnv`` forks on Linux by default, as does SB3's
  ``SubprocVecEnv(start_method="fork")``) hung its children for ever in the model's layer
  norm (torch's OpenMP pool does not survive fork). Each start method runs here in its own
  process group under a hard time limit, so a hang fails the test instead of the suite.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import textwrap
import threading

import gymnasium as gym
import numpy as np
import pytest

from langadapt import adapters
from langadapt.adapters import LanguageObservation


def _maze(**kw) -> LanguageObservation:
    env = gym.make("langadapt/Maze-v0")
    return LanguageObservation(env, adapters.make("language", env), **kw)


# ------------------------------------------------------------- row 13: deepcopy
def test_a_deepcopied_wrapper_shares_the_adapter_and_steps_on_its_own():
    original = _maze(history_length=3)
    original.reset(seed=0)
    original.step(1)
    twin = copy.deepcopy(original)
    assert twin.adapter is original.adapter and twin.env is not original.env
    assert [a for _, a in twin.history] == [a for _, a in original.history]
    for action in (2, 3, 0, 1, 2, 7, 6):
        want = original.step(action)
        got = twin.step(action)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:4] == want[1:4] and got[4]["description"] == want[4]["description"]
    twin.reset(seed=5)  # the copy's history is its own
    assert len(twin.history) == 0 and len(original.history) == 3
    original.step(1)
    assert len(original.history) == 3 and len(twin.history) == 0
    np.testing.assert_array_equal(copy.deepcopy(original).reset(seed=9)[0],
                                  original.reset(seed=9)[0])


# ------------------------------------------------------------- row 4: fork safety
_VECTOR_SCRIPT = textwrap.dedent(
    """
    import sys
    import gymnasium as gym
    import numpy as np
    import langadapt.environments  # registers langadapt/Maze-v0
    from langadapt import adapters
    from langadapt.adapters import LanguageObservation

    def make():  # a fresh adapter: the child encodes with the model it inherited
        env = gym.make("langadapt/Maze-v0")
        return LanguageObservation(env, adapters.make("language", env))

    def run_single(seed, actions):
        env = make()
        rows = [env.reset(seed=seed)[0]]
        rows += [env.step(int(a))[0] for a in actions]
        return np.stack(rows)

    if __name__ == "__main__":
        method = sys.argv[1]
        parent = make()  # the parent uses the encoder (torch's thread pool) first
        parent.reset(seed=0)
        parent.step(1)
        rng = np.random.default_rng(0)
        actions = rng.integers(0, parent.action_space.n, size=(6, 2))
        venv = gym.vector.AsyncVectorEnv([make, make], context=method)
        rows = [venv.reset(seed=[1, 2])[0]]
        rows += [venv.step(a)[0] for a in actions]
        venv.close()
        got = np.stack(rows)
        for k, seed in enumerate((1, 2)):
            np.testing.assert_allclose(got[:, k], run_single(seed, actions[:, k]), atol=1e-5)
        print("async ok", flush=True)
        if method == "fork":
            try:
                from stable_baselines3.common.vec_env import SubprocVecEnv
            except ImportError:
                print("sb3 skipped", flush=True)
            else:
                sb3 = SubprocVecEnv([make, make], start_method="fork")
                first = sb3.reset()
                sb3.close()
                assert first.shape == (2, 384) and np.isfinite(first).all()
                print("sb3 ok", flush=True)
    """
)


def _run_limited(args: list[str], limit: float) -> subprocess.CompletedProcess:
    """Run ``args`` in a new process group; past ``limit`` seconds the whole group (the
    vector env's workers too) is killed and the test fails."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"{args[-1]}: the vector env hung (no result in {limit:.0f} s)\n"
                    f"{out}\n{err[-2000:]}")
    return subprocess.CompletedProcess(args, process.returncode, out, err)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork (POSIX)")
@pytest.mark.parametrize("method, limit", [("fork", 240.0), ("spawn", 480.0)])
def test_async_vector_env_over_language_observations_never_hangs(tmp_path, method, limit):
    script = tmp_path / "vector_env.py"
    script.write_text(_VECTOR_SCRIPT)
    result = _run_limited([sys.executable, str(script), method], limit)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "async ok" in result.stdout
    if method == "fork":
        assert "sb3 ok" in result.stdout or "sb3 skipped" in result.stdout


def _child_uses_the_store(path: str, queue) -> None:
    store = _INHERITED["store"]  # the parent's object, inherited through fork
    seen = store.get("parent")
    store.put_many([("child", "from the child", "from the child", None)])
    queue.put(seen)


_INHERITED: dict = {}


def test_a_cache_file_opened_before_a_fork_works_in_the_child(tmp_path):
    """SQLite connections must not cross a fork: the child reopens the file itself."""
    import multiprocessing

    from langadapt.llm import SQLiteStore

    path = tmp_path / "answers.sqlite"
    store = SQLiteStore(path, capacity=10)
    store.put_many([("parent", "from the parent", "from the parent", None)])
    _INHERITED["store"] = store
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:  # another thread is inside the store when the fork happens
        with store._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    held.wait(10)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_uses_the_store, args=(str(path), queue))
    child.start()
    release.set()
    holder.join()
    child.join(20)
    if child.exitcode is None:  # hung on the lock the parent's thread held at the fork
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert queue.get(timeout=5) == "from the parent"
    assert SQLiteStore(path, capacity=10).get("child") == "from the child"
    assert store.get("parent") == "from the parent"  # the parent's connection still works


def _child_asks_llamacpp(queue) -> None:
    from langadapt.llm import LLMError

    try:
        _INHERITED["llamacpp"].complete("You are terse.", "Say yes.", max_tokens=2)
        queue.put("answered")
    except LLMError as error:
        queue.put(str(error))


def test_llamacpp_in_a_child_forked_after_the_parent_ran_it_is_one_line_not_a_hang(tmp_path):
    import multiprocessing

    from langadapt.llm import LlamaCppBackend

    backend = LlamaCppBackend(cache_path=None)
    backend.complete("You are terse.", "Say no.", max_tokens=2)  # the parent runs the model
    _INHERITED["llamacpp"] = backend
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_asks_llamacpp, args=(queue,))
    child.start()
    child.join(60)
    if child.exitcode is None:  # hung inside llama.cpp
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert "spawn or forkserver" in queue.get(timeout=5)
