"""Evaluation with actions sampled from an SB3 policy (``deterministic: false``): legal,
not the greedy choice, and refused where the algorithm has no stochastic policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from adapter_fixtures import CountingEncoder

from langadapt import adapters, agents

pytest.importorskip("sb3_contrib")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

PPO = {"algorithm": "MaskablePPO", "n_steps": 32, "batch_size": 32, "n_epochs": 1}


def agent_and_observation(deterministic: bool):
    env = gym.make("langadapt/Maze-v0", maze="umaze")
    adapter = adapters.make("language", env, encoder=CountingEncoder())
    wrapped = adapters.LanguageObservation(env, adapter)
    agent = agents.make_agent("sb3", wrapped.observation_space, env.action_space, seed=0,
                              deterministic=deterministic, **PPO)
    obs, info = wrapped.reset(seed=0)
    while len(info["legal_moves"]) < 2:  # a state with a choice
        obs, _, _, _, info = wrapped.step(info["legal_moves"][0])
    return agent, obs, list(info["legal_moves"])


def test_sampled_actions_are_legal_and_vary_where_greedy_ones_do_not():
    greedy, obs, legal = agent_and_observation(True)
    sampled, _, _ = agent_and_observation(False)
    chosen = {greedy.act(obs, legal, explore=False) for _ in range(40)}
    assert len(chosen) == 1  # the most probable legal move, every time
    drawn = [sampled.act(obs, legal, explore=False) for _ in range(200)]
    assert set(drawn) <= set(legal) and len(set(drawn)) == len(legal) > 1
    # an untrained policy is near uniform over the legal moves
    counts = np.bincount(drawn, minlength=4)[list(legal)]
    assert counts.min() > 200 / len(legal) / 3


@pytest.mark.parametrize("algorithm", ["DQN"])
def test_sampling_is_refused_without_a_stochastic_policy(algorithm):
    env = gym.make("langadapt/Maze-v0", maze="umaze")
    with pytest.raises(ValueError, match=f"deterministic: false .* SB3's {algorithm} has none"):
        agents.make_agent("sb3", env.observation_space, env.action_space,
                          algorithm=algorithm, deterministic=False)


def test_a_non_bool_is_refused_by_name():
    env = gym.make("langadapt/Maze-v0", maze="umaze")
    with pytest.raises(ValueError, match="deterministic"):
        agents.make_agent("sb3", env.observation_space, env.action_space, deterministic="no")


def test_the_summary_says_which_rows_scored_sampled_actions(tmp_path):
    from experiment_fixtures import raw_config

    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.runner import run_experiment

    params = {**PPO, "algorithm": "PPO", "deterministic": False}
    config = experiment_from_dict(raw_config(
        tmp_path, training={"steps": 64}, seeds=1,
        agents=[{"type": "sb3", "label": "ppo_sampled", "params": params}, {"type": "random"}]))
    out = run_experiment(config, progress=False, log=lambda _: None)
    text = (out / "summary.md").read_text()
    assert "Sampled, not greedy: ppo_sampled (`deterministic: false`)" in text
    assert "random" not in text.split("Sampled, not greedy:")[1].splitlines()[0]


def test_sampled_evaluation_is_reproducible_and_leaves_torchs_stream_alone():
    import torch

    sampled, _, _ = agent_and_observation(False)
    env = adapters.LanguageObservation(gym.make("langadapt/Maze-v0", maze="umaze"),
                                       adapters.make("language", gym.make("langadapt/Maze-v0",
                                                                          maze="umaze"),
                                                     encoder=CountingEncoder()))
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first = [r.as_dict() | {"wall_time": 0} for r in agents.evaluate(sampled, env, 4, seed=7)]
    assert torch.equal(torch.rand(1), before)  # the global stream is where it was
    again = [r.as_dict() | {"wall_time": 0} for r in agents.evaluate(sampled, env, 4, seed=7)]
    assert again == first
    other = [r.as_dict() | {"wall_time": 0} for r in agents.evaluate(sampled, env, 4, seed=8)]
    assert other != first  # another seed, other draws (and other mazes' starts)


def test_the_same_file_and_seed_give_the_same_sampled_final_rows(tmp_path):
    import csv

    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.runner import run_experiment

    data = {"name": "sampled", "environment": {"id": "langadapt/Maze-v0",
                                               "params": {"maze": "umaze"}},
            "adapters": [{"type": "raw"}],
            "agents": [{"type": "sb3", "params": {**PPO, "deterministic": False}}],
            "training": {"steps": 256}, "seeds": [0],
            "evaluation": {"final_episodes": 5}}
    finals = []
    for name in ("a", "b"):
        out = run_experiment(experiment_from_dict(data), tmp_path / name, progress=False,
                             log=lambda _: None)
        with open(out / "episodes.csv", newline="") as handle:
            finals.append([(r["return"], r["length"]) for r in csv.DictReader(handle)
                           if r["phase"] == "final"])
    assert len(finals[0]) == 5 and finals[0] == finals[1]
