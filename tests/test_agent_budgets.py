"""Budgets per agent: an agent's own ``training`` block instead of the file's."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment
from langadapt.experiments.schema import ConfigError

EXPERIMENT = {
    "name": "budgets",
    "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
    "adapters": [{"type": "raw"}],
    "agents": [{"type": "qlearning", "training": {"episodes": 2}},
               {"type": "qlearning", "label": "file_budget"}],
    "training": {"episodes": 5},
    "seeds": 1,
    "evaluation": {"final_episodes": 1},
    "cache_dir": "",
}


def test_each_agent_trains_for_its_own_budget(tmp_path):
    config = experiment_from_dict(EXPERIMENT)
    out = run_experiment(config, out_dir=tmp_path / "results", progress=False,
                         log=lambda text: None)
    with open(out / "episodes.csv", newline="") as rows:
        trained = Counter(r["agent"] for r in csv.DictReader(rows) if r["phase"] == "train")
    assert trained == {"qlearning": 2, "file_budget": 5}


def test_an_agent_budget_is_checked_like_the_files():
    agents = [{"type": "dqn", "training": {"step": 100}}]
    with pytest.raises(ConfigError, match=r"agents.0.training.step: unknown key \(did you "
                                          r"mean 'steps'\?\)"):
        experiment_from_dict({**EXPERIMENT, "agents": agents})
    agents = [{"type": "dqn", "training": {"steps": 100, "episodes": 3}}]
    with pytest.raises(ConfigError, match="agents.0.training: give exactly one of"):
        experiment_from_dict({**EXPERIMENT, "agents": agents})


def test_without_agent_budgets_the_fingerprint_is_as_before():
    plain = {**EXPERIMENT, "agents": [{"type": "random"}]}
    assert "training" not in experiment_from_dict(plain).fingerprint_data()["agents"][0]
    own = experiment_from_dict(EXPERIMENT)
    assert own.fingerprint_data()["agents"][0]["training"] == {"episodes": 2, "steps": None}
