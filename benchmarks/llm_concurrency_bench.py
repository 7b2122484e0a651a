"""LLM requests at the server's capacity: descriptions per second through the LLM adapter
against a local OpenAI-compatible stand-in (tests/standin_server.py of the checkout, started here
in a process of its own on 127.0.0.1, one per part: 200 ms per request, 32 parallel
slots, so at most ``slots / latency`` = 160 answers per second), each as a ratio to that
capacity:

- ``one_at_a_time``: `LLMAdapter.adapt` on one cold input after another (what one
  environment does: at most ``1 / latency`` = 5/s);
- ``adapt_many_16``: `adapt_many` with 16 cold inputs per call, ``concurrency=16`` (one
  step of 16 environments: at most 16 in flight, so ``16 / latency`` = 80/s = 0.5 of the
  capacity — a step cannot have more requests pending than environments);
- ``adapt_many_32``: 32 inputs per call, ``concurrency=32`` (32 environments: all slots);
- ``prerender``: `prerender` of a few hundred distinct inputs, ``concurrency=32``;
- ``training_16``: a DQN training run on 16 copies of the large maze
  (`adapters.vector.LanguageVectorEnv`, ``concurrency=16``, random walks early in
  training): the LLM calls it made per second of training, whatever share of its steps
  met only remembered states; ``training_1`` the same run on one maze
  (`LanguageObservation`).

Inputs: every reachable cell of the large maze after every possible last action (414
distinct prompts; ``action_history_length=1``), cold in the answer store (a fresh SQLite
file per part, written by the worker threads). Encodings are warmed first so that the
parts time the LLM path; ``adapt_many_16_cold_encoder`` repeats the 16-environment part
with a cold embedding store (MiniLM encodes the 16 texts of every call), as a cold step
of a training run does. ``*_ratio_to_bound`` divides by what the part can reach at most,
``min(concurrency, slots) / latency``; ``*_max_in_flight`` is the most requests the
stand-in held at once.

Against llama-cpp-python's own server (``python -m llama_cpp.server`` with the packaged
SmolLM2 GGUF; opt-in: ``LANGADAPT_BENCH_LLAMA_SERVER=1``, and only if its server extra is
importable): after one untimed request, 8 cold descriptions one at a time vs together
(``concurrency=8``).

``python -m langadapt.benchmarks.llm_concurrency_bench [--quick]`` runs it on
its own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import agents
from ..adapters import LanguageObservation, LLMAdapter, reachable_inputs
from ..adapters.vector import LanguageVectorEnv
from ..environments import MazeEnv
from ..llm import default_gguf_path, make_backend

STANDIN = Path(__file__).resolve().parent.parent / "tests" / "standin_server.py"
"""The tests' OpenAI-compatible stand-in (standard library only), run as a file of its own."""


def command(*args: str) -> list[str]:
    """The command serving a stand-in in its own process until terminated (``args``: its
    options; ``python -P``: the package is not imported)."""
    return [sys.executable, "-P", str(STANDIN), *args]

LATENCY, SLOTS = 0.2, 32
COPIES = 16
CAPACITY = SLOTS / LATENCY
SERVER_EXTRA = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


@contextmanager
def serving(args: list[str], ready: str = "") -> Iterator[str]:
    """A server process of ours (the command ``args``), its base URL (its first line of
    output, or ``ready``); terminated, by its own pid, on the way out."""
    process = subprocess.Popen(args,
                               stdout=subprocess.DEVNULL if ready else subprocess.PIPE,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    try:
        url = ready or process.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"{' '.join(args[:3])} did not start (exit code "
                               f"{process.poll()})")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def stand_in() -> Any:
    """The stand-in server of the measured parts (a context manager giving its URL)."""
    return serving(command("--latency", str(LATENCY), "--slots", str(SLOTS)))


def server_counts(url: str) -> dict[str, int]:
    root = url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/stand-in/counts", timeout=10) as reply:
        return json.loads(reply.read())


def adapter_for(url: str, env: Any, answers: Path | None, embeddings: Path,
                concurrency: int, model: str = "stand-in", **settings: Any) -> LLMAdapter:
    """An LLM adapter on the OpenAI-compatible server at ``url`` (answers stored in
    ``answers``, embeddings in ``embeddings``); ``settings`` are the adapter's."""
    made = make_backend({"backend": "openai", "base_url": url, "model": model,
                         "api_key_env": None, "cache_path": answers, "timeout": 600})
    adapter = LLMAdapter(env, backend=made, embedding_cache_path=embeddings,
                         action_history_length=1, concurrency=concurrency, **settings)
    made.identity  # noqa: B018 - the model lookup is made before the clock starts
    return adapter


def timed(adapter: LLMAdapter, inputs: list[Any], per_call: int | None) -> float:
    """Descriptions per second: `adapt` one by one (``per_call`` None), `adapt_many` of
    ``per_call`` inputs, or `prerender` (``per_call`` 0)."""
    start = time.perf_counter()
    if per_call is None:
        for item in inputs:
            adapter.adapt(*item)
    elif per_call == 0:
        adapter.prerender(inputs, progress=False)
    else:
        for first in range(0, len(inputs), per_call):
            adapter.adapt_many(inputs[first:first + per_call])
    seconds = time.perf_counter() - start
    return adapter.stats()["llm_calls"] / seconds


