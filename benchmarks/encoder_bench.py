"""Benchmark of the encoder backends: OpenVINO ÷ torch on the same BabyAI descriptions.

Figures, measured side by side in one run, both on one thread (``torch.set_num_threads(1)``,
which the OpenVINO backend also compiles with), batch 32:

- ``openvino_over_torch``: throughput of the encoder on ``backend: openvino`` / throughput
  of a plain ``SentenceTransformer.encode`` (the torch backend), on the same 1,000 distinct
  descriptions of random walks on ``langadapt/BabyAI-MixedTrainLocal-v0``; the two are timed
  in alternation (A B A B ...) and the ratio is of the summed times (target >= 1.5).
- ``openvino_over_torch_median_pair``: the median of the per-pair ratios.
- ``cosine_min``: the smallest cosine between the two backends' vectors of a text (target
  >= 0.999), also as ``one_minus_cosine_min``; ``max_abs_difference`` the largest
  difference of one component.
- ``openvino_precision``: what OpenVINO computed in (``bf16`` on CPUs with AMX or AVX-512
  BF16, else ``f32``).
- ``torch_texts_per_s`` / ``openvino_texts_per_s``: the best single repeat of each.

Without the ``openvino`` extra (or MiniGrid, which BabyAI needs) it reports why and
measures nothing. Run: ``python -m langadapt.benchmarks.encoder_bench [--quick]``.
"""

from __future__ import annotations

import importlib.util
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from ..adapters import make as make_adapter
from ..adapters.encoder import INSTALL_HINT, MiniLMEncoder, openvino_installed
from ..adapters.representation import random_walk_inputs

__all__ = ["babyai_descriptions", "run"]

LEVEL = "langadapt/BabyAI-MixedTrainLocal-v0"


def babyai_descriptions(n: int) -> list[str]:
    """``n`` distinct descriptions of states of random walks on the BabyAI suite level
    (seeds 0, 1, ... of 500 steps each)."""
    env = gym.make(LEVEL)
    adapter = make_adapter("language", env)
    moves = list(range(int(env.action_space.n)))
    texts: dict[str, None] = {}
    seed = 0
    while len(texts) < n:
        for state, legal, history in random_walk_inputs(env, 500, seed, moves, lambda x: x):
            texts[adapter(state, legal, history, encode=False)] = None
        seed += 1
    return list(texts)[:n]


def run(quick: bool = False) -> dict[str, float | str]:
    """Measure the encoder figures; print a table; return them by name."""
    if not openvino_installed():
        message = f"skipped: OpenVINO is not installed ({INSTALL_HINT})"
        print(message)
        return {"encoder": message}
    if importlib.util.find_spec("minigrid") is None:
        message = "skipped: MiniGrid is not installed (pip install 'langadapt[minigrid]')"
        print(message)
        return {"encoder": message}
    n_texts, repeats = (200, 2) if quick else (1000, 4)
    torch.set_num_threads(1)
    texts = babyai_descriptions(n_texts)
    openvino = MiniLMEncoder(backend="openvino", batch_size=32)
    model = openvino.model  # the same loaded SentenceTransformer runs the torch side
    if openvino.backend_used != "openvino":
        message = "skipped: the OpenVINO export failed (see the warning above)"
        print(message)
        return {"encoder": message}

    def torch_encode() -> np.ndarray:
        return model.encode(texts, batch_size=32, convert_to_numpy=True,
                            show_progress_bar=False, normalize_embeddings=False)

    reference, fast = torch_encode(), openvino.encode_many(texts)  # also warms both up
    cosines = np.sum(reference * fast, axis=1) / (
        np.linalg.norm(reference, axis=1) * np.linalg.norm(fast, axis=1))
    torch_times, openvino_times = [], []
    print(f"{n_texts} BabyAI descriptions, batch 32, one thread, {repeats} alternating pairs")
    for _ in range(repeats):
        start = time.perf_counter()
        torch_encode()
        torch_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        openvino.encode_many(texts)
        openvino_times.append(time.perf_counter() - start)
        print(f"  torch {torch_times[-1]:.2f} s, openvino {openvino_times[-1]:.2f} s", flush=True)
    figures: dict[str, float | str] = {
        "texts": float(n_texts),
        "openvino_over_torch": sum(torch_times) / sum(openvino_times),
        "openvino_over_torch_median_pair": statistics.median(
            t / o for t, o in zip(torch_times, openvino_times, strict=True)),
        "cosine_min": float(cosines.min()),
        "one_minus_cosine_min": float(1.0 - cosines.min()),  # prints readably at 4 digits
        "max_abs_difference": float(np.abs(reference - fast).max()),
        "openvino_precision": openvino.precision,
        "torch_texts_per_s": n_texts / min(torch_times),
        "openvino_texts_per_s": n_texts / min(openvino_times),
    }
    for key, value in figures.items():
        print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    return figures


if __name__ == "__main__":
    import sys

    run(quick="--quick" in sys.argv)
