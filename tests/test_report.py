"""Summary statistics of a results folder: bootstrap intervals, episodes to threshold,
final ("last") and retained ("best") policies."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from langadapt.experiments.report import summary_markdown
from langadapt.experiments.results import Episode
from langadapt.experiments.stats import mean_and_interval, median_to_threshold, summarise


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=12))
def test_bootstrap_interval_stays_within_the_data(values):
    mean, low, high = mean_and_interval(values)
    assert mean == float(np.mean(values)) or len(set(values)) == 1
    if len(values) == 1:
        assert math.isnan(low) and math.isnan(high)
    else:
        assert min(values) <= low <= high <= max(values)


def test_interval_of_the_quickstart_case_no_longer_leaves_the_range():
    # returns in [-0.1, 1] over 3 seeds: the Student-t band reached -1.3 and 2.2
    mean, low, high = mean_and_interval([-0.1, 1.0, 0.95])
    assert -0.1 <= low < mean < high <= 1.0
    assert mean_and_interval([0.5, 0.5]) == (0.5, 0.5, 0.5)


def test_episodes_to_threshold_counts_failures_as_never():
    assert median_to_threshold([10, 30, None]) == 30  # 2/3 reached: median 30
    assert math.isnan(median_to_threshold([10, None, None]))  # most never did
    assert median_to_threshold([10, 20, 40, None]) == 30
    assert math.isnan(median_to_threshold([10, None]))
    assert math.isnan(median_to_threshold([]))


def _episode(seed, phase, episode, ret, success=False):
    return Episode("raw", "dqn", seed, phase, episode, ret, 10, success, 0.1, 0, 0)


def test_summary_reports_last_and_best_policies_and_few_seeds():
    rows = []
    for seed, (reached_at, last, best, chosen) in enumerate(
        [(20, 100.0, 500.0, 40), (None, 20.0, 300.0, 60), (40, 500.0, 500.0, 80)]
    ):
        for after in (20, 40, 60):
            score = 500.0 if reached_at is not None and after >= reached_at else 10.0
            rows.append(_episode(seed, "eval", after, score))
        rows += [_episode(seed, "best", chosen, best, best == 500.0)] * 2
        rows += [_episode(seed, "final", 60, last, last == 500.0)] * 2
    (row,) = summarise(rows, threshold=475.0)
    assert row.seeds == 3
    assert row.final_return_mean == np.mean([100.0, 20.0, 500.0])
    assert 20.0 <= row.final_return_low <= row.final_return_high <= 500.0
    assert row.best_return_mean == np.mean([500.0, 300.0, 500.0])
    assert row.best_success_rate == 4 / 6 and row.final_success_rate == 2 / 6
    assert row.best_chosen_at == 60
    assert row.seeds_reaching_threshold == 2 and row.episodes_to_threshold == 40
    assert row.steps_to_threshold == 0  # this toy has no training episodes
    markdown = summary_markdown([row], "t", 475.0)
    assert "40 (2/3) | 0 |" in markdown and "retained policy return" in markdown
    assert "Fewer than 5 seeds (3)" in markdown


def test_steps_to_threshold_sums_the_training_episodes_before_it():
    rows = []
    for seed, (lengths, reached_at) in enumerate([([5, 7, 9, 11], 2), ([3, 3, 3, 3], 4),
                                                  ([8, 8, 8, 8], None)]):
        rows += [Episode("raw", "dqn", seed, "train", k + 1, 0.0, n, False, 0.1, 0, 0)
                 for k, n in enumerate(lengths)]
        for after in (2, 4):
            score = 1.0 if reached_at is not None and after >= reached_at else 0.0
            rows.append(_episode(seed, "eval", after, score, bool(score)))
    (row,) = summarise(rows, threshold=None)
    # seed 0: 5 + 7 = 12 steps by episode 2; seed 1: 12 steps by episode 4; seed 2 never
    assert row.episodes_to_threshold == 4 and row.steps_to_threshold == 12
    assert "| 4 (2/3) | 12 |" in summary_markdown([row], "t", None)


def test_keep_best_experiment_writes_best_and_final_rows(tmp_path):
    import csv

    import pytest

    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.runner import run_experiment
    from langadapt.experiments.schema import ConfigError

    data = {
        "name": "keep",
        "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "qlearning", "params": {"alpha": 0.5}}],
        "training": {"episodes": 12},
        "seeds": 2,
        "evaluation": {"every": 4, "episodes": 2, "final_episodes": 3, "keep_best": True},
        "output": str(tmp_path / "out"),
        "cache_dir": str(tmp_path / "cache"),
    }
    run_experiment(experiment_from_dict(data), progress=False, log=lambda _: None)
    with open(tmp_path / "out" / "episodes.csv", newline="") as handle:
        episodes = list(csv.DictReader(handle))
    for seed in ("0", "1"):
        mine = [r for r in episodes if r["seed"] == seed]
        assert [r["phase"] for r in mine].count("best") == 3
        assert [r["phase"] for r in mine].count("final") == 3
        evaluated_after = {int(r["episode"]) for r in mine if r["phase"] == "eval"}
        assert {int(r["episode"]) for r in mine if r["phase"] == "best"} <= evaluated_after
    from langadapt.experiments.results import read_episodes

    (row,) = summarise(read_episodes(tmp_path / "out" / "episodes.csv"), None)
    assert not math.isnan(row.best_return_mean) and 4 <= row.best_chosen_at <= 12
    data["evaluation"] = {"every": None, "keep_best": True}
    with pytest.raises(ConfigError, match="keep_best needs an evaluation schedule: set evaluation"):
        experiment_from_dict(data)
