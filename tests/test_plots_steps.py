"""Learning curves over environment steps when the budget is steps: each evaluation's x is
the sum of the lengths of the training episodes before it, per seed."""

from __future__ import annotations

import pytest

from langadapt.experiments.plots import _curve_points, _in_steps, plot_learning_curves
from langadapt.experiments.results import Episode


def _row(seed: int, phase: str, episode: int, length: int, return_: float = 0.0) -> Episode:
    return Episode("raw", "dqn", seed, phase, episode, return_, length, False, 0.1, 0, 0)


EPISODES = [
    _row(0, "train", 1, 10), _row(0, "train", 2, 30), _row(0, "eval", 2, 5, 1.0),
    _row(0, "train", 3, 7), _row(0, "eval", 3, 5, 2.0),
    _row(1, "train", 1, 100), _row(1, "train", 2, 1), _row(1, "eval", 2, 5, 3.0),
]


def test_evaluations_are_placed_at_the_steps_done_per_seed():
    _, series = _curve_points(EPISODES)
    assert _in_steps(series, EPISODES) == {0: [(40, 1.0), (47, 2.0)], 1: [(101, 3.0)]}


def test_the_curves_plot_over_steps_or_episodes_and_nothing_else(tmp_path):
    for axis in ("steps", "episodes"):
        plot_learning_curves(EPISODES, tmp_path / f"{axis}.png", "t", x_axis=axis)
        assert (tmp_path / f"{axis}.png").stat().st_size > 0
    with pytest.raises(ValueError, match="x_axis='time': expected 'episodes' or 'steps'"):
        plot_learning_curves(EPISODES, tmp_path / "x.png", x_axis="time")
