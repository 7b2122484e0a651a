"""Tables and plots of kept and evaluated policies (experiments.report, experiments.plots):
an ``evaluate`` folder's summary has no training columns (threshold, time, cost), in a
comparison its rows' training cells are "–"; with ``keep_best`` the final-return bars and
the curves show the kept policy beside the final one; the training curves' moving-mean label
is the same in one folder's plot and in a comparison, and an evaluate folder's star is
labelled."""

from __future__ import annotations

import csv

import pytest
from experiment_fixtures import raw_config, run_cli

from langadapt.experiments import plots
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.results import Episode
from langadapt.experiments.runner import run_experiment
from langadapt.experiments.stats import summarise


@pytest.fixture
def trained_and_evaluated(tmp_path, capsys):
    data = raw_config(tmp_path, agents=[{"type": "qlearning"}], seeds=2,
                      training={"episodes": 40},
                      evaluation={"every": 10, "episodes": 1, "final_episodes": 2,
                                  "keep_best": True})
    folder = run_experiment(experiment_from_dict(data), progress=False, log=lambda _: None)
    again = tmp_path / "again"
    code, _, err = run_cli(capsys, "evaluate", str(folder), "--out", str(again))
    assert code == 0, err
    return folder, again


def test_an_evaluate_folder_summary_has_no_training_columns(trained_and_evaluated, capsys):
    folder, again = trained_and_evaluated
    trained = (folder / "summary.md").read_text()
    assert "train wall time" in trained and "chosen after" in trained
    text = (again / "summary.md").read_text()
    for column in ("train wall time", "chosen after", "episodes to threshold", "CPU s",
                   "never (0/"):
        assert column not in text, column
    assert "retained policy return" in text
    assert "Kept policies played again (`langadapt evaluate`): nothing was trained" in text
    with open(again / "summary.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["train_wall_time_s"] == row["cpu_seconds"] == row["best_chosen_at"] == ""
    assert row["final_return_mean"] != ""
    code, out, err = run_cli(capsys, "report", str(folder), str(again),
                             "--out", str(folder.parent / "both"))
    assert code == 0, err
    compared = (folder.parent / "both" / "summary.md").read_text()
    line = next(li for li in compared.splitlines() if li.startswith("| again/raw"))
    assert line.rstrip().endswith("| – | – | – | – | – | – | – |")
    assert "train wall time" in compared and "the rows marked –" in compared


def _kept_episodes() -> list[Episode]:
    rows = []
    for seed in range(2):
        for episode in range(1, 41):
            rows.append(Episode("raw", "dqn", seed, "train", episode, 0.5, 10, False, 0.1, 0, 0))
        rows.append(Episode("raw", "dqn", seed, "eval", 20, 1.0, 10, True, 0.1, 0, 0))
        rows += [Episode("raw", "dqn", seed, "best", 20, 1.0, 10, True, 0.1, 0, 0)] * 2
        rows += [Episode("raw", "dqn", seed, "final", 40, 0.0, 10, False, 0.1, 0, 0)] * 2
    return rows


def test_with_keep_best_the_plots_show_the_kept_policy_beside_the_final(tmp_path, figures):
    episodes = _kept_episodes()
    plots.plot_final_returns(summarise(episodes, None), tmp_path / "final.png", "kept")
    plots.plot_learning_curves(episodes, tmp_path / "curves.png", "kept")
    final, curves = figures
    labels = final.axes[0].get_legend_handles_labels()[1]
    assert labels == ["raw (final)", "raw (kept)"]
    heights = [patch.get_height() for patch in final.axes[0].patches]
    assert heights == [0.0, 1.0]  # final 0, kept 1: both visible
    assert "hatched: the kept (best) policy" in " ".join(final._suptitle.get_text().split())
    eval_panel = curves.axes[0]
    assert any(line.get_marker() == "D" and list(line.get_ydata()) == [1.0]
               for line in eval_panel.get_lines())
    assert "diamond: the kept (best) policy" in " ".join(curves._suptitle.get_text().split())


def test_the_moving_mean_label_is_the_same_alone_and_compared(tmp_path, figures):
    trained = _kept_episodes()
    evaluated = [Episode("again/raw", "dqn", e.seed, e.phase, 0, e.return_, e.length,
                         e.success, 0.1, 0, 0) for e in trained if e.phase in ("best", "final")]
    plots.plot_learning_curves(trained, tmp_path / "one.png", "one")
    plots.plot_learning_curves(trained + evaluated, tmp_path / "two.png", "two")
    one, two = figures
    assert one.axes[1].get_ylabel() == two.axes[1].get_ylabel() == (
        "training return (moving mean of 2 episodes)")
    assert "again/raw (2 seeds, final evaluation only)" in \
        two.axes[0].get_legend_handles_labels()[1]
