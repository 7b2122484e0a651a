"""Stable-Baselines3 algorithms as agents (``type: sb3``) and TensorBoard logs of runs
(``logging: {tensorboard: true}``): the newcomer's path through the CLI, the SB3 learner's
budget, evaluations, keep-best and random state, the event files read back, and the
one-line errors of a missing extra."""

from __future__ import annotations

import csv
import random
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from experiment_fixtures import run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from langadapt import adapters, agents
from langadapt.adapters import LanguageObservation
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.schema import ConfigError

PPO = {"algorithm": "PPO", "n_steps": 64, "batch_size": 32, "n_epochs": 1}


@pytest.fixture(autouse=True)
def one_torch_thread():
    """As a run does (torch_threads: 1): a second thread on a shared machine is ten times
    slower for these small networks."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _taxi() -> gym.Env:
    env = gym.make("Taxi-v4", max_episode_steps=60)
    return LanguageObservation(env, adapters.make("raw", env))


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


TAXI = """\
name: taxi_newcomer
environment: {id: Taxi-v4, params: {max_episode_steps: 60}}
adapters: [{type: raw}, {type: language}]
agents:
  - type: dqn
    params: {learning_starts: 50, batch_size: 16, hidden_sizes: [32]}
  - type: sb3
    label: ppo
    params: {algorithm: PPO, n_steps: 64, batch_size: 32, n_epochs: 1}
