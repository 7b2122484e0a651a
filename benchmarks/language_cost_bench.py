"""Benchmark of what language costs on BabyAI: MiniLM calls and training time per step.

On ``langadapt/BabyAI-MixedTrainLocal-v0`` (goal ``goto``, ``num_dists`` 0), side by side in
one run:

- ``calls_per_100k_<representation>``: texts MiniLM encodes per 100,000 steps after the
  first 10,000, for ``embedding: paragraph`` and ``embedding: sentence_mean``, along the same
  uniformly random legal moves from a cold cache (an encoder that counts texts and returns
  zeros stands in for MiniLM, so every distinct text is counted once; 60,000 steps, 22,000
  with ``--quick``, scaled to 100,000).
- ``time_ratio_<learner>_<representation>``: seconds per training step of the learner
  (langadapt's DQN, SB3's PPO; the same settings and seed) on the language observation ÷ on
  the raw one, cold cache (memory only, MiniLM loaded before timing) — 10,000 steps each
  (3,000 with ``--quick``), one torch thread.
- ``encoder_<backend>_texts_per_s`` and ``encoder_<backend>_batch_difference``: each backend
  as the library builds it (OpenVINO's precision after its reproducibility check) on the same
  distinct BabyAI descriptions in batches of 32, and the largest difference between a text's
  vector alone and inside its batch.

Run: ``langadapt bench --only language_cost [--quick]``.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ..adapters import LanguageObservation, MiniLMEncoder
from ..adapters import make as make_adapter
from ..adapters.encoder import get_encoder, openvino_installed
from ..agents import DQNAgent, make_agent, train
from .encoder_bench import babyai_descriptions

__all__ = ["run"]

LEVEL = "langadapt/BabyAI-MixedTrainLocal-v0"
PARAMS = {"goal": "goto", "num_dists": 0}
REPRESENTATIONS = ("paragraph", "sentences", "sentence_mean")
LEARNERS = {
    "dqn": lambda obs_space, act_space: DQNAgent(obs_space, act_space, {}, seed=0),
    "ppo": lambda obs_space, act_space: make_agent("sb3", obs_space, act_space, seed=0,
                                                   algorithm="PPO"),
}
WARM_STEPS = 10_000


class CountingEncoder:
    """Stands in for MiniLM where only the number of texts encoded matters."""

    name, dimension, normalized = "counting-encoder", 384, True

    def encode_many(self, texts: Sequence[str]) -> np.ndarray:
        return np.zeros((len(texts), self.dimension), dtype=np.float32)


def calls_per_100k(embedding: str, steps: int, warm_steps: int = WARM_STEPS) -> float:
    """Texts encoded per 100,000 random legal moves after the first ``warm_steps``."""
    env = gym.make(LEVEL, **PARAMS)
    adapter = make_adapter("language", env, encoder=CountingEncoder(), embedding=embedding)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    warm = 0
    for step in range(steps):
        if step == warm_steps:
            warm = adapter.stats()["encoder_calls"]
        adapter.adapt(obs, info["legal_moves"])
        obs, _, terminated, truncated, info = env.step(int(rng.choice(info["legal_moves"])))
        if terminated or truncated:
            obs, info = env.reset()
    return (adapter.stats()["encoder_calls"] - warm) * 100_000 / (steps - warm_steps)


def seconds_per_step(learner: str, adapter: str, steps: int, settings: dict[str, Any]) -> float:
    """Seconds per step of ``learner`` (a key of LEARNERS) trained ``steps`` steps on
    ``adapter``'s view."""
    env = gym.make(LEVEL, **PARAMS)
    built = make_adapter(adapter, env, **settings)
    wrapped = LanguageObservation(env, built)
    agent = LEARNERS[learner](wrapped.observation_space, wrapped.action_space)
    start = time.perf_counter()
    train(agent, wrapped, steps=steps, seed=0, progress=False)
    return (time.perf_counter() - start) / steps


def backend_figures(texts: list[str]) -> dict[str, float | str]:
    """Texts per second and the batch difference of each installed backend."""
    figures: dict[str, float | str] = {}
    for backend in ("torch", "openvino") if openvino_installed() else ("torch",):
        encoder = MiniLMEncoder(backend=backend, batch_size=32)
        encoder.encode_many(texts[:32])  # loads (and checks) the model
        start = time.perf_counter()
        together = encoder.encode_many(texts)
        figures[f"encoder_{backend}_texts_per_s"] = len(texts) / (time.perf_counter() - start)
        alone = np.concatenate([encoder.encode_many([text]) for text in texts[:32]])
        figures[f"encoder_{backend}_batch_difference"] = float(np.abs(together[:32] - alone).max())
        figures[f"encoder_{backend}_runs"] = f"{encoder.backend_used}-{encoder.precision}"
    return figures


def _show(figures: dict[str, float | str]) -> None:
    for key, value in figures.items():
        print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}",
              flush=True)


def run(quick: bool = False) -> dict[str, float | str]:
    """Measure the figures of the module docstring; print them; return them by name."""
    if importlib.util.find_spec("minigrid") is None:
        message = "skipped: MiniGrid is not installed (pip install 'langadapt[minigrid]')"
        print(message)
        return {"language_cost": message}
    walk, steps, n_texts = (22_000, 3_000, 200) if quick else (60_000, 10_000, 500)
    torch.set_num_threads(1)
    figures: dict[str, float | str] = {}
    print(f"{LEVEL} {PARAMS}: MiniLM calls per 100k random moves after the first "
          f"{WARM_STEPS:,} ({walk:,} moves)", flush=True)
    for embedding in REPRESENTATIONS:
        figures[f"calls_per_100k_{embedding}"] = calls_per_100k(embedding, walk)
        _show({f"calls_per_100k_{embedding}": figures[f"calls_per_100k_{embedding}"]})
    get_encoder().encode_many(["A sentence."])  # the model loaded before any timing
    for learner in LEARNERS:
        print(f"{learner}, {steps:,} steps each, cold cache, one thread: seconds per step on "
              "language / on raw", flush=True)
        raw = seconds_per_step(learner, "raw", steps, {})
        figures[f"raw_seconds_per_step_{learner}"] = raw
        for embedding in REPRESENTATIONS:
            ratio = seconds_per_step(learner, "language", steps, {"embedding": embedding}) / raw
            figures[f"time_ratio_{learner}_{embedding}"] = ratio
            _show({f"time_ratio_{learner}_{embedding}": ratio})
    print(f"encoder backends on {n_texts} BabyAI descriptions, batch 32", flush=True)
    backends = backend_figures(babyai_descriptions(n_texts))
    _show(backends)
    figures.update(backends)
    return figures


if __name__ == "__main__":
    import sys

    run(quick="--quick" in sys.argv)
