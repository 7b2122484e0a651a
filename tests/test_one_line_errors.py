"""One formatter for one-line errors (`langadapt.errors`): a bad argument of a public entry
or key of a file is one line naming it and its value (not asserted as exact prose)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from langadapt.environments.cartpole import CartPoleEnv
from langadapt.environments.frozenlake import FrozenLakeEnv, FrozenLakeMapsEnv
from langadapt.environments.maze import MazeEnv
from langadapt.environments.sailing import SailingEnv
from langadapt.errors import one_line
from langadapt.experiments.config import ConfigError, experiment_from_dict


@pytest.mark.parametrize(("make", "kwargs", "named"), [
    (MazeEnv, {"maze": "spiral"}, 'maze="spiral"'),
    (MazeEnv, {"maze": "random", "width": 4}, "width=4"),
    (MazeEnv, {"maze": "random", "height": 10**6}, "height=1000000"),
    (MazeEnv, {"maze": "random", "seed": -1}, "seed=-1"),
    (MazeEnv, {"max_steps": True}, "max_steps=true"),
    (MazeEnv, {"goal_reward": float("inf")}, "goal_reward=Infinity"),
    (MazeEnv, {"render_mode": "human"}, 'render_mode="human"'),
    (FrozenLakeEnv, {"map_name": "5x5"}, 'map_name="5x5"'),
    (FrozenLakeEnv, {"is_slippery": 1}, "is_slippery=1"),
    (FrozenLakeEnv, {"max_steps": 0}, "max_steps=0"),
    (FrozenLakeMapsEnv, {"size": 17}, "size=17"),
    (FrozenLakeMapsEnv, {"frozen_probability": 0}, "frozen_probability=0"),
    (FrozenLakeMapsEnv, {"split": "test"}, 'split="test"'),
    (SailingEnv, {"y_limit": -1.0}, "y_limit=-1.0"),
    (SailingEnv, {"reward_shaping": "yes"}, 'reward_shaping="yes"'),
    (CartPoleEnv, {"max_steps": 2.5}, "max_steps=2.5"),
])
def test_a_bad_constructor_argument_is_one_line_naming_it_and_its_value(make, kwargs, named):
    with pytest.raises(ValueError) as error:
        make(**kwargs)
    message = str(error.value)
    assert message.startswith(f"{named}: ") and "\n" not in message


def test_a_positional_argument_is_named_too():
    with pytest.raises(ValueError, match=r'^maze="spiral": '):
        MazeEnv("spiral")


@pytest.mark.parametrize(("changes", "named"), [
    ({"training": {"episodes": "4"}}, 'training.episodes="4"'),
    ({"evaluation": {"every": 2, "episodes": -1}}, "evaluation.episodes=-1"),
    ({"seeds": 0}, "seeds"),
])
def test_a_bad_key_of_a_file_is_a_line_naming_it_and_its_value(tmp_path, changes, named):
    from experiment_fixtures import raw_config

    with pytest.raises(ConfigError) as error:
        experiment_from_dict(raw_config(tmp_path, **changes), "x.yaml")
    header, *lines = str(error.value).split("\n")
    assert header == "x.yaml: invalid experiment file" and len(lines) == 1
    assert lines[0].strip().startswith(named)


class _Backend(BaseModel):
    model_config = ConfigDict(extra="forbid")
    api_key: str = Field(min_length=8)
    timeout: float = Field(gt=0)


def _error(**data) -> ValidationError:
    with pytest.raises(ValidationError) as error:
        _Backend(**data)
    return error.value


def test_every_error_on_one_line_and_a_secret_never_shown():
    line = one_line(_error(api_key="sk-1", timeout=-2, colour="red"))
    assert "\n" not in line and "sk-1" not in line
    assert "api_key: " in line and "timeout=-2: " in line and "colour: unknown key" in line
    hidden = one_line(_error(api_key="long-enough", timeout="soon"), values=False)
    assert hidden.startswith("timeout: ") and "soon" not in hidden


def test_any_exception_or_text_is_folded_and_cut_in_the_middle():
    assert one_line(RuntimeError("a\n  b\tc")) == "a b c"
    assert one_line(KeyError()) == "KeyError"
    long = one_line("x" * 500 + "END", limit=100)
    assert long.startswith("x" * 50) and "END" in long and "(503 characters)" in long
