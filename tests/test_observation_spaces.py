"""Any observation space an adapter can take: Box as it is; Discrete, MultiDiscrete,
MultiBinary, Dict and Tuple flattened by gymnasium for the raw adapter and given to the
describer as the environment's own observation; a wrapper's space counts; Graph (or a plain
MiniGrid level) as one error naming what works. Taxi and CliffWalking language specs say
what is true of the state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from langadapt import adapters
from langadapt.environments import Describer, LanguageSpec, language_for, register_language
from langadapt.experiments.config import load_config

SPACES = {
    "Discrete": spaces.Discrete(4, start=1),
    "MultiDiscrete": spaces.MultiDiscrete([3, 2]),
    "MultiBinary": spaces.MultiBinary(3),
    "Dict": spaces.Dict({"cell": spaces.Discrete(3), "speed": spaces.Box(0, 1, (2,))}),
    "Tuple": spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(2))),
}


class SpaceEnv(gym.Env):
    """An environment whose observation space is the one given."""

    def __init__(self, space: spaces.Space) -> None:
        self.observation_space = space
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


class EchoDescriber(Describer):
    """Says which Python type and value it received."""

    env_name = "Echo"
    n_actions = 2
    state_shape = None  # the observation as the environment gives it

    def describe(self, state, legal_moves, last_action):
        return f"{type(state).__name__}: {state!r}"


register_language(SpaceEnv, lambda env, **options: LanguageSpec(
    EchoDescriber(), ("a", "b"), "Echo the observation.", lambda e: None))


@pytest.mark.parametrize("name", sorted(SPACES))
def test_raw_adapter_flattens_the_space(name):
    space = SPACES[name]
    space.seed(0)
    adapter = adapters.make("raw", SpaceEnv(space))
    observation = space.sample()
    vector = adapter(observation)
    assert vector.dtype == np.float32 and adapter.observation_space.contains(vector)
    np.testing.assert_array_equal(vector, spaces.flatten(space, observation).astype(np.float32))


@pytest.mark.parametrize("name", sorted(SPACES))
def test_describer_receives_the_environments_own_observation(name):
    space = SPACES[name]
    space.seed(1)
    adapter = adapters.make("language", SpaceEnv(space))
    observation = space.sample()
    text = adapter(observation, encode=False)
    assert text == EchoDescriber()(observation)  # the same type and value, not the flat vector
    assert adapter(observation).shape == adapter.observation_space.shape


def test_a_state_outside_the_space_is_named():
    adapter = adapters.make("raw", SpaceEnv(SPACES["Discrete"]))
    with pytest.raises(ValueError, match=r"state 0 is not an observation of Discrete\(4, "):
        adapter(0)


def test_a_wrappers_observation_space_counts():
    box = gym.wrappers.TransformObservation(
        SpaceEnv(spaces.Graph(spaces.Box(0, 1, (2,)), None)), lambda graph: np.zeros(3),
        spaces.Box(0, 1, (3,)))
    assert adapters.make("raw", box).observation_space.shape == (3,)
    one_hot = gym.wrappers.TransformObservation(
        gym.make("Taxi-v4"), lambda state: {"s": state}, spaces.Dict({"s": spaces.Discrete(500)}))
    assert adapters.make("raw", one_hot)({"s": 7}).argmax() == 7


def test_a_space_no_adapter_takes_is_one_error_naming_the_adapters():
    env = SpaceEnv(spaces.Graph(spaces.Box(0, 1, (2,)), None))
    for kind in ("raw", "language"):
        with pytest.raises(ValueError, match=r"observation_space Graph\(.*no adapter \(raw, "
                                             r"language, llm\) takes; expected a Box or one of "
                                             "Discrete, MultiDiscrete"):
            adapters.make(kind, env)


def test_a_plain_minigrid_level_names_the_bridged_id():
    pytest.importorskip("minigrid")
    env = gym.make("MiniGrid-DoorKey-5x5-v0")
    with pytest.raises(ValueError, match="use langadapt/MiniGrid-DoorKey-5x5-v0"):
        adapters.make("language", env)


def test_taxi_says_where_the_taxi_passenger_and_destination_are():
    env = gym.make("Taxi-v4")
    spec = language_for(env)
    waiting = env.unwrapped.encode(3, 0, 2, 1)  # taxi (3, 0), passenger at Y, destination G
    text = spec.describe(waiting)
    assert text == ("The taxi is at row 3, column 0. The passenger waits at Y (row 4, column "
                    "0). The destination is G (row 0, column 4). The passenger is 1 south of "
                    "the taxi. Walls block the way east and west.")
    riding = env.unwrapped.encode(2, 2, 4, 3)  # passenger in the taxi, destination B (4, 3)
    assert "The passenger is in the taxi." in spec.describe(riding)
    assert "The destination is 2 south and 1 east of the taxi." in spec.describe(riding)
    assert spec.action_names[4:] == ("pick up", "drop off")
    language = adapters.make("language", env)
    assert language(waiting, encode=False) == text


def test_cliff_walking_names_the_cliff_cells_next_to_the_agent():
    spec = language_for(gym.make("CliffWalking-v1"))
    assert spec.describe(36) == ("You are at row 3, column 0. The goal (row 3, column 11) is "
                                 "11 right. The cliff is right next to you: moving right falls "
                                 "off it.")
    assert spec.describe(2 * 12 + 5).endswith("moving down falls off it.")
    assert "cliff" not in spec.describe(0)
    with pytest.raises(ValueError, match=r"CliffWalking state 48.0: expected an integer"):
        spec.describe(48)


def test_the_taxi_experiment_file_validates():
    config = load_config("configs/taxi.yaml")
    assert config.environment.id == "Taxi-v4"
    assert [a.type for a in config.adapters] == ["raw", "language"]


@pytest.mark.heavy
def test_cliff_walking_from_the_taxi_file_runs_under_two_jobs(tmp_path):
    """The newcomer path: gymnasium's own environment, raw against language, `langadapt run`
    with --jobs 2 (spawned workers), a small budget."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    data = yaml.safe_load(Path("configs/taxi.yaml").read_text(encoding="utf-8"))
    # CliffWalking-v1 has no step limit: gymnasium.make's max_episode_steps (an environment
    # param) ends a greedy evaluation that never reaches the goal
    data.update(environment={"id": "CliffWalking-v1", "params": {"max_episode_steps": 100}},
                training={"steps": 400}, seeds=1,
                agents=data["agents"][:1], cache_dir=str(tmp_path / "cache"),
                evaluation={"final_episodes": 2})
    path = tmp_path / "cliff.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = subprocess.run(
        [str(Path(sys.executable).with_name("langadapt")), "run", str(path), "--jobs", "2",
         "--no-progress", "--out", str(tmp_path / "results")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "results" / "summary.md").read_text(encoding="utf-8")
    assert "| raw | qlearning |" in summary and "| language | qlearning |" in summary
