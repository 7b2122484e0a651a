"""Slippery FrozenLake 4x4 as a GRPO task (`finetune.tasks.SnapshotTask`) under RAGEN's
protocol: held-out reset seeds never trained on, slips drawn anew for every rollout, the
greedy policy judged like a direct simulation, and the config errors — all with scripted
policies (no LLM)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from langadapt.environments.frozenlake import FrozenLakeEnv
from langadapt.finetune.agent import TRAIN_SEED, GRPOAgentConfig, grpo_task
from langadapt.finetune.tasks import SnapshotTask

#: A good table for gymnasium's 4x4 lake (row-major cells; 0 left, 1 down, 2 right, 3 up).
TABLE = [0, 3, 3, 3, 0, 0, 0, 0, 3, 1, 0, 0, 0, 2, 1, 0]


def _lake() -> FrozenLakeEnv:
    return FrozenLakeEnv(map_name="4x4", is_slippery=True)


def _table_policy(observed):
    return [TABLE[int(obs[0]) * 4 + int(obs[1])] for obs, _ in observed]


def _task(**kw) -> SnapshotTask:
    config = GRPOAgentConfig(held_out={"seed": 0, "episodes": 256, "max_steps": None}, states=4)
    return grpo_task(_lake, config, **kw)


def test_held_out_seeds_are_never_training_seeds():
    task = _task()
    assert (task.eval_seed, task.eval_episodes, task.train_seed) == (0, 256, TRAIN_SEED)
    rng = np.random.default_rng(0)
    for _ in range(5):
        task.starts(4, rng)
    assert task.trained == set(range(TRAIN_SEED, TRAIN_SEED + 20))
    assert not task.trained & set(range(task.eval_seed, task.eval_seed + task.eval_episodes))
    assert task.evaluate(_table_policy)["episodes"] == 256
    # every lake episode starts at S: what the check compares is the reset seed
    task.eval_seed = TRAIN_SEED + 19
    with pytest.raises(ValueError, match=r"seed 1000019 was a training start \(the same reset "
                                         r"seed: the same slips\)"):
        task.evaluate(_table_policy)
    with pytest.raises(ValueError, match="reach the training seeds"):
        SnapshotTask(_lake, train_seed=100, eval_seed=0, eval_episodes=101)


def test_rollouts_from_one_snapshot_draw_their_own_slips():
    task = _task()
    start = task.starts(1, np.random.default_rng(0))[0]
    cells = [tuple(task.step(start, 1)[1][1][0]) for _ in range(40)]  # "down" from S
    assert set(cells) == {(0.0, 0.0), (1.0, 0.0), (0.0, 1.0)}  # down, or slipped aside
    assert tuple(task.observe(start)[0]) == (0.0, 0.0)  # the snapshot itself never moves
    # a plain copy would replay the snapshot's generator: one slip for every rollout
    copies = {tuple(copy.deepcopy(start[0]).step(1)[0]) for _ in range(40)}
    assert len(copies) == 1
    # the slips come from the run's seed: the same seed, the same slips; a checkpoint keeps them
    again = _task()
    again.load_state_dict({**task.state_dict(), "slips": _task().state_dict()["slips"]})
    assert [tuple(again.step(start, 1)[1][1][0]) for _ in range(40)] == cells


def test_evaluate_is_the_greedy_table_simulated_directly():
    task = _task()
    figures = task.evaluate(_table_policy)
    wins, lengths = [], []
    for seed in range(256):
        env = _lake()
        obs, _ = env.reset(seed=seed)
        done, length = False, 0
        while not done:  # the lake's own limit: 100 steps
            obs, _, terminated, truncated, info = env.step(TABLE[int(obs[0]) * 4 + int(obs[1])])
            done, length = terminated or truncated, length + 1
        wins.append(info["is_success"])
        lengths.append(length)
    assert figures["greedy_success"] == pytest.approx(np.mean(wins))
    assert figures["greedy_length"] == pytest.approx(np.mean(lengths))
    assert 0.5 < figures["greedy_success"] < 0.95  # a good table, on a slippery lake
    asked = []
    task.evaluate(lambda observed: asked.append(len(observed)) or _table_policy(observed))
    assert sum(asked) <= 16  # each cell asked once: the greedy policy is fixed
    visits = []  # a sampling policy is asked at every visit (here the table, so the same run)
    again = task.evaluate(lambda observed: visits.append(len(observed))
                          or _table_policy(observed), fixed=False)
    assert again == figures and sum(visits) == sum(lengths)


def test_tempered_is_the_distribution_at_the_new_temperature():
    from langadapt.finetune.grpo import tempered

    np.testing.assert_allclose(tempered(np.array([0.5, 0.25, 0.25]), 2.0),
                               np.array([0.25, 0.0625, 0.0625]) / 0.375)
    np.testing.assert_allclose(tempered(np.array([0.4, 0.35, 0.25, 0.0]), 1000.0),
                               [1.0, 0.0, 0.0, 0.0], atol=1e-12)  # no underflow to NaN


def _config(params: dict, env_params: dict | None = None) -> dict:
    return {"name": "lake", "adapters": [{"type": "raw"}], "training": {"episodes": 1},
            "environment": {"id": "langadapt/FrozenLake-v0",
                            "params": {"map_name": "4x4", "is_slippery": True,
                                       **(env_params or {})}},
            "agents": [{"type": "grpo", "params": params}]}


@pytest.mark.parametrize(("params", "env_params", "message"), [
    ({"states": 4}, None, r"agents\.0 \(grpo on langadapt/FrozenLake-v0\): params\.held_out "
     r"is missing: on a slippery lake the reset seed"),
    ({"states": "all", "held_out": {}}, None, r"params\.states is 'all', which only a maze has "
     r"\(every episode of a lake starts at S"),
    ({"states": 4, "held_out": {}, "shaping": "oracle"}, None,
     r"params\.shaping is 'oracle', but FrozenLakeEnv has no oracle"),
])
def test_a_bad_frozenlake_grpo_file_is_a_config_error_naming_the_key(params, env_params,
                                                                     message):
    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.schema import ConfigError

    with pytest.raises(ConfigError, match=message):
        experiment_from_dict(_config(params, env_params))


def test_a_lake_that_cannot_slip_needs_no_held_out_setting():
    from langadapt.experiments.config import experiment_from_dict

    experiment_from_dict(_config({"states": 4}, {"is_slippery": False}))
    experiment_from_dict(_config({"states": 4, "held_out": {"episodes": 256}}))
