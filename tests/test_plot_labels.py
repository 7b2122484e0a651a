"""What the figures say (issue 51): the performance profile's legend sits beside the axes,
never over the profiles; a one-seed figure never claims an interval over seeds."""

from __future__ import annotations

import numpy as np
import pytest

from langadapt.experiments import plots
from langadapt.experiments.results import Episode
from langadapt.experiments.stats import summarise


def _episodes(seeds: range) -> list[Episode]:
    rows = []
    for seed in seeds:
        for episode in range(1, 5):
            rows.append(Episode("raw", "dqn", seed, "train", episode, 0.5, 10, False, 0.1, 0, 0))
            if episode % 2 == 0:
                rows.append(Episode("raw", "dqn", seed, "eval", episode, 0.6, 10, True, 0.1,
                                    0, 0))
        rows += [Episode("raw", "dqn", seed, "final", 4, 1.0, 10, True, 0.1, 0, 0)] * 2
    return rows


def test_the_profile_legend_sits_beside_the_axes(tmp_path, figures):
    pytest.importorskip("rliable")
    rng = np.random.default_rng(0)
    scores = {f"method {i}": rng.uniform(0, 1, size=(3, 2)) for i in range(4)}
    plots.plot_performance_profile(scores, tmp_path / "profile.png", title="suite")
    (figure,) = figures
    figure.canvas.draw()
    axis = figure.axes[0]
    legend = axis.get_legend().get_window_extent()
    assert legend.x0 >= axis.get_window_extent().x1  # to the right: no profile hidden
    assert legend.x1 <= figure.bbox.x1  # and inside the picture
    assert "stratified bootstrap 95% bands" in axis.get_title()


def test_one_seed_figures_say_one_seed_not_an_interval_over_seeds(tmp_path, figures):
    pytest.importorskip("rliable")
    one = _episodes(range(1))
    plots.plot_learning_curves(one, tmp_path / "curves.png", "one")
    plots.plot_final_returns(summarise(one, None), tmp_path / "final.png", "one")
    plots.plot_performance_profile({"raw / dqn": np.array([[0.5, 1.0]])},
                                   tmp_path / "profile.png", "one")
    curves, final, profile = figures
    assert "one seed: its curve" in curves._suptitle.get_text()
    assert "one seed: its final greedy return, no interval" in final._suptitle.get_text()
    assert "one run per row: no band" in profile.axes[0].get_title()
    for text in (curves._suptitle.get_text(), final._suptitle.get_text(),
                 profile.axes[0].get_title()):
        assert "over seeds" not in text and "bootstrap" not in text
    figures.clear()
    three = _episodes(range(3))
    plots.plot_learning_curves(three, tmp_path / "curves3.png", "three")
    assert "95% bootstrap interval over seeds" in figures[0]._suptitle.get_text()


def test_the_final_returns_title_fits_its_figure(tmp_path, figures):
    rows = summarise(_episodes(range(3)), None)
    plots.plot_final_returns(rows, tmp_path / "final.png",
                             "quickstart — langadapt/FrozenLakeMaps-v0 size=4 "
                             "frozen_probability=0.8 is_slippery=False max_steps=20 "
                             "train_maps=[0, 500] held_out_maps=[100000, 100100]")
    (final,) = figures
    final.canvas.draw()
    title = final.texts[0].get_window_extent()  # the figure's title, centred on the figure
    left, right = title.x0 - final.bbox.x0, final.bbox.x1 - title.x1
    assert left > 0 and right > 0 and abs(left - right) < 2  # not pushed to the right edge
