"""The language_cost benchmark counts MiniLM's texts per 100k BabyAI steps (issue 41)."""

from __future__ import annotations

import pytest

pytest.importorskip("minigrid")

from langadapt.benchmarks.language_cost_bench import calls_per_100k  # noqa: E402


def test_sentence_mean_encodes_fewer_texts_than_the_paragraph_on_the_same_moves():
    paragraph = calls_per_100k("paragraph", 3_000, warm_steps=1_000)
    sentences = calls_per_100k("sentence_mean", 3_000, warm_steps=1_000)
    assert paragraph > 0
    assert sentences < paragraph / 3


def test_each_learner_times_its_steps_on_each_representation():
    from langadapt.benchmarks.language_cost_bench import (
        LEARNERS,
        CountingEncoder,
        seconds_per_step,
    )

    assert set(LEARNERS) == {"dqn", "ppo"}
    for learner in LEARNERS:
        for settings in ({}, {"embedding": "sentences"}):
            adapter = "language" if settings else "raw"
            if settings:
                settings = {**settings, "encoder": CountingEncoder()}
            seconds = seconds_per_step(learner, adapter, 64, settings)
            assert 0 < seconds < 5