training: {steps: 240}
seeds: 1
evaluation: {every_steps: 120, episodes: 1, heldout_seeds: {first: 500000, count: 2}}
logging: {tensorboard: true}
cache_dir: CACHE
"""


@pytest.mark.heavy
def test_taxi_file_with_sb3_ppo_and_dqn_in_one_summary_and_tensorboard(tmp_path, capsys):
    path = tmp_path / "taxi.yaml"
    path.write_text(TAXI.replace("CACHE", str(tmp_path / "cache")), encoding="utf-8")
    code, _, err = run_cli(capsys, "run", str(path), "--jobs", "2", "--no-progress",
                           "--out", str(tmp_path / "out"))
    assert code == 0, err
    out = tmp_path / "out"
    with open(out / "summary.csv", newline="") as handle:
        rows = {(r["adapter"], r["agent"]): r for r in csv.DictReader(handle)}
    assert set(rows) == {(a, b) for a in ("raw", "language") for b in ("dqn", "ppo")}
    with open(out / "episodes.csv", newline="") as handle:
        episodes = [r for r in csv.DictReader(handle) if r["agent"] == "ppo"]
    train = [r for r in episodes if r["phase"] == "train"]
    assert sum(int(r["length"]) for r in train if r["adapter"] == "raw") <= 240
    assert {r["phase"] for r in episodes} == {"train", "eval", "final"}
    final = [r for r in episodes if r["phase"] == "final"]
    assert len(final) == 4  # the 2 held-out episodes per adapter
    ppo, dqn = _scalars(out / "runs/language__ppo__seed0/tb"), _scalars(
        out / "runs/language__dqn__seed0/tb")
    for scalars in (ppo, dqn):
        assert {"rollout/ep_rew_mean", "rollout/ep_len_mean", "eval/mean_reward",
                "train/loss", "llm/calls", "llm/seconds"} <= set(scalars)
        assert [step for step, _ in scalars["eval/mean_reward"]] == [120, 240]
    assert {"rollout/exploration_rate", "train/q_mean"} <= set(dqn)
    assert "rollout/exploration_rate" not in ppo  # PPO has no epsilon
    assert dqn["rollout/ep_len_mean"][0] == (60, 60.0)  # by environment steps


def test_sb3_learner_keeps_budget_evaluations_keep_best_and_global_random_state():
    env = _taxi()
    agent = agents.make_agent("sb3", env.observation_space, env.action_space, seed=3, **PPO)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    result = agents.train(agent, env, steps=200, eval_every_steps=100, eval_episodes=1, seed=3,
                          progress=False, keep_best=True)
    assert random.getstate() == before[0]
    assert np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])
    train = [r for r in result if r.phase == "train"]
    assert [r.total_steps for r in train] == [60, 120, 180]  # the 20 steps after: cut short
    # the first episode past 100 steps, then the final policy (keep_best)
    assert [r.total_steps for r in result if r.phase == "eval"] == [120, 200]
    assert result.best is not None and result.last.total_steps == 200
    again = agents.make_agent("sb3", env.observation_space, env.action_space, seed=3, **PPO)
    repeat = agents.train(again, _taxi(), steps=200, eval_every_steps=100, eval_episodes=1,
                          seed=3, progress=False, keep_best=True)
    assert [r.return_ for r in repeat] == [r.return_ for r in result]  # seeded: the same run


def test_sb3_agent_saves_and_loads_and_acts_greedily_on_legal_moves(tmp_path):
    env = _taxi()
    agent = agents.make_agent("sb3", env.observation_space, env.action_space,
                              algorithm="DQN", buffer_size=500, learning_starts=10)
    agents.train(agent, env, steps=80, seed=0, progress=False)
    obs, _ = env.reset(seed=1)
    scores = agent.action_scores(obs)
    assert agent.act(obs, None, explore=False) == int(np.argmax(scores))
    worst = int(np.argmin(scores))
    assert agent.act(obs, [worst], explore=False) == worst
    agent.save(tmp_path / "dqn.pt")
    loaded = agents.make_agent("sb3", env.observation_space, env.action_space,
                               algorithm="DQN", buffer_size=500, learning_starts=10, seed=5)
    loaded.load(tmp_path / "dqn.pt")
    assert np.allclose(loaded.action_scores(obs), scores)
    ppo = agents.make_agent("sb3", env.observation_space, env.action_space, **PPO)
    with pytest.raises(ValueError, match="holds a 'sb3' agent|saved with settings"):
        ppo.load(tmp_path / "dqn.pt")


def _config(tmp_path, agent: dict, **changes) -> dict:
    data = {"name": "x", "environment": {"id": "Taxi-v4"}, "adapters": [{"type": "raw"}],
            "agents": [agent], "training": {"steps": 100}, "seeds": 1,
            "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache")}
    return {**data, **changes}


def test_sb3_settings_are_checked_in_the_file(tmp_path):
    bad = {"type": "sb3", "params": {"algorithm": "PPO", "n_step": 64}}
    with pytest.raises(ConfigError, match=r"agents\.0\.params: n_step: not a parameter of "
                                          r"SB3's PPO \(did you mean n_steps\?\)"):
        experiment_from_dict(_config(tmp_path, bad))
    with pytest.raises(ConfigError, match=r'agents\.0\.params\.algorithm="TRPO": input should be '):
        experiment_from_dict(_config(tmp_path, {"type": "sb3", "params": {"algorithm": "TRPO"}}))
    taxi = _taxi()  # SAC takes Box actions only: one line naming both
    with pytest.raises(ValueError, match=r"SAC does not take action space Discrete"):
        agents.make_agent("sb3", taxi.observation_space, taxi.action_space, algorithm="SAC")
    advised = {"type": "sb3", "advisor": {"backend": "llamacpp"}}
    with pytest.raises(ConfigError, match="sb3 does not learn from steps in langadapt's loop"):
        experiment_from_dict(_config(tmp_path, advised))
    with pytest.raises(ConfigError, match=r"agents\.0: an sb3 agent trains for a number of "
                                          r"environment steps .* training: \{steps: N\}"):
        experiment_from_dict(_config(tmp_path, {"type": "sb3"}, training={"episodes": 5}))
    env = _taxi()
    agent = agents.make_agent("sb3", env.observation_space, env.action_space, **PPO)
    with pytest.raises(ValueError, match=r"sb3 agent trains for a number of environment "
                                         r"steps .* got episodes=3"):
        agents.train(agent, env, episodes=3, progress=False)


def test_a_missing_extra_is_one_line_naming_pip_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    with pytest.raises(ConfigError, match=r"agents\.0\.params\.algorithm: sb3 agents \(PPO\) "
                                          r"need Stable-Baselines3 and sb3-contrib: "
                                          r"pip install 'langadapt\[sb3\]'"):
        experiment_from_dict(_config(tmp_path, {"type": "sb3"}))
    plain = experiment_from_dict(_config(tmp_path, {"type": "dqn"}))
    logged = experiment_from_dict(_config(tmp_path, {"type": "dqn"}, logging={"tensorboard": True}))
    assert plain.fingerprint() == logged.fingerprint()  # logging changes no result: resumable
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match=r"logging\.tensorboard: tensorboard is not installed: "
                                          r"pip install 'langadapt\[tensorboard\]'"):
        experiment_from_dict(_config(tmp_path, {"type": "dqn"}, logging={"tensorboard": True}))
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match=r"^TensorBoard logging needs tensorboard: pip install "
                                          r"'langadapt\[tensorboard\]'$"):
        agents.TensorBoardLog(tmp_path / "tb").on_start(None)


def test_tensorboard_log_of_qlearning_on_a_maze_by_steps_with_evaluations_and_counters(tmp_path):
    maze = gym.make("langadapt/Maze-v0", maze="umaze")  # legal moves in info
    env = LanguageObservation(maze, adapters.make("raw", maze))
    agent = agents.make_agent("qlearning", env.observation_space, env.action_space)
    calls = iter(range(1, 100))
    log = agents.TensorBoardLog(tmp_path / "tb", window=2, probes=3,
                                counters=lambda: {"llm_calls": next(calls), "llm_seconds": 0.5})
    result = agents.train(agent, env, episodes=3, eval_every=2, eval_episodes=2, seed=0,
                          progress=False, callbacks=[log])
    train = [r for r in result if r.phase == "train"]
    scalars = _scalars(tmp_path / "tb")
    steps = [r.total_steps for r in train]
    assert [s for s, _ in scalars["rollout/ep_rew_mean"]] == steps
    means = [np.mean([r.return_ for r in train[max(0, i - 1):i + 1]]) for i in range(3)]
    assert np.allclose([v for _, v in scalars["rollout/ep_rew_mean"]], means)  # window 2
    assert scalars["eval/mean_reward"][0][0] == train[1].total_steps
    assert [v for _, v in scalars["llm/calls"]] == [1, 2, 3]
    assert [round(v, 3) for _, v in scalars["rollout/exploration_rate"]] == [0.99, 0.98, 0.97]
    assert "train/q_mean" in scalars and "train/loss" not in scalars  # a table has no loss


def test_sb3_ppo_writes_sb3s_own_train_tags(tmp_path):
    env = _taxi()
    agent = agents.make_agent("sb3", env.observation_space, env.action_space, seed=0, **PPO)
    agents.train(agent, env, steps=200, seed=0, progress=False,
                 callbacks=[agents.TensorBoardLog(tmp_path / "tb")])
    tags = set(_scalars(tmp_path / "tb"))
    assert {"train/approx_kl", "train/clip_fraction", "train/entropy_loss",
            "train/explained_variance", "train/value_loss", "train/policy_gradient_loss",
            "train/loss", "train/learning_rate", "train/n_updates"} <= tags, tags
