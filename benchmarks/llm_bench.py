"""LLM adapter benchmark: LLM calls per run, warm-cache step rate, prerender concurrency.

Parts 1-3 run through `LLMAdapter` with a stand-in backend (a `langadapt.llm.LLMBackend`
whose answer is derived from the prompt, after an optional latency), so the figures
measure this library's caching and concurrency, not a model or a server; parts 4-5 run
the embedded SmolLM2. Each measurement is side by side in one run:

1. ``llm_calls_first_run`` vs ``distinct_prompts``: a random-policy Maze run through
   `LanguageObservation` makes one LLM call per distinct prompt, and an identical rerun
   with a new adapter (same persistent description cache) makes ``llm_calls_rerun`` = 0.
2. ``warm_steps_ratio``: Maze steps per second through the LLM adapter with a warm memo
   (after `prerender` of every reachable cell) ÷ raw Maze steps per second, replaying the
   same sequence of random legal actions on both (>= 0.5 expected);
   ``warm_steps_ratio_gym_make`` the same with both environments from ``gymnasium.make``.
3. ``prerender_speedup``: prerender of every reachable Maze cell through the server with an
   artificial per-request latency, ``concurrency=4`` vs ``concurrency=1`` (encodings are
   warmed first so that both runs time only the LLM part).
4. ``scoring_*``: :mod:`scoring_bench` — per decision on SmolLM2, scoring the known
   replies vs structured generation vs the floor, and their greedy agreement (1000
   distinct maze prompts; 20 with ``--quick``).
5. ``styles_*``: :mod:`prompt_styles_bench` — verbose vs compact prompts: time, new
   prompt tokens and optimal-move rate per decision, the potential's Spearman correlation.

``python -m langadapt.benchmarks.llm_bench [--quick]`` runs it on its own.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym

from .. import environments
from ..adapters import LanguageObservation, LLMAdapter, reachable_inputs
from ..llm import LLMBackend
from . import legal_action_sequence, prompt_styles_bench, replay, scoring_bench

_IN_FLIGHT = {"now": 0, "max": 0}
_LOCK = threading.Lock()


class StandInBackend(LLMBackend):
    """A deterministic stand-in model: the description is derived from the prompt, after
    ``latency`` seconds; it may answer several requests at once (like an Ollama server)."""

    name: ClassVar[str] = "stand-in"
    supports_concurrency: ClassVar[bool] = True
    latency: float = 0.0

    def generate(self, messages: list[dict[str, str]], schema: Any, max_tokens: int) -> str:
        with _LOCK:
            _IN_FLIGHT["now"] += 1
            _IN_FLIGHT["max"] = max(_IN_FLIGHT["max"], _IN_FLIGHT["now"])
        try:
            if self.latency:
                time.sleep(self.latency)
            first = messages[-1]["content"].split("\n")[0].removeprefix("Current state: ")
            return f"The agent observes this: {first}"
        finally:
            with _LOCK:
                _IN_FLIGHT["now"] -= 1

    def resolve_identity(self) -> str:
        return "stand-in-1"


def run(quick: bool = False) -> dict[str, float | str]:
    """Run the three measurements and return the named figures (see the module docstring)."""


    maze_name = "umaze" if quick else "medium"
    run_steps = 300 if quick else 2000
    rate_steps = 5_000 if quick else 30_000
    latency = 0.05 if quick else 0.1
    results: dict[str, float | str] = {"maze": maze_name}

    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        emb = tmpdir / "embeddings.sqlite"

        # 1. LLM calls in a run = distinct prompts; the rerun makes none (answers and
        # embeddings in one store, as in an experiment's cache_dir).
        env = environments.MazeEnv(maze=maze_name, max_steps=100)
        store = tmpdir / "run.sqlite"
        settings = dict(embedding_cache_path=store, action_history_length=2)
        first = LLMAdapter(env, backend=StandInBackend(cache_path=store), **settings)
        run_actions = legal_action_sequence(env, run_steps, seed=1)
        replay(LanguageObservation(env, first), run_actions)
        rerun = LLMAdapter(env, backend=StandInBackend(cache_path=store), **settings)
        replay(LanguageObservation(env, rerun), run_actions)
        results["llm_calls_first_run"] = first.stats()["llm_calls"]
        results["distinct_prompts"] = sum("messages" in meta
                                          for _, _, meta, _ in first.backend.cache.rows())
        results["llm_calls_rerun"] = rerun.stats()["llm_calls"]
        print(f"maze run of {run_steps} steps (history 2): {results['llm_calls_first_run']} LLM "
              f"calls for {results['distinct_prompts']} distinct prompts; rerun: "
              f"{results['llm_calls_rerun']} calls", flush=True)

        # 2. Warm-cache steps/s with the LLM adapter / raw steps/s.
        warm = LLMAdapter(env, backend=StandInBackend(cache_path=tmpdir / "warm.sqlite"),
                          embedding_cache_path=emb, action_history_length=0)
        warm.prerender(reachable_inputs(env), progress=False)
        calls_before = warm.stats()["llm_calls"]
        actions = legal_action_sequence(env, rate_steps, seed=3)
        made = gym.make("langadapt/Maze-v0", maze=maze_name, max_steps=100)
        contenders = {
            "raw": env,
            "llm": LanguageObservation(env, warm),
            "raw_gym_make": made,
            "llm_gym_make": LanguageObservation(
                gym.make("langadapt/Maze-v0", maze=maze_name, max_steps=100), warm
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for contender in contenders.values():  # warm-up of every code path
            replay(contender, actions[:500])
        for _ in range(5):  # interleaved, best of 5: the machine is shared
            for name, contender in contenders.items():
                times[name].append(replay(contender, actions))
        rate = {name: rate_steps / min(t) for name, t in times.items()}
        results["raw_steps_per_s"] = round(rate["raw"])
        results["llm_warm_steps_per_s"] = round(rate["llm"])
        results["warm_steps_ratio"] = round(rate["llm"] / rate["raw"], 3)
        results["warm_steps_ratio_gym_make"] = round(rate["llm_gym_make"] / rate["raw_gym_make"], 3)
        results["warm_run_llm_calls"] = warm.stats()["llm_calls"] - calls_before
        print(f"warm steps/s: raw MazeEnv {rate['raw']:,.0f}, LLM adapter {rate['llm']:,.0f} "
              f"(ratio {results['warm_steps_ratio']:.2f}); both from gymnasium.make: ratio "
              f"{results['warm_steps_ratio_gym_make']:.2f}", flush=True)

        # 3. Prerender through the server with latency, concurrency 4 vs 1.
        inputs = reachable_inputs(env)
        LLMAdapter(env, backend=StandInBackend(cache_path=None), embedding_cache_path=emb,
                   action_history_length=0, concurrency=4).prerender(inputs, progress=False)
        timings = {}
        for concurrency in (1, 4):
            _IN_FLIGHT["max"] = 0
            backend = StandInBackend(cache_path=tmpdir / f"prerender-{concurrency}.sqlite",
                                     latency=latency)
            adapter = LLMAdapter(env, backend=backend, embedding_cache_path=emb,
                                 action_history_length=0, concurrency=concurrency)
            start = time.perf_counter()
            summary = adapter.prerender(inputs, progress=False)
            timings[concurrency] = time.perf_counter() - start
            results[f"prerender_c{concurrency}_s"] = round(timings[concurrency], 3)
            results[f"prerender_c{concurrency}_max_in_flight"] = _IN_FLIGHT["max"]
        results["prerender_prompts"] = summary["distinct_prompts"]
        results["prerender_latency_s"] = latency
        results["prerender_speedup"] = round(timings[1] / timings[4], 2)
        print(f"prerender of {summary['distinct_prompts']} prompts at {latency * 1000:.0f} ms "
              f"per request: concurrency 1 {timings[1]:.2f} s, concurrency 4 {timings[4]:.2f} s "
              f"(speed-up {timings[1] / timings[4]:.2f}x)", flush=True)
    # 4. and 5.: LLM decisions on the embedded SmolLM2 (scoring vs generation vs the floor;
    # prompt styles, decision quality, the potential by expectation)
    print("\nscoring known replies vs generation (llama.cpp, SmolLM2):", flush=True)
    results.update({f"scoring_{k}": v for k, v in scoring_bench.run(quick).items()
                    if not isinstance(v, list)})
    print("\nprompt styles (llama.cpp, SmolLM2):", flush=True)
    results.update({f"styles_{k}": v for k, v in prompt_styles_bench.run(quick).items()})
    return results


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
