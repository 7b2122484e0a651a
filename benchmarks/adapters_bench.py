"""Benchmark of the language adapters: warm steps, the adapter's own cost, cold encoding.

Figures, all measured in one run (this machine is shared: only side-by-side ratios mean
much, and every timing is the best of several interleaved repeats):

- ``warm_step_ratio``: steps/s of the Maze wrapped in ``LanguageObservation`` with a
  warm (prerendered) ``LanguageAdapter`` / steps/s of the raw Maze, same action sequence
  (target >= 0.5).
- ``warm_step_ratio_nocopy``: the same with ``LanguageObservation(..., copy=False)``
  (observations are the shared read-only vectors, no per-step copy).
- ``warm_step_ratio_gym_make``: the same ratio when both environments come from
  ``gymnasium.make("langadapt/Maze-v0")`` (with gymnasium's default wrappers), as users
  build them.
- ``warm_adapter_us_per_step``: the adapter's own cost per call, warm, replaying the
  ``(state, legal_moves, history)`` inputs of that action sequence (target <= 5 us).
- ``cold_encode_ratio``: throughput of encoding N distinct descriptions through the
  adapter (``encode_many``: hashing, cache look-ups, one batched encoder call, SQLite
  writes) / throughput of a plain batched ``SentenceTransformer.encode`` on the same
  texts (target >= 0.9), both on the torch backend (``encoder_bench`` compares backends):
  paired chunks of new texts, alternating order; the ratio of
  summed times, and ``cold_encode_ratio_median_pair`` the median of per-chunk ratios.
- ``encoder_calls_during_warm_run``: texts encoded while stepping after prerender (0).
- ``raw_step_us`` / ``wrapper_overhead_us``: the raw Maze step and what the wrapper adds
  per step (from the best warm timings), and ``cost_*_us``: the pieces of that overhead
  timed alone (``timeit``, best of repeats): the fresh copy of the 384-float vector, the
  warm look-up (state bytes -> state index -> legal-moves compare), the full memo key it
  replaces (state bytes + legal moves as bytes), and recording one history pair.

Run: ``python -m langadapt.benchmarks.adapters_bench [--quick]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ..adapters import (
    EmbeddingCache,
    LanguageAdapter,
    LanguageObservation,
    get_encoder,
    reachable_inputs,
)
from ..environments import MazeEnv
from ..environments.maze import MazeDescriber
from . import replay

__all__ = ["run"]


def _cold_texts(n: int) -> list[str]:
    """``n`` distinct Maze descriptions (cells of large random mazes, with last moves)."""
    texts: list[str] = []
    seed = 0
    while len(texts) < n:
        env = MazeEnv(maze="random", width=41, height=41, seed=seed)
        describer = MazeDescriber(env.grid, env.goal, include_last_move=True)
        for cell in env.free_cells():
            legal = env.legal_moves_at(cell)
            texts.append(describer(env.observation_of(cell), legal, seed % 8))
        seed += 1
    unique = list(dict.fromkeys(texts))
    if len(unique) < n:
        raise RuntimeError(f"only {len(unique)} distinct texts; expected {n}")
    return unique[:n]


def run(quick: bool = False) -> dict[str, float | str]:
    """Measure the adapter figures; print a table; return them by name."""
    n_steps = 30_000 if quick else 200_000
    repeats = 3 if quick else 5
    n_cold = 32 if quick else 64
    cold_repeats = 2 if quick else 8
    maze = "medium"

    encoder = get_encoder(backend="torch")  # the cold ratio: the adapter's overhead on torch
    encoder.encode_many(["warm-up sentence for the encoder"])  # first-call costs

    # ---------------------------------------------------------------- warm steps
    rng = np.random.default_rng(0)
    actions = [int(a) for a in rng.integers(0, 8, size=n_steps)]
    raw_env = MazeEnv(maze=maze, max_steps=200)
    adapter = LanguageAdapter(MazeEnv(maze=maze), encoder=encoder)
    prerender_start = time.perf_counter()
    distinct = adapter.prerender(reachable_inputs(raw_env), progress=False)["distinct_texts"]
    prerender_seconds = time.perf_counter() - prerender_start
    calls_before = adapter.stats()["encoder_calls"]
    wrapped = LanguageObservation(MazeEnv(maze=maze, max_steps=200), adapter)
    shared = LanguageObservation(MazeEnv(maze=maze, max_steps=200), adapter, copy=False)
    made_raw = gym.make("langadapt/Maze-v0", maze=maze, max_steps=200)
    made_wrapped = LanguageObservation(
        gym.make("langadapt/Maze-v0", maze=maze, max_steps=200), adapter
    )
    raw_times, wrapped_times, shared_times, made_raw_times, made_times = [], [], [], [], []
    for _ in range(repeats):  # interleaved, best of each
        raw_times.append(replay(raw_env, actions))
        wrapped_times.append(replay(wrapped, actions))
        shared_times.append(replay(shared, actions))
        made_raw_times.append(replay(made_raw, actions))
        made_times.append(replay(made_wrapped, actions))
    raw_sps = n_steps / min(raw_times)
    wrapped_sps = n_steps / min(wrapped_times)
    shared_sps = n_steps / min(shared_times)
    made_ratio = min(made_raw_times) / min(made_times)
    encoder_calls_warm = adapter.stats()["encoder_calls"] - calls_before

    # ---------------------------------------------------------------- adapter's own cost
    recorder = MazeEnv(maze=maze, max_steps=200)
    obs, info = recorder.reset(seed=0)
    inputs: list[tuple[np.ndarray, list[int], list[tuple[Any, int]]]] = []
    history: list[tuple[Any, int]] = []
    for action in actions[: min(n_steps, 50_000)]:
        previous = obs
        obs, _, terminated, truncated, info = recorder.step(action)
        history = [*history[-3:], (previous, action)]
        inputs.append((obs, info["legal_moves"], history))
        if terminated or truncated:
            obs, info = recorder.reset()
            history = []
    own_times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for state, legal, past in inputs:
            adapter(state, legal, past)
        own_times.append(time.perf_counter() - start)
    adapter_us = min(own_times) / len(inputs) * 1e6

    # ---------------------------------------------------------------- per-component costs
    state, legal, _ = inputs[-1]
    vector = adapter(state, legal)
    index = adapter.memo.by_state
    if adapter.memo.history_key is not None:
        raise RuntimeError("the maze adapter has no state index; expected one")
    parts = {
        "copy": lambda: vector.copy(),
        "warm_lookup": lambda: index.get(state.tobytes())[0] == legal,
        "full_key": lambda: state.tobytes() + bytes(legal),
        "history_pair": lambda: history.append((state, 3)),
    }
    costs: dict[str, float] = {}
    for name, part in parts.items():
        history = []
        number = 200_000
        costs[name] = min(timeit.repeat(part, number=number, repeat=repeats)) / number * 1e6
    empty = min(timeit.repeat(lambda: None, number=200_000, repeat=repeats)) / 200_000 * 1e6
    costs = {name: max(cost - empty, 0.0) for name, cost in costs.items()}

    # ---------------------------------------------------------------- cold encoding
    # Paired trials: each chunk of new texts is encoded by plain SentenceTransformer.encode
    # and through a fresh adapter (cold memo, cold in-memory and SQLite caches), back to
    # back in alternating order; the ratio of the summed times and the median of the
    # per-chunk ratios are reported (the encoder's speed drifts with the machine's load).
    texts = _cold_texts(n_cold * cold_repeats)
    plain_times, through_times = [], []
    model = encoder.model
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(cold_repeats):
            batch = texts[r * n_cold : (r + 1) * n_cold]
            cold = LanguageAdapter(
                MazeEnv(maze=maze),
                embedding_cache=EmbeddingCache(encoder, path=Path(tmp) / f"cold{r}.sqlite"),
            )

            def plain(batch: list[str] = batch) -> None:
                start = time.perf_counter()
                model.encode(batch, batch_size=encoder.batch_size, convert_to_numpy=True)
                plain_times.append(time.perf_counter() - start)

            def through(batch: list[str] = batch, cold: LanguageAdapter = cold) -> None:
                start = time.perf_counter()
                vectors = cold.encode_many(batch)
                through_times.append(time.perf_counter() - start)
                if cold.stats()["encoder_calls"] != len(batch) or vectors.shape[0] != len(batch):
                    raise RuntimeError("the cold run did not encode every text exactly once")

            for measure in (plain, through) if r % 2 == 0 else (through, plain):
                measure()
    plain_tps = n_cold * cold_repeats / sum(plain_times)
    through_tps = n_cold * cold_repeats / sum(through_times)
    paired = sorted(p / t for p, t in zip(plain_times, through_times, strict=True))
    median_ratio = float(np.median(paired))

    figures: dict[str, float | str] = {
        "maze": maze,
        "warm_steps": float(n_steps),
        "raw_steps_per_s": raw_sps,
        "wrapped_steps_per_s": wrapped_sps,
        "warm_step_ratio": wrapped_sps / raw_sps,
        "wrapped_nocopy_steps_per_s": shared_sps,
        "warm_step_ratio_nocopy": shared_sps / raw_sps,
        "gym_make_raw_steps_per_s": n_steps / min(made_raw_times),
        "warm_step_ratio_gym_make": made_ratio,
        "warm_adapter_us_per_step": adapter_us,
        "raw_step_us": 1e6 / raw_sps,
        "wrapper_overhead_us": 1e6 / wrapped_sps - 1e6 / raw_sps,
        "cost_copy_us": costs["copy"],
        "cost_warm_lookup_us": costs["warm_lookup"],
        "cost_full_key_us": costs["full_key"],
        "cost_history_pair_us": costs["history_pair"],
        "encoder_calls_during_warm_run": float(encoder_calls_warm),
        "prerender_texts": float(distinct),
        "prerender_seconds": prerender_seconds,
        "cold_texts": float(n_cold),
        "plain_encode_texts_per_s": plain_tps,
        "adapter_encode_texts_per_s": through_tps,
        "cold_encode_ratio": through_tps / plain_tps,
        "cold_encode_ratio_median_pair": median_ratio,
    }
    print("adapters benchmark" + (" (quick)" if quick else ""))
    for name, value in figures.items():
        shown = value if isinstance(value, str) else f"{value:,.3f}"
        print(f"  {name:32s} {shown}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and texts")
    run(quick=parser.parse_args().quick)


if __name__ == "__main__":
    main()
