"""FrozenLake on random lakes: disjoint map seeds, held-out lakes in order, the describer."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from langadapt.adapters import LanguageAdapter
from langadapt.environments import FrozenLakeDescriber, FrozenLakeMapsEnv
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.one_run import make_env


def test_overlapping_train_and_held_out_maps_are_refused_naming_the_overlap():
    with pytest.raises(ValueError, match=r"share the map seeds 400\.\.499"):
        FrozenLakeMapsEnv(train_maps=[0, 500], held_out_maps=[400, 600])


@pytest.mark.parametrize("bad", [[5, 5], [3], [-1, 4], [0.0, 4], "0-4"])
def test_a_bad_seed_range_is_refused(bad):
    with pytest.raises(ValueError, match=r"train_maps=.*expected \[first, stop\]"):
        FrozenLakeMapsEnv(train_maps=bad)


def test_training_draws_only_training_lakes():
    env = FrozenLakeMapsEnv(train_maps=[0, 5], held_out_maps=[10, 12])
    seeds = {env.reset(seed=0)[1]["map_seed"]} | {env.reset()[1]["map_seed"] for _ in range(60)}
    assert seeds == set(range(5))


def test_held_out_lakes_come_in_order_from_the_first_at_a_seeded_reset():
    env = FrozenLakeMapsEnv(held_out_maps=[1000, 1003], split="held_out")
    played = [env.reset(seed=7)[1]["map_seed"]] + [env.reset()[1]["map_seed"] for _ in range(3)]
    assert played == [1000, 1001, 1002, 1000]
    assert env.reset(seed=1)[1]["map_seed"] == 1000


def test_the_observation_is_the_cell_and_the_lake():
    env = FrozenLakeMapsEnv(train_maps=[3, 4], held_out_maps=[10, 11])
    obs, _ = env.reset(seed=0)  # lake 3 is SFHF / FFFF / FFFF / FFFG
    assert obs.tolist() == [0, 0, 0, 0, 1, 0] + [0] * 11 + [2]
    obs, reward, terminated, _, _ = env.step(2)
    assert obs[:2].tolist() == [0, 1] and reward == 0 and not terminated
    assert env.observation_space.contains(obs)


def test_the_language_states_say_what_the_fixed_lake_describer_says():
    env = FrozenLakeMapsEnv(train_maps=[3, 4], held_out_maps=[10, 11])
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(2)
    adapter = LanguageAdapter(env)
    assert adapter.normalise == "whiten"  # the measured default on random lakes
    text = adapter(obs, [0, 1, 2, 3], encode=False)
    fixed = FrozenLakeDescriber(["SFHF", "FFFF", "FFFF", "FFFG"])(np.array([0, 1]), [0, 1, 2, 3])
    assert text == fixed == ("The goal is three cells down and two cells to the right. There "
                             "are a hole to the right and the edge of the lake up. You can move "
                             "left, down, right or up.")


def test_evaluation_environment_params_build_the_held_out_environment():
    data = {"name": "t", "environment": {"id": "langadapt/FrozenLakeMaps-v0",
                                         "params": {"held_out_maps": [1000, 1010]}},
            "adapters": [{"type": "raw"}], "agents": [{"type": "dqn"}],
            "training": {"episodes": 1},
            "evaluation": {"environment_params": {"split": "held_out"}}}
    config = experiment_from_dict(data)
    assert make_env(config).unwrapped.split == "train"
    held_out = make_env(config, evaluation=True).unwrapped
    assert held_out.split == "held_out" and list(held_out.map_seeds) == list(range(1000, 1010))
    plain = experiment_from_dict({**data, "evaluation": {}})
    assert "environment_params" not in plain.fingerprint_data()["evaluation"]
    assert "langadapt/FrozenLakeMaps-v0" in gymnasium.registry
