"""SB3 agents over N copies of an environment (agents.sb3_vec): one batch per step, rows in
copy order, the same rows as one environment for N = 1, legal moves as MaskablePPO's masks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from adapter_fixtures import CountingEncoder
from experiment_fixtures import raw_config

from langadapt import adapters, agents
from langadapt.adapters.vector import LanguageVectorEnv

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

from langadapt.experiments.config import experiment_from_dict  # noqa: E402
from langadapt.experiments.one_run import train_run  # noqa: E402
from langadapt.experiments.results import runs_of  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PPO = {"algorithm": "PPO", "n_steps": 32, "batch_size": 32, "n_epochs": 1}


def umaze() -> gym.Env:
    return gym.make("langadapt/Maze-v0", maze="umaze")


def rows_of(result) -> list[tuple]:
    return [(r.phase, r.episode, r.return_, r.length, r.success, r.total_steps) for r in result]


class LegalMovesSpy(gym.Wrapper):
    """Records each (legal moves, action taken) pair."""

    def __init__(self, env: gym.Env, seen: list) -> None:
        super().__init__(env)
        self.seen, self.legal = seen, None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.legal = info["legal_moves"]
        return obs, info

    def step(self, action):
        self.seen.append((list(self.legal), int(action)))
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.legal = info["legal_moves"]
        return obs, reward, terminated, truncated, info


def test_one_copy_gives_the_rows_of_one_environment():
    results = []
    for vector in (False, True):
        adapter = adapters.make("language", umaze(), encoder=CountingEncoder())
        env = (LanguageVectorEnv([umaze()], adapter) if vector
               else adapters.LanguageObservation(umaze(), adapter))
        space = env.single_observation_space if vector else env.observation_space
        agent = agents.make_agent("sb3", space, umaze().action_space, seed=3, **PPO)
        results.append(rows_of(agents.train(agent, env, steps=400, seed=5, progress=False)))
    assert results[0] == results[1] and len(results[0]) > 3


def test_n_copies_are_adapted_in_one_batch_per_step_and_counted_in_the_budget():
    encoder = CountingEncoder()
    batches: list[int] = []
    encode_many = encoder.encode_many
    encoder.encode_many = lambda texts: batches.append(len(texts)) or encode_many(texts)
    adapter = adapters.make("language", umaze(), encoder=encoder)
    envs = LanguageVectorEnv([umaze() for _ in range(4)], adapter)
    agent = agents.make_agent("sb3", envs.single_observation_space, envs.single_action_space,
                              seed=0, **PPO)
    result = agents.train(agent, envs, steps=256, progress=False)
    assert agent.model.n_envs == 4 and agent.model.rollout_buffer.n_envs == 4
    assert result and all(r.total_steps <= 256 for r in result)
    # every call of the encoder was one step's (or the reset's) new texts of all copies
    assert len(batches) <= 256 // 4 + 1


def test_maskable_ppo_acts_only_on_legal_moves_in_training_and_evaluation():
    seen: list = []
    adapter = adapters.make("language", umaze(), encoder=CountingEncoder())
    envs = LanguageVectorEnv([LegalMovesSpy(umaze(), seen) for _ in range(2)], adapter)
    agent = agents.make_agent("sb3", envs.single_observation_space, envs.single_action_space,
                              seed=0, **{**PPO, "algorithm": "MaskablePPO"})
    agents.train(agent, envs, steps=300, progress=False)
    assert len(seen) == 300 and any(len(legal) < 4 for legal, _ in seen)
    assert all(action in legal for legal, action in seen)
    one = adapters.LanguageObservation(LegalMovesSpy(umaze(), seen), adapter)
    seen.clear()
    agents.evaluate(agent, one, episodes=2, seed=0)
    assert seen and all(action in legal for legal, action in seen)


def test_an_experiment_trains_an_sb3_agent_on_n_copies(tmp_path):
    data = raw_config(tmp_path, training={"steps": 200, "n_envs": 3},
                      agents=[{"type": "sb3", "params": {**PPO, "algorithm": "MaskablePPO"}}])
    config = experiment_from_dict(data)
    rows: list[dict] = []
    train_run(config, runs_of(config)[0], rows.append)
    phases = {row["phase"] for row in rows}
    assert "train" in phases and "final" in phases
    assert np.all(np.diff([int(r["episode"]) for r in rows if r["phase"] == "train"]) == 1)


def test_the_mixed_file_trains_on_training_missions_and_transfers_to_test_missions(
        tmp_path, monkeypatch):
    pytest.importorskip("minigrid")
    from pathlib import Path

    import yaml

    from langadapt.environments.babyai_suite import MixedTrainLocal

    path = Path(__file__).resolve().parents[1] / "configs" / "babyai_mixed.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["environment"]["params"]["goal"] == "mixed"
    assert data["evaluation"]["transfer"]["environment_params"] == {"missions": "test"}
    data.update(seeds=[0], adapters=[{"type": "raw"}], output=str(tmp_path / "out"),
                cache_dir=str(tmp_path / "cache"))
    data["training"] = {"steps": 256, "n_envs": 2}
    data["agents"][0]["params"].update(n_steps=64, batch_size=64)
    data["evaluation"].update(every_steps=128, episodes=2,
                              heldout_seeds={"first": 1_000_000, "count": 3})
    data["evaluation"]["transfer"]["heldout_seeds"] = {"first": 2_000_000, "count": 4}
    missions: dict[str, list[str]] = {"train": [], "test": []}
    gen = MixedTrainLocal.gen_mission
    monkeypatch.setattr(MixedTrainLocal, "gen_mission", lambda self: (
        gen(self), missions[self.missions].append(self.instrs.surface(self)))[0])
    config = experiment_from_dict(data)
    rows: list[dict] = []
    train_run(config, runs_of(config)[0], rows.append)
    phases = [row["phase"] for row in rows]
    assert phases.count("final") == 3 and phases.count("best") == 3
    assert phases.count("transfer") == 4 and phases[-4:] == ["transfer"] * 4
    withheld = ("yellow box", "red key", "red door", "green ball", "grey door")
    assert len(missions["test"]) == 4  # the transfer episodes, and nothing else
    assert all(any(p in m for p in withheld) for m in missions["test"])
    assert missions["train"] and not any(p in m for m in missions["train"] for p in withheld)


def test_transfer_seeds_that_training_uses_are_refused(tmp_path):
    data = raw_config(tmp_path, training={"steps": 100, "n_envs": 4}, seeds=[0])
    data["evaluation"] = {"transfer": {"environment_params": {"maze": "umaze"},
                                       "heldout_seeds": {"first": 2, "count": 5}}}
    with pytest.raises(Exception, match=r"held-out seeds \[2, 7\) overlap.*copy 2"):
        experiment_from_dict(data)


def test_held_out_success_is_split_by_the_goal_type_each_seed_draws(tmp_path):
    pytest.importorskip("minigrid")
    from langadapt.experiments.results import Episode
    from langadapt.experiments.stats import episode_goals, goals_markdown

    data = raw_config(tmp_path, seeds=[0])
    data["environment"] = {"id": "langadapt/BabyAI-MixedTrainLocal-v0",
                           "params": {"goal": "mixed", "num_dists": 0}}
    data["evaluation"] = {"heldout_seeds": {"first": 1_000_000, "count": 30},
                          "transfer": {"environment_params": {"missions": "test"},
                                       "heldout_seeds": {"first": 2_000_000, "count": 10}}}
    config = experiment_from_dict(data)
    goals = episode_goals(config, "final")
    level = gym.make("langadapt/BabyAI-MixedTrainLocal-v0", goal="mixed")
    for i in (0, 17):
        level.reset(seed=1_000_000 + i)
        assert goals[i] == level.unwrapped.minigrid.goal
    # succeed exactly on the goto episodes: goto 100%, the others 0%
    rows = [Episode("language", "ppo", 0, "final", 9, 1.0, 5, goal == "goto", 0.1, 0, 0)
            for goal in goals]
    rows += [Episode("language", "ppo", 0, "transfer", 9, 0.0, 5, False, 0.1, 0, 0)] * 10
    table = goals_markdown(config, rows, balrog=[("Model-X", {g: 50.0 for g in
                                                                  ["goto", "pickup", "open",
                                                                   "putnext",
                                                                   "pick_up_seq_go_to"]})])
    final = next(line for line in table.splitlines() if line.startswith("| language / ppo |"))
    assert final == "| language / ppo | 30 | 100.0 | 0.0 | 0.0 | 0.0 | 0.0 | 20.0 |"
    assert "| language / ppo — test missions | 10 |" in table
    assert "| BALROG: Model-X (zero-shot) | | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 |" in table
    assert goals_markdown(experiment_from_dict(raw_config(tmp_path)), rows) == ""


def test_ppo_with_a_language_adapter_trains_on_copies_of_a_box_action_environment(tmp_path):
    """Pendulum-v1's torque is a Box action: two copies under a language adapter with memory
    of the last actions train (it once passed --check and failed at the first step)."""
    data = raw_config(tmp_path, environment={"id": "Pendulum-v1"},
                      adapters=[{"type": "language",
                                 "settings": {"memory": {"observations": 2, "actions": 2}}}],
                      agents=[{"type": "sb3", "params": PPO}],
                      training={"steps": 500, "n_envs": 2}, seeds=[0],
                      evaluation={"final_episodes": 1})
    config = experiment_from_dict(data)
    rows: list[dict] = []
    train_run(config, runs_of(config)[0], rows.append)
    train = [row for row in rows if row["phase"] == "train"]
    assert len(train) == 2 and {int(row["length"]) for row in train} == {200}
    assert [row["phase"] for row in rows].count("final") == 1
