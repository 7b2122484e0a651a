"""A kept policy on another world (experiments.kept, experiments.play): ``load_run(...)
.make_env(**params)`` and ``play --set`` build the adapter for the environment they make,
never describing it with the training world's; FrozenLake renders ``rgb_array`` for
``play``; a raw BabyAI frame's caption shows the mission."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from experiment_fixtures import run_cli

import langadapt
from langadapt.environments.frozenlake import FrozenLakeDescriber
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.play import caption
from langadapt.experiments.runner import run_experiment

#: The default 4x4 lake; NO_HOLES: a lake of the same size with no hole anywhere.
NO_HOLES = ["SFFF", "FFFF", "FFFF", "FFFG"]

LAKE = {
    "name": "lake_kept",
    "environment": {"id": "langadapt/FrozenLake-v0", "params": {"is_slippery": False}},
    "adapters": [{"type": "language"}],
    "agents": [{"type": "qlearning"}],
    "training": {"episodes": 4},
    "seeds": 1,
    "evaluation": {"every": 2, "episodes": 1, "final_episodes": 1},
}


def _trained(tmp_path: Path, data: dict) -> Path:
    config = experiment_from_dict({**data, "cache_dir": str(tmp_path / "cache")})
    return run_experiment(config, tmp_path / "trained", progress=False, log=lambda _: None)


@pytest.fixture
def lake_run(tmp_path: Path) -> Path:
    return _trained(tmp_path, LAKE) / "runs" / "language__qlearning__seed0"


def test_make_env_with_other_params_describes_the_world_it_makes(lake_run):
    loaded = langadapt.load_run(lake_run)
    kept = loaded.make_env()
    kept.reset(seed=0)
    _, _, _, _, info = kept.step(1)  # down: on the default lake, a hole to the right
    assert "a hole to the right" in info["description"]
    env = loaded.make_env(desc=NO_HOLES)
    obs, info = env.reset(seed=0)
    texts = [info["description"]]
    for action in (1, 1, 2):  # down, down, right: no hole anywhere on this lake
        obs, _, terminated, _, info = env.step(action)
        texts.append(info["description"])
        assert not terminated
    assert not any("hole" in text for text in texts), texts
    assert texts[-1] == FrozenLakeDescriber(NO_HOLES).describe(
        np.array([2.0, 1.0]), (0, 1, 2, 3), None)
    assert obs.shape == loaded.adapter.observation_space.shape
    assert 0 <= loaded.agent.act(loaded.agent.observe(obs, info), info["legal_moves"],
                                 explore=False) < 4
    again = loaded.make_env()  # the kept world: its own adapter, as before
    _, info = again.reset(seed=0)
    assert again.adapter is loaded.adapter


def test_a_maze_policy_made_on_another_maze_describes_that_maze(tmp_path):
    from langadapt.environments import language_for

    data = {**LAKE, "name": "maze_kept",
            "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "large"}},
            "training": {"episodes": 2}}
    run = _trained(tmp_path, data) / "runs" / "language__qlearning__seed0"
    env = langadapt.load_run(run).make_env(maze="medium")
    obs, info = env.reset(seed=3)
    medium = language_for(env.unwrapped).describer
    for action in range(12):
        legal = info["legal_moves"]
        assert info["description"] == medium.describe(obs_cell(env), tuple(legal), None)
        obs, _, terminated, truncated, info = env.step(legal[action % len(legal)])
        if terminated or truncated:
            break


def obs_cell(env) -> np.ndarray:
    maze = env.unwrapped
    return maze.observation_of(maze.cell)


def test_make_env_params_are_checked_as_evaluate_set_checks_them(lake_run):
    loaded = langadapt.load_run(lake_run)
    with pytest.raises(ValueError) as caught:
        loaded.make_env(map_name="9x9")
    text = str(caught.value)
    assert "map_name" in text and "9x9" in text and "\n" not in text


def test_play_renders_frozenlake_and_plays_another_map_with_set(lake_run, tmp_path, capsys):
    from PIL import Image

    code, out, err = run_cli(capsys, "play", str(lake_run), "--out", str(tmp_path / "lake.gif"))
    assert code == 0, err
    with Image.open(tmp_path / "lake.gif") as gif:
        assert gif.n_frames >= 2 and gif.width == 480
    code, out, err = run_cli(capsys, "play", str(lake_run), "--out", str(tmp_path / "new.gif"),
                             "--set", f"environment.params.desc={NO_HOLES}")
    assert code == 0, err
    code, _, err = run_cli(capsys, "play", str(lake_run), "--out", str(tmp_path / "bad.gif"),
                           "--set", "environment.params.map_name=9x9")
    assert code == 2 and "map_name" in err and "9x9" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad.gif").exists()


def test_frozenlake_envs_render_rgb_array_pictures():
    import gymnasium

    for env_id in ("langadapt/FrozenLake-v0", "langadapt/FrozenLakeMaps-v0"):
        env = gymnasium.make(env_id, render_mode="rgb_array", is_slippery=False)
        env.reset(seed=0)
        picture = env.render()
        assert picture.dtype == np.uint8 and picture.shape == (128, 128, 3)
        assert (picture == (210, 40, 40)).all(axis=2).any()  # the agent
        env.step(2)
        assert not np.array_equal(env.render(), picture)  # it moved right
        env.close()


def test_a_raw_frame_caption_shows_the_mission():
    text = caption("[0.0, 1.0, 2.0]", "2 (forward)", 0, "go to the red ball")
    assert text.startswith("Mission: go to the red ball. [0.0, 1.0, 2.0]")
    described = "Mission: go to the red ball. You see a wall."
    assert caption(described, "2", 0, "go to the red ball").count("go to the red ball") == 1
