"""Learning curves over environment steps when the budget is steps: each evaluation's x is
the sum of the lengths of the training episodes before it, per seed; seeds evaluated at
different steps share one band; the training returns have a row of their own."""

from __future__ import annotations

import pytest

from langadapt.experiments.plots import (
    _evaluation_points,
    _in_steps,
    _mean_band,
    _training_points,
    plot_learning_curves,
)
from langadapt.experiments.results import Episode


def _row(seed: int, phase: str, episode: int, length: int, return_: float = 0.0) -> Episode:
    return Episode("raw", "dqn", seed, phase, episode, return_, length, False, 0.1, 0, 0)


EPISODES = [
    _row(0, "train", 1, 10), _row(0, "train", 2, 30), _row(0, "eval", 2, 5, 1.0),
    _row(0, "train", 3, 7), _row(0, "eval", 3, 5, 2.0),
    _row(1, "train", 1, 100), _row(1, "train", 2, 1), _row(1, "eval", 2, 5, 3.0),
]


def test_evaluations_are_placed_at_the_steps_done_per_seed():
    series = _evaluation_points(EPISODES)
    assert _in_steps(series, EPISODES) == {0: [(40, 1.0), (47, 2.0)], 1: [(101, 3.0)]}
    window, training = _training_points(EPISODES)
    assert window == 1 and _in_steps(training, EPISODES)[1] == [(100, 0.0), (101, 0.0)]


def test_seeds_at_different_steps_share_the_band_where_both_run():
    xs, means, lows, highs = _mean_band({0: [(0, 0.0), (100, 10.0)], 1: [(50, 0.0), (150, 4.0)]})
    assert xs.tolist() == [0, 50, 100, 150]
    assert means.tolist() == [0.0, 2.5, 6.0, 4.0]  # at 100: seed 0's 10 and seed 1's 2
    assert lows[2] == 2.0 and highs[2] == 10.0 and lows[0] == highs[0] == 0.0


def test_the_curves_plot_over_steps_or_episodes_and_nothing_else(tmp_path):
    import matplotlib.pyplot as plt

    for axis in ("steps", "episodes"):
        plot_learning_curves(EPISODES, tmp_path / f"{axis}.png", "t", x_axis=axis)
        height, width, _ = plt.imread(tmp_path / f"{axis}.png").shape
        assert height > width  # two rows for one agent: evaluations above training returns
    with pytest.raises(ValueError, match="x_axis='time': expected 'episodes' or 'steps'"):
        plot_learning_curves(EPISODES, tmp_path / "x.png", x_axis="time")


CONFIG = """\
name: NAME
environment: {id: langadapt/Maze-v0}
adapters: [{type: raw}]
agents: [{type: dqn}]
training: {steps: 100}
seeds: [0, 1]
"""


def _folder(root, name: str):
    """A results folder of EPISODES: episodes.csv and the runs/ it is checked against."""
    import csv
    import json

    from langadapt.experiments.results import EPISODE_COLUMNS

    folder = root / name
    folder.mkdir()
    (folder / "config.yaml").write_text(CONFIG.replace("NAME", name), encoding="utf-8")
    rows = [[e.adapter, e.agent, e.seed, e.phase, e.episode, e.return_, e.length,
             int(e.success), e.wall_time, 0, 0, 0] for e in EPISODES]
    rows += [["raw", "dqn", seed, "final", 0, 1.5, 5, 1, 0.1, 0, 0, 0] for seed in (0, 1)]
    for path, seed in [(folder / "episodes.csv", None)] + [
            (folder / "runs" / f"raw__dqn__seed{s}" / "episodes.csv", s) for s in (0, 1)]:
        path.parent.mkdir(parents=True, exist_ok=True)
        mine = [row for row in rows if seed is None or row[2] == seed]
        with open(path, "w", newline="") as handle:
            csv.writer(handle).writerows([EPISODE_COLUMNS, *mine])
        if seed is not None:
            (path.parent / "done.json").write_text(json.dumps({"rows": len(mine)}))
    return folder


def test_report_of_two_folders_compares_them(tmp_path, capsys):
    from langadapt.experiments import cli

    first, second = _folder(tmp_path, "first"), _folder(tmp_path, "second")
    assert cli.main(["report", str(first), str(second), "--out", str(tmp_path / "cmp")]) == 0
    summary = (tmp_path / "cmp" / "summary.md").read_text(encoding="utf-8")
    assert "| first/raw | dqn |" in summary and "| second/raw | dqn |" in summary
    assert (tmp_path / "cmp" / "learning_curves.png").is_file()
    assert not (first / "summary.md").exists()  # the folders are only read
    assert cli.main(["report", str(first), str(first / ".." / "first")]) == 2
    assert "folders named first twice" in capsys.readouterr().err
