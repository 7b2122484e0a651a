"""Many environments per learner: DQN on BabyAI-GoToObj with 1 and 16 copies.

Six arms, each in a fresh child process (its own cold, memory-only embedding cache and a
fresh adapter; the encoder is loaded and warmed on an unrelated text before the clock
starts), run one after the other in this one run, same seed: DQN with
``configs/babyai_goto.yaml``'s hyperparameters trains for ``steps`` environment steps
(over all copies) on

- language states (the rule-language adapter, MiniLM) with ``n_envs`` 1
  (``LanguageObservation``, each new view encoded alone) and 16 (``LanguageVectorEnv``:
  the new views of the 16 copies encoded in one call);
- raw views with ``n_envs`` 1 and 16;

and beside them a random policy on language states with ``n_envs`` 1 and 16
(``random_language_*``): the DQN arms' copies see different views as their policies differ
(a greedy policy that turns in place sees few), the random ones see alike views, so their
ratio is what the batch alone buys per step.

Figures: env steps per wall-clock second and per CPU second (the child's, all its threads:
less sensitive to a shared machine's load) of each arm; their ratios
``language_16_over_1``, ``raw_16_over_1``, ``language_16_over_raw_1`` (the issue's target:
at least raw views' pace) and ``language_1_over_raw_1`` (``..._cpu`` for CPU seconds); the
child's peak resident memory of each arm and ``language_memory_16_over_1``; the texts
encoded per arm and ``language_texts_16_over_1``; ``random_language_16_over_1``. No
evaluation runs (training throughput only). Needs the ``minigrid`` extra. The encoder is
the default backend (``LANGADAPT_ENCODER_BACKEND=openvino`` measures OpenVINO's).

``python -m langadapt.benchmarks.vector_bench [--quick] [--steps N]``, or
``langadapt bench --only vector [--steps N]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

__all__ = ["run"]

LEVEL = "langadapt/BabyAI-GoToObj-v0"
COPIES = 16
#: configs/babyai_goto.yaml's DQN.
DQN = {"hidden_sizes": [256, 256], "learning_rate": 0.0005, "buffer_size": 100_000,
       "learning_starts": 1000, "batch_size": 64, "gamma": 0.99, "train_freq": 4,
       "gradient_steps": 1, "target_update_interval": 1000, "exploration_fraction": 0.4,
       "exploration_final_eps": 0.05}


def arm(kind: str, n_envs: int, steps: int, seed: int, agent: str = "dqn") -> dict[str, float]:
    """One arm, in a child process: steps/s of training, the process's peak memory."""
    import gymnasium as gym
    import torch

    from .. import adapters, agents, environments  # noqa: F401  (registers the ids)
    from ..adapters.vector import LanguageVectorEnv

    torch.set_num_threads(1)  # as an experiment's default torch_threads
    adapter = adapters.make(kind, gym.make(LEVEL))  # memory-only cache: cold
    if kind == "language":
        adapter.encode_many(["a warm-up text no view describes"])  # the model loaded
    if n_envs == 1:
        env: Any = adapters.LanguageObservation(gym.make(LEVEL), adapter)
        space, actions = env.observation_space, env.action_space
    else:
        env = LanguageVectorEnv([gym.make(LEVEL) for _ in range(n_envs)], adapter)
        space, actions = env.single_observation_space, env.single_action_space
    policy = agents.make_agent(agent, space, actions, seed=seed,
                               **(DQN if agent == "dqn" else {}))
    start, cpu = time.perf_counter(), time.process_time()
    agents.train(policy, env, steps=steps, seed=seed, progress=False)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    return {"steps_per_s": steps / seconds, "seconds": seconds,
            "steps_per_cpu_s": steps / cpu_seconds,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "texts_encoded": adapter.stats()["encoder_calls"]}


def run(quick: bool = False, steps: int | None = None, seed: int = 0) -> dict[str, Any]:
    """The six arms side by side; prints a table and the ratios."""
    if importlib.util.find_spec("minigrid") is None:
        message = "skipped: needs the minigrid extra (pip install 'langadapt[minigrid]')"
        print(message)
        return {"vector": message}
    steps = steps or (2_000 if quick else 10_000)
    figures: dict[str, Any] = {"steps": steps, "load_average_1min": os.getloadavg()[0]}
    print(f"DQN on {LEVEL}, {steps} env steps per arm, seed {seed}, cold memory-only "
          f"embedding cache, one child process per arm (load average {os.getloadavg()[0]:.1f})")
    context = multiprocessing.get_context("spawn")
    for agent, kind in (("dqn", "language"), ("dqn", "raw"), ("random", "language")):
        for n_envs in (1, COPIES):
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                result = pool.submit(arm, kind, n_envs, steps, seed, agent).result()
            name = f"{kind}_{n_envs}" if agent == "dqn" else f"{agent}_{kind}_{n_envs}"
            for key, value in result.items():
                figures[f"{name}_{key}"] = value
            print(f"  {agent:6} {kind:8} n_envs {n_envs:2}: {result['steps_per_s']:6.0f} steps/s "
                  f"({result['seconds']:.0f} s), {result['steps_per_cpu_s']:7.0f} steps per "
                  f"CPU second, peak {result['peak_mb']:.0f} MB, "
                  f"{result['texts_encoded']:.0f} texts encoded", flush=True)
    pairs = {f"language_{COPIES}_over_1": (f"language_{COPIES}", "language_1"),
             f"raw_{COPIES}_over_1": (f"raw_{COPIES}", "raw_1"),
             f"language_{COPIES}_over_raw_1": (f"language_{COPIES}", "raw_1"),
             "language_1_over_raw_1": ("language_1", "raw_1"),
             f"random_language_{COPIES}_over_1": (f"random_language_{COPIES}",
                                                  "random_language_1")}
    for name, (top, bottom) in pairs.items():
        figures[name] = figures[f"{top}_steps_per_s"] / figures[f"{bottom}_steps_per_s"]
        figures[f"{name}_cpu"] = (figures[f"{top}_steps_per_cpu_s"]
                                  / figures[f"{bottom}_steps_per_cpu_s"])
    figures[f"language_memory_{COPIES}_over_1"] = (figures[f"language_{COPIES}_peak_mb"]
                                                   / figures["language_1_peak_mb"])
    figures[f"language_texts_{COPIES}_over_1"] = (figures[f"language_{COPIES}_texts_encoded"]
                                                  / figures["language_1_texts_encoded"])
    figures["load_average_1min_after"] = os.getloadavg()[0]
    for name in pairs:
        print(f"  {name}: {figures[name]:.2f} (CPU seconds: {figures[name + '_cpu']:.2f})")
    for name in (f"language_memory_{COPIES}_over_1", f"language_texts_{COPIES}_over_1"):
        print(f"  {name}: {figures[name]:.2f}")
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None)
    options = parser.parse_args()
    run(quick=options.quick, steps=options.steps)