def trained(adapter: LLMAdapter, steps: int, copies: int) -> float:
    """LLM calls per second of a DQN training run of ``steps`` steps on ``copies`` copies
    of the large maze observed through ``adapter``."""
    if copies == 1:
        envs: Any = LanguageObservation(MazeEnv(maze="large"), adapter)
        space, actions = envs.observation_space, envs.action_space
    else:
        envs = LanguageVectorEnv([MazeEnv(maze="large") for _ in range(copies)], adapter)
        space, actions = envs.single_observation_space, envs.single_action_space
    agent = agents.make_agent("dqn", space, actions, seed=0, hidden_sizes=[64],
                              learning_starts=100)
    start = time.perf_counter()
    agents.train(agent, envs, steps=steps, seed=0, progress=False)
    return adapter.stats()["llm_calls"] / (time.perf_counter() - start)


def run(quick: bool = False) -> dict[str, float | str]:
    """Run the parts and return the named figures (see the module docstring)."""
    env = MazeEnv(maze="large")
    inputs = reachable_inputs(env, with_last_action=True)
    sizes = {"one_at_a_time": 10 if quick else 25, "adapt_many_16": 64 if quick else 320,
             "adapt_many_32": 64 if quick else 320, "prerender": 128 if quick else len(inputs)}
    parts = {"one_at_a_time": (None, 1), "adapt_many_16": (16, 16),
             "adapt_many_32": (32, 32), "prerender": (0, 32)}
    results: dict[str, float | str] = {
        "stand_in_latency_s": LATENCY, "stand_in_slots": SLOTS, "capacity_per_s": CAPACITY,
        "distinct_inputs": len(inputs)}
    print(f"stand-in: {LATENCY * 1000:.0f} ms per request, {SLOTS} slots (capacity "
          f"{CAPACITY:.0f}/s); {len(inputs)} distinct maze inputs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        warm = tmpdir / "embeddings.sqlite"
        with serving(command("--latency", "0", "--slots", str(SLOTS))) as url:
            # every text encoded once, before the clock
            adapter_for(url, env, None, warm, SLOTS).prerender(inputs[:max(sizes.values())],
                                                              progress=False)
        runs = [*parts.items(), ("training_1", (1, 1)), ("training_16", (COPIES, COPIES)),
                ("adapt_many_16_cold_encoder", (16, 16))]
        if quick:
            runs.pop()
        for name, (per_call, concurrency) in runs:
            embeddings = tmpdir / f"{name}-embeddings.sqlite" if "cold" in name else warm
            with stand_in() as url:
                adapter = adapter_for(url, env, tmpdir / f"{name}.sqlite", embeddings,
                                      concurrency)
                size = sizes.get(name, sizes["adapt_many_16"])
                rate = (trained(adapter, 640 if quick else 3200, per_call)
                        if name.startswith("training") else
                        timed(adapter, inputs[:size], per_call))
                counts = server_counts(url)
            bound = min(concurrency, SLOTS) / LATENCY  # the most this part can reach
            results[f"{name}_per_s"] = round(rate, 1)
            results[f"{name}_ratio"] = round(rate / CAPACITY, 3)
            results[f"{name}_ratio_to_bound"] = round(rate / bound, 3)
            results[f"{name}_max_in_flight"] = counts["max_in_flight"]
            print(f"{name:28s} {rate:6.1f} descriptions/s = {rate / CAPACITY:.2f} x capacity, "
                  f"{rate / bound:.2f} x its bound {bound:.0f}/s ({counts['answered']} "
                  f"answered, at most {counts['max_in_flight']} in flight)", flush=True)
        if os.environ.get("LANGADAPT_BENCH_LLAMA_SERVER") == "1":
            results.update(llama_server(env, inputs[:9], tmpdir))
        else:
            print("llama-cpp-python's server: not run (opt-in: LANGADAPT_BENCH_LLAMA_SERVER=1)",
                  flush=True)
    return results


def llama_server(env: Any, inputs: list[Any], tmpdir: Path) -> dict[str, float | str]:
    """Cold descriptions of ``inputs`` but the last (that one warms the server up) through
    ``python -m llama_cpp.server`` (the packaged SmolLM2), one at a time vs together."""
    missing = [name for name in SERVER_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        print(f"llama-cpp-python's server: not run, its server extra is missing "
              f"({', '.join(missing)})", flush=True)
        return {"llama_server": f"missing {' '.join(missing)}"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    args = [sys.executable, "-m", "llama_cpp.server", "--model", str(default_gguf_path()),
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
            "--n_threads_batch", "1"]
    rates: dict[str, float] = {}
    texts: dict[str, list[str]] = {}
    with serving(args, ready=url):
        end = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > end:
                    raise RuntimeError("llama_cpp.server did not answer within 120 s") from None
                time.sleep(0.5)
        for name, per_call, concurrency in (("warm-up", None, 1), ("one_at_a_time", None, 1),
                                            ("together", len(inputs) - 1, len(inputs) - 1)):
            adapter = adapter_for(url, env, tmpdir / f"llama-{name}.sqlite",
                                  tmpdir / f"llama-{name}-embeddings.sqlite", concurrency,
                                  model="smollm2", max_tokens=48)
            # the first request warms the server up: the last prompt, untimed
            rates[name] = timed(adapter, inputs[-1:] if name == "warm-up" else inputs[:-1],
                                per_call)
            texts[name] = [adapter.describe(*item) for item in inputs[:-1]]  # from the memo
    ratio = rates["together"] / rates["one_at_a_time"]
    same = sum(a == b for a, b in zip(texts["one_at_a_time"], texts["together"], strict=True))
    print(f"llama-cpp-python's server (SmolLM2, 1 thread): one at a time "
          f"{rates['one_at_a_time']:.2f}/s, 8 together {rates['together']:.2f}/s "
          f"(x{ratio:.2f}); the same text for {same} of 8 prompts", flush=True)
    return {"llama_server_one_at_a_time_per_s": round(rates["one_at_a_time"], 3),
            "llama_server_together_per_s": round(rates["together"], 3),
            "llama_server_together_ratio": round(ratio, 2), "llama_server_same_texts": same}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
