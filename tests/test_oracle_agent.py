"""The floor and the ceiling of a table: the `oracle` agent (the environment's oracle, BabyAI's
own bot on BabyAI levels) and the `random` agent, neither spending the training budget."""

from __future__ import annotations

import csv
from collections import Counter
from importlib.util import find_spec
from pathlib import Path

import gymnasium as gym
import pytest

from langadapt import agents
from langadapt.environments.minigrid import make_minigrid
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment
from langadapt.experiments.schema import ConfigError
from langadapt.roles import OracleAgent

needs_minigrid = pytest.mark.skipif(find_spec("minigrid") is None,
                                    reason="needs the minigrid extra")


def _play(agent, env, episodes: int) -> list[bool]:
    return [r.success for r in agents.evaluate(agent, env, episodes=episodes, seed=0)]


@needs_minigrid
@pytest.mark.parametrize(("level", "params"), [
    ("BabyAI-GoToLocal-v0", {"num_dists": 1}),  # the one object is the target
    ("langadapt/BabyAI-MixedTrainLocal-v0", {"num_dists": 0, "goal": "mixed"}),
])
def test_the_oracle_agent_acts_as_babyais_bot_and_solves_every_episode(level, params):
    def make():
        return (gym.make(level, **params) if level.startswith("langadapt/")
                else make_minigrid(level, **params))

    env = make()
    agent = agents.make_agent("oracle", env.observation_space, env.action_space)
    assert isinstance(agent, OracleAgent) and not agent.learns
    assert all(_play(agent, env, 10))
    random = agents.make_agent("random", env.observation_space, env.action_space)
    assert sum(_play(random, make(), 10)) < 10  # the same episodes are not solved by chance


@needs_minigrid
def test_the_oracle_agent_follows_the_environment_it_is_bound_to():
    first, second = (make_minigrid("BabyAI-GoToLocal-v0") for _ in range(2))
    agent = agents.make_agent("oracle", first.observation_space, first.action_space)
    with pytest.raises(ValueError, match="bind"):
        agent.act(first.reset(seed=0)[0])
    assert all(_play(agent, first, 2)) and all(_play(agent, second, 2))
    assert agent.env is second.unwrapped


def test_the_oracle_agent_is_refused_on_an_environment_without_an_oracle():
    env = gym.make("CartPole-v1")
    agent = agents.make_agent("oracle", env.observation_space, env.action_space)
    with pytest.raises(ValueError, match="CartPole-v1") as error:
        agent.bind(env)
    assert "\n" not in str(error.value)


def test_an_experiment_file_refuses_an_oracle_without_an_oracle_in_one_line(tmp_path):
    data = _file(tmp_path, environment={"id": "CartPole-v1"}, adapters=[{"type": "raw"}])
    with pytest.raises(ConfigError, match=r"agents\.1 \(type oracle\).*CartPole-v1") as error:
        experiment_from_dict(data)
    assert "\n" not in str(error.value)


def test_random_and_oracle_rows_cost_only_their_evaluation_on_a_maze(tmp_path):
    config = experiment_from_dict(_file(tmp_path))
    out = run_experiment(config, progress=False, log=lambda _: None)
    phases = _phases(out)
    assert phases[("random", "final")] == phases[("oracle", "final")] == 3
    assert ("random", "train") not in phases and ("oracle", "train") not in phases
    assert _successes(out, "oracle") == [1, 1, 1]  # the shortest path reaches the goal


@needs_minigrid
def test_a_shrunk_glam_file_with_random_and_bot_runs_end_to_end_on_copies(tmp_path):
    """babyai_glam's floor and ceiling rows, shrunk: 8 copies in the file (unused: neither
    learns), held-out and transfer episodes, the summary's table by goal type."""
    data = _file(
        tmp_path,
        environment={"id": "langadapt/BabyAI-MixedTrainLocal-v0",
                     "params": {"num_dists": 0, "goal": "mixed"}},
        training={"steps": 3_000_000, "n_envs": 8},
        evaluation={"every_steps": 100_000, "episodes": 2, "keep_best": True,
                    "heldout_seeds": {"first": 1_000_000, "count": 10},
                    "transfer": {"environment_params": {"missions": "test"},
                                 "heldout_seeds": {"first": 2_000_000, "count": 5}}})
    out = run_experiment(experiment_from_dict(data), progress=False, log=lambda _: None)
    phases = _phases(out)
    assert phases == {("random", "final"): 10, ("random", "transfer"): 5,
                      ("oracle", "final"): 10, ("oracle", "transfer"): 5}
    assert _successes(out, "oracle") == [1] * 15  # BabyAI's bot solves every episode
    summary = (out / "summary.md").read_text()
    assert "| raw / oracle | 10 |" in summary and "| 100.0 |" in summary


def _file(tmp_path: Path, **changes) -> dict:
    data = {"name": "bounds",
            "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
            "adapters": [{"type": "raw"}],
            "agents": [{"type": "random"}, {"type": "oracle"}],
            "training": {"episodes": 50}, "seeds": [0],
            "evaluation": {"final_episodes": 3},
            "output": str(tmp_path / "out"), "cache_dir": ""}
    return {**data, **changes}


def _phases(out: Path) -> Counter:
    with open(out / "episodes.csv", newline="") as handle:
        return Counter((r["agent"], r["phase"]) for r in csv.DictReader(handle))


def _successes(out: Path, agent: str) -> list[int]:
    with open(out / "episodes.csv", newline="") as handle:
        return [int(r["success"]) for r in csv.DictReader(handle) if r["agent"] == agent]
