"""MiniGrid reference: Stable-Baselines3 PPO on the language wrapper of DoorKey-5x5.

The row beside `configs/minigrid_doorkey.yaml`'s DQN rows: SB3's PPO (default settings, one
torch thread) trained on `LanguageObservation` over ``langadapt/MiniGrid-DoorKey-5x5-v0``
with the language adapter — a plain gymnasium environment, so SB3 trains on it unchanged —
for the same 40,000 steps, seeds 0-4; then 20 greedy episodes on held-out seeds. Reports
per seed the final greedy success and training steps/s. Needs the ``minigrid`` extra and
Stable-Baselines3 (``dev``); not part of ``make test``.

``python -m langadapt.benchmarks.minigrid_bench [--quick]``.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from typing import Any

import gymnasium as gym
import torch

from .. import make_adapter
from ..adapters import LanguageObservation

__all__ = ["run"]

LEVEL = "langadapt/MiniGrid-DoorKey-5x5-v0"


def _greedy_success(model: Any, env: gym.Env, episodes: int, seed: int) -> float:
    wins = 0
    for k in range(episodes):
        obs, info = env.reset(seed=seed + k)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(int(action))
            done = terminated or truncated
        wins += bool(info.get("is_success", False))
    return wins / episodes


def run(quick: bool = False) -> dict[str, Any]:
    """PPO on the language wrapper: final greedy success and steps/s per seed."""
    if importlib.util.find_spec("stable_baselines3") is None:
        message = "skipped: Stable-Baselines3 is not installed (pip install stable-baselines3)"
        print(message)
        return {"ppo_language_doorkey": message}
    from stable_baselines3 import PPO  # the optional reference library, only here

    steps = 4_000 if quick else 40_000
    seeds = [0] if quick else [0, 1, 2, 3, 4]
    torch.set_num_threads(1)
    adapter = make_adapter("language", gym.make(LEVEL))  # shared: each view encoded once
    figures: dict[str, Any] = {"steps": steps}
    successes, rates = [], []
    print(f"SB3 PPO on the language wrapper of DoorKey-5x5, {steps} steps, default settings")
    for seed in seeds:
        env = LanguageObservation(gym.make(LEVEL), adapter)
        model = PPO("MlpPolicy", env, seed=seed, verbose=0, device="cpu")
        start = time.perf_counter()
        model.learn(total_timesteps=steps)
        rate = steps / (time.perf_counter() - start)
        success = _greedy_success(model, LanguageObservation(gym.make(LEVEL), adapter), 20,
                                  seed=100_000 + seed)
        figures[f"seed{seed}_final_success"] = success
        figures[f"seed{seed}_steps_per_s"] = rate
        successes.append(success)
        rates.append(rate)
        print(f"  seed {seed}: final greedy success {success:.2f}, {rate:.0f} steps/s", flush=True)
    figures["mean_final_success"] = statistics.fmean(successes)
    figures["seeds_at_least_0.9"] = sum(s >= 0.9 for s in successes)
    figures["mean_steps_per_s"] = statistics.fmean(rates)
    return figures


if __name__ == "__main__":
    import sys

    run(quick="--quick" in sys.argv)
