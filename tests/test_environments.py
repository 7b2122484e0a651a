"""Tests of the Sailing, Maze and CartPole environments (package `environments`)."""

from __future__ import annotations

import importlib
import math
import warnings
from collections import deque
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from langadapt import environments
from langadapt.environments import (
    MAZE_LAYOUTS,
    CartPoleDescriber,
    CartPoleEnv,
    MazeEnv,
    SailingEnv,
    language_for,
)
from langadapt.environments.maze import (
    ACTION_DELTAS,
    ACTION_NAMES,
    MAZE_NAMES,
    shortest_path_actions,
)
from langadapt.environments.rendering import write_png

# The layouts exactly as written in issue 2 (an independent copy of the published mazes).
ISSUE_LAYOUTS = {
    "umaze": ("11111 / 10001 / 10101 / 10101 / 11111", (3, 1), (3, 3), (5, 5)),
    "double_t_maze": (
        "1111111111111 / 1000001000001 / 1110111110111 / 1110111110111 / 1110111110111 / "
        "1110000000111 / 1111110111111 / 1111110111111 / 1111110111111 / 1111111111111",
        (1, 1), (8, 6), (10, 13),
    ),
    "medium": (
        "11111111 / 10010001 / 10010101 / 11000011 / 11101001 / 10000101 / 10010001 / 11111111",
        (1, 1), (6, 6), (8, 8),
    ),
    "large": (
        "111111111 / 100000101 / 101010101 / 100010001 / 101110111 / 100000001 / 111011101 / "
        "100010001 / 101011111 / 101010001 / 100000101 / 111111111",
        (1, 1), (10, 7), (12, 9),
    ),
}

RANDOM_MAZES = [dict(maze="random", width=w, height=h, seed=s)
                for w, h, s in [(5, 5, 0), (6, 8, 1), (13, 9, 7)]]
MAZE_KWARGS = [dict(maze=name) for name in MAZE_LAYOUTS] + RANDOM_MAZES

ENV_CASES = (
    [("langadapt/Sailing-v0", {}), ("langadapt/Sailing-v0", {"reward_shaping": True}),
     ("langadapt/CartPole-v0", {})]
    + [("langadapt/Maze-v0", kwargs) for kwargs in MAZE_KWARGS]
)


def case_id(case: tuple[str, dict]) -> str:
    env_id, kwargs = case
    return env_id.split("/")[1] + "".join(f"-{v}" for v in kwargs.values())


def bfs_path(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> list[int] | None:
    """Shortest action sequence by breadth-first search, written independently of the env."""
    previous = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path = []
            while previous[cell] is not None:
                cell, action = previous[cell]
                path.append(action)
            return path[::-1]
        for action, (dr, dc) in enumerate(ACTION_DELTAS):
            target = (cell[0] + dr, cell[1] + dc)
            if (0 <= target[0] < grid.shape[0] and 0 <= target[1] < grid.shape[1]
                    and grid[target] == 0 and target not in previous):
                previous[target] = (cell, action)
                queue.append(target)
    return None


def rollout(env: gym.Env, seed: int, actions: list[int]) -> list:
    """(obs, reward, terminated, truncated, info) of every step, resetting when an episode ends."""
    obs, info = env.reset(seed=seed)
    record = [(obs.tolist(), info)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        record.append((obs.tolist(), reward, terminated, truncated, info))
        if terminated or truncated:
            obs, info = env.reset()
            record.append((obs.tolist(), info))
    return record


# ---------------------------------------------------------------- gymnasium conformance
@pytest.mark.parametrize("case", ENV_CASES, ids=case_id)
def test_check_env_passes(case):
    env_id, kwargs = case
    env = gym.make(env_id, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    messages = [str(w.message) for w in caught]
    if env_id == "langadapt/CartPole-v0":  # CartPole-v1's own space has infinite velocity bounds
        messages = [m for m in messages if "infinity" not in m]
    assert messages == []


@pytest.mark.parametrize("case", ENV_CASES, ids=case_id)
def test_info_has_legal_moves_and_is_success_on_reset_and_every_step(case):
    env_id, kwargs = case
    env = gym.make(env_id, **kwargs).unwrapped
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    assert info["is_success"] is False
    assert isinstance(info["legal_moves"], list) and info["legal_moves"]
    for _ in range(300):
        action = int(rng.choice(info["legal_moves"]))
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs)
        assert all(type(a) is int for a in info["legal_moves"])
        assert isinstance(info["is_success"], bool)
        assert isinstance(reward, float)
        if terminated or truncated:
            _, info = env.reset()


def test_registration_is_idempotent_and_adds_no_time_limit():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.reload(environments)
        importlib.reload(environments)
    assert not [w for w in caught if "Overriding environment" in str(w.message)]
    for env_id, cls in [("langadapt/Sailing-v0", SailingEnv), ("langadapt/Maze-v0", MazeEnv),
                        ("langadapt/CartPole-v0", CartPoleEnv)]:
        assert env_id in gym.registry
        env = gym.make(env_id)
        assert type(env.unwrapped).__name__ == cls.__name__
        assert env.spec.max_episode_steps is None


@pytest.mark.parametrize("case", ENV_CASES, ids=case_id)
def test_same_seed_same_actions_identical_trajectories(case):
    env_id, kwargs = case
    actions = np.random.default_rng(5).integers(gym.make(env_id, **kwargs).action_space.n,
                                                size=400).tolist()
    first = rollout(gym.make(env_id, **kwargs), 11, actions)
    second = rollout(gym.make(env_id, **kwargs), 11, actions)
    assert first == second


def test_cartpole_seed_changes_start_state():
    env = CartPoleEnv()
    assert env.reset(seed=1)[0].tolist() != env.reset(seed=2)[0].tolist()


# ---------------------------------------------------------------- maze
def test_named_layouts_are_exactly_the_published_ones():
    assert set(MAZE_LAYOUTS) == set(ISSUE_LAYOUTS)
    assert MAZE_NAMES == (*MAZE_LAYOUTS, "random")
    for name, (rows, start, goal, shape) in ISSUE_LAYOUTS.items():
        env = MazeEnv(name)
        expected = np.array([[int(ch) for ch in row] for row in rows.split(" / ")])
        assert env.grid.shape == shape
        assert env.grid.dtype == np.int8
        np.testing.assert_array_equal(env.grid, expected)
        assert (env.start, env.goal, env.maze_name) == (start, goal, name)
        assert env.grid[start] == 0 and env.grid[goal] == 0


def test_each_action_moves_the_way_its_name_says():
    env = MazeEnv(maze="large")
    moved = set()
    for cell in [c for c in env.free_cells() if c != env.goal]:
        for action in env.legal_moves_at(cell):
            env.reset(options={"start": list(cell)})
            obs, *_ = env.step(action)
            drow, dcol = int(obs[0]) - cell[0], int(obs[1]) - cell[1]
            name = ACTION_NAMES[action]
            assert (drow, dcol) == ACTION_DELTAS[action]
            assert ("up" in name, "down" in name) == (drow == -1, drow == 1), name
            assert ("left" in name, "right" in name) == (dcol == -1, dcol == 1), name
            moved.add(action)
    assert moved == set(range(env.action_space.n)) == set(range(len(ACTION_NAMES)))


@pytest.mark.parametrize("kwargs", MAZE_KWARGS, ids=lambda k: "-".join(map(str, k.values())))
def test_shortest_path_reaches_goal_with_expected_return(kwargs):
    env = MazeEnv(**kwargs, step_reward=-0.01, goal_reward=2.0)
    path = bfs_path(env.grid, env.start, env.goal)
    assert path is not None and len(path) >= 1
    obs, info = env.reset(seed=0)
    total = 0.0
    for i, action in enumerate(path):
        assert action in info["legal_moves"]
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        assert terminated == (i == len(path) - 1)
        assert info["is_success"] == terminated
        assert not truncated
    assert env.cell == env.goal
    assert obs.tolist() == [float(env.goal[0]), float(env.goal[1])]
    assert total == pytest.approx(2.0 - 0.01 * (len(path) - 1))


def test_known_shortest_path_lengths():
    # umaze by hand: (3,1) up (2,1) up-right (1,2) down-right (2,3) down (3,3).
    assert len(bfs_path(MazeEnv("umaze").grid, (3, 1), (3, 3))) == 4
    for name in MAZE_LAYOUTS:
        env = MazeEnv(name)
        assert env.free_cells() == sorted(env.free_cells())
        assert all(env.grid[c] == 0 for c in env.free_cells())
        assert len(env.free_cells()) == int((env.grid == 0).sum())


@pytest.mark.parametrize("kwargs", MAZE_KWARGS, ids=lambda k: "-".join(map(str, k.values())))
def test_legal_moves_never_include_a_wall_and_wall_moves_leave_state_unchanged(kwargs):
    env = MazeEnv(**kwargs)
    with pytest.raises(ValueError, match="is the goal cell"):
        env.reset(options={"start": env.goal})
    for cell in env.free_cells():
        if cell == env.goal:
            continue
        free_targets = [a for a, (dr, dc) in enumerate(ACTION_DELTAS)
                        if env.grid[cell[0] + dr, cell[1] + dc] == 0]
        assert env.legal_moves_at(cell) == free_targets
        for action in range(8):
            obs, info = env.reset(options={"start": cell})
            assert info["legal_moves"] == free_targets
            np.testing.assert_array_equal(obs, env.observation_of(cell))
            obs2, reward, terminated, truncated, info2 = env.step(action)
            dr, dc = ACTION_DELTAS[action]
            if action in free_targets:
                assert env.cell == (cell[0] + dr, cell[1] + dc)
            else:
                assert env.cell == cell
                np.testing.assert_array_equal(obs2, obs)
                assert info2["legal_moves"] == info["legal_moves"]
                assert reward == env.step_reward and not terminated


def test_maze_truncates_at_max_steps_and_refuses_to_step_after_the_end():
    env = MazeEnv("umaze", max_steps=3)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset()
    results = [env.step(0) for _ in range(3)]  # (3,1) left is a wall: the agent stays
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results) and not results[-1][4]["is_success"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset()
    assert env.step(2)[3] is False


def test_maze_observation_and_queries():
    env = MazeEnv("medium")
    obs, _ = env.reset()
    assert obs.dtype == np.float32 and obs.tolist() == [1.0, 1.0]
    assert env.observation_space.high.tolist() == [7.0, 7.0]
    other = env.observation_of((1, 1))
    other[0] = 99
    assert env.observation_of((1, 1)).tolist() == [1.0, 1.0]
    assert env.legal_moves_at(obs) == env.legal_moves_at((1, 1))  # an observation works too
    with pytest.raises(ValueError, match=r"\(0, 0\).*not a free cell"):
        env.legal_moves_at((0, 0))
    with pytest.raises(ValueError, match="not a .row, col. pair"):
        env.observation_of((1.5, 1))
    with pytest.raises(ValueError, match="not a free cell"):
        env.reset(options={"start": (0, 3)})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"goal": (1, 1)})
    with pytest.raises(ValueError):
        env.grid[1, 1] = 1  # the grid is read-only: the transition tables cannot go stale


@settings(max_examples=150, deadline=None)
@given(width=st.integers(5, 23), height=st.integers(5, 23), seed=st.integers(0, 2**32 - 1))
def test_random_mazes_are_solvable_connected_and_seeded(width, height, seed):
    env = MazeEnv("random", width=width, height=height, seed=seed, max_steps=width * height)
    grid = env.grid
    assert grid.shape == (height, width)
    assert set(np.unique(grid).tolist()) <= {0, 1}
    assert grid[0].all() and grid[-1].all() and grid[:, 0].all() and grid[:, -1].all()
    assert env.start != env.goal and grid[env.start] == 0 and grid[env.goal] == 0
    path = bfs_path(grid, env.start, env.goal)
    assert path is not None
    # every free cell is reachable from the start
    assert all(bfs_path(grid, env.start, cell) is not None for cell in env.free_cells()[:40])
    again = MazeEnv("random", width=width, height=height, seed=seed)
    np.testing.assert_array_equal(again.grid, grid)
    assert (again.start, again.goal) == (env.start, env.goal)
    env.reset(seed=seed)
    for action in path:
        *_, terminated, truncated, info = env.step(action)
    assert terminated and info["is_success"] and not truncated


def test_random_maze_depends_on_constructor_seed_not_reset_seed():
    grids = {MazeEnv("random", width=15, height=15, seed=s).grid.tobytes() for s in range(10)}
    assert len(grids) == 10
    env = MazeEnv("random", width=15, height=15, seed=3)
    before = env.grid.copy()
    env.reset(seed=99)
    np.testing.assert_array_equal(env.grid, before)
    assert MazeEnv("random").grid.shape == (9, 9)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(maze="spiral"), r'maze="spiral": .*umaze.*double_t_maze.*medium.*large.*rand'),
        (dict(maze="random", width=4, height=9), r"width=4: .*5"),
        (dict(maze="random", width=9, height=3), r"height=3: .*5"),
        (dict(maze="random", width=9.5), r"width=9.5: .*integer"),
        (dict(maze="random", seed=-1), r"seed=-1: .*0"),
        (dict(maze="umaze", width=7), r"width=7.*only to maze='random'"),
        (dict(max_steps=-5), r"max_steps=-5: .*1"),
        (dict(max_steps=0), r"max_steps=0: .*1"),
        (dict(step_reward=float("nan")), r"step_reward=NaN: .*finite"),
        (dict(render_mode="human"), r'render_mode="human": .*rgb_array.*ansi'),
    ],
)
def test_maze_bad_parameters(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        MazeEnv(**kwargs)


@pytest.mark.parametrize("env_factory", [MazeEnv, SailingEnv, CartPoleEnv],
                         ids=["maze", "sailing", "cartpole"])
@pytest.mark.parametrize("action", [-1, 8, 2, 1.0, "1", None, True, np.array([1])])
def test_actions_outside_the_space_are_rejected(env_factory, action):
    env = env_factory()
    n = env.action_space.n
    env.reset(seed=0)
    if isinstance(action, int) and not isinstance(action, bool) and 0 <= action < n:
        env.step(action)  # 2 is legal for the maze: nothing to reject
        return
    with pytest.raises(ValueError, match=rf"action .* \[0, {n - 1}\]"):
        env.step(action)


@pytest.mark.parametrize("env_factory", [MazeEnv, SailingEnv, CartPoleEnv],
                         ids=["maze", "sailing", "cartpole"])
def test_numpy_integer_actions_are_accepted(env_factory):
    env = env_factory()
    env.reset(seed=0)
    env.step(np.int64(1))
    env.step(np.array(0))


# ---------------------------------------------------------------- sailing
def speed(theta: float) -> float:
    return 1 - math.exp(-theta**2 / (math.pi / 12))


def test_sailing_one_step_matches_the_formulas():
    env = SailingEnv()
    obs, info = env.reset(seed=0)
    assert obs.tolist() == [0.0, 0.0] and (env.x, env.y, env.theta) == (0.0, 0.0, 0.0)
    assert info == {"legal_moves": [0, 1], "is_success": False, "y": 0.0}
    obs, reward, terminated, truncated, info = env.step(1)
    v = 1 - math.exp(-(0.1**2) / (math.pi / 12))
    assert env.theta == 0.1
    assert env.x == pytest.approx(v * math.sin(0.1), abs=1e-12)
    assert env.y == pytest.approx(v * math.cos(0.1), abs=1e-12)
    assert obs.dtype == np.float32
    assert obs.tolist() == pytest.approx([v * math.sin(0.1), 0.1], abs=1e-7)
    assert (reward, terminated, truncated) == (0.0, False, False)
    # a second step, turning back: heading 0.0 has zero speed
    env.step(0)
    assert env.theta == 0.0 and env.x == pytest.approx(v * math.sin(0.1), abs=1e-12)


def test_sailing_heading_is_rounded_to_one_decimal():
    env = SailingEnv()
    env.reset()
    for _ in range(7):
        env.step(1)
    assert env.theta == 0.7  # not 0.7000000000000001
    for _ in range(10):
        env.step(0)
    assert env.theta == -0.3


def test_sailing_shaping_reward_is_upwind_speed_over_ten():
    env = SailingEnv(reward_shaping=True)
    env.reset()
    for action, theta in [(1, 0.1), (1, 0.2), (0, 0.1), (0, 0.0), (0, -0.1)]:
        _, reward, *_ = env.step(action)
        assert reward == pytest.approx(speed(theta) * math.cos(theta) / 10)


def steer(env: SailingEnv, target: float) -> int:
    """Turn towards `target` heading (holding it means alternating around it)."""
    return 1 if env.theta < target else 0


def run_policy(env: SailingEnv, policy) -> tuple[list[float], dict, bool, bool]:
    env.reset(seed=0)
    rewards = []
    while True:
        _, reward, terminated, truncated, info = env.step(policy(env))
        rewards.append(reward)
        if terminated or truncated:
            return rewards, info, terminated, truncated


def test_sailing_bank_terminal():
    env = SailingEnv()
    rewards, info, terminated, truncated = run_policy(env, lambda e: steer(e, 1.0))
    assert terminated and not truncated and info["termination"] == "bank"
    assert env.x > 10 and env.y < 25
    assert rewards[-1] == -1.0 and set(rewards[:-1]) == {0.0}
    assert not info["is_success"]


def test_sailing_heading_terminal():
    env = SailingEnv()
    rewards, info, terminated, _ = run_policy(env, lambda e: 1)
    assert terminated and info["termination"] == "heading"
    assert env.theta == 1.6 and abs(env.x) <= 10 and len(rewards) == 16
    assert rewards[-1] == -1.0 and not info["is_success"]


def tacking(env: SailingEnv) -> int:
    """Hold heading +-0.8 and go about whenever the boat is 5 from the centre line."""
    if env.x > 5:
        tacking.target = -0.8
    elif env.x < -5:
        tacking.target = 0.8
    return steer(env, tacking.target)


def test_sailing_tacking_policy_reaches_the_finish_line():
    env = SailingEnv()
    tacking.target = 0.8
    rewards, info, terminated, truncated = run_policy(env, tacking)
    assert terminated and not truncated and info["termination"] == "finish"
    assert info["is_success"] and rewards[-1] == 1.0 and sum(rewards) == 1.0
    assert env.y > 25 and abs(env.x) <= 10
    assert min(x for x, _ in env.track) < -5 < 5 < max(x for x, _ in env.track)  # it tacked
    assert len(rewards) < 60


def test_sailing_truncates_at_max_steps():
    env = SailingEnv(max_steps=50)
    rewards, info, terminated, truncated = run_policy(env, lambda e: steer(e, 0.05))
    assert truncated and not terminated and len(rewards) == 50
    assert not info["is_success"] and "termination" not in info
    with pytest.raises(RuntimeError):
        env.step(0)


def test_sailing_terminal_order_bank_before_finish():
    env = SailingEnv(y_limit=5.0)
    env.reset(options={"x": 9.5, "y": 4.8, "theta": 0.8})
    *_, terminated, _, info = env.step(1)  # heading 0.9: both past the bank and the line
    assert env.x > 10 and env.y > 5
    assert terminated and info["termination"] == "bank" and not info["is_success"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=200))
def test_sailing_observations_stay_in_the_space(actions):
    env = SailingEnv()
    env.reset()
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(action)
        assert env.observation_space.contains(obs)
        assert obs.tolist() == pytest.approx([env.x, env.theta], abs=1e-5)
        if terminated or truncated:
            break


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(y_limit=0), r"y_limit=0: .*greater than 0"),
        (dict(y_limit=-3.0), r"y_limit=-3.0: .*greater than 0"),
        (dict(y_limit="far"), r'y_limit="far": expected a number'),
        (dict(max_steps=-1), r"max_steps=-1: .*1"),
        (dict(max_steps=2.5), r"max_steps=2.5: .*integer"),
        (dict(reward_shaping="yes"), r'reward_shaping="yes": expected true or false'),
        (dict(render_mode="human"), r'render_mode="human": .*ansi'),
    ],
)
def test_sailing_bad_parameters(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        SailingEnv(**kwargs)


def test_sailing_bad_reset_options():
    env = SailingEnv()
    with pytest.raises(ValueError, match="terminal state"):
        env.reset(options={"x": 12.0})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"speed": 1.0})


# ---------------------------------------------------------------- cartpole
def test_cartpole_follows_gymnasium_cartpole_v1_exactly():
    ours = CartPoleEnv()
    reference = gym.make("CartPole-v1").unwrapped
    assert ours.observation_space == reference.observation_space
    actions = np.random.default_rng(3).integers(2, size=200).tolist()
    for seed in (0, 7):
        obs, info = ours.reset(seed=seed)
        ref_obs, _ = reference.reset(seed=seed)
        assert info["legal_moves"] == [0, 1]
        np.testing.assert_array_equal(obs, ref_obs)
        for action in actions:
            obs, reward, terminated, truncated, info = ours.step(action)
            ref_obs, ref_reward, ref_terminated, _, _ = reference.step(action)
            np.testing.assert_array_equal(obs, ref_obs)
            assert (reward, terminated) == (ref_reward, ref_terminated)
            assert ours.state == tuple(float(v) for v in reference.state)
            if terminated:
                assert not info["is_success"]
                break


def test_cartpole_success_means_reaching_max_steps_upright():
    env = CartPoleEnv(max_steps=200)
    env.reset(seed=0)
    steps = 0
    while True:
        _, _, theta, theta_dot = env.state
        *_, terminated, truncated, info = env.step(1 if theta + 0.5 * theta_dot > 0 else 0)
        steps += 1
        if terminated or truncated:
            break
    assert truncated and not terminated and info["is_success"] and steps == 200
    env.reset(seed=0)
    while True:
        *_, terminated, truncated, info = env.step(1)
        if terminated or truncated:
            break
    assert terminated and not info["is_success"]


def test_cartpole_bad_parameters():
    with pytest.raises(ValueError, match=r"max_steps=-5: .*1"):
        CartPoleEnv(max_steps=-5)
    with pytest.raises(ValueError, match=r'render_mode="human": .*ansi'):
        CartPoleEnv(render_mode="human")
    assert CartPoleEnv().state is None


# ---------------------------------------------------------------- rendering
def test_maze_pictures():
    env = MazeEnv("umaze", render_mode="ansi")
    env.reset()
    assert env.render() == "#####\n#...#\n#.#.#\n#A#G#\n#####"
    env.step(2)
    assert env.render().splitlines()[2] == "#A#.#" and env.render().splitlines()[3] == "#S#G#"
    env = MazeEnv("umaze", render_mode="rgb_array")
    env.reset()
    image = env.render()
    size = env.cell_pixels
    assert image.shape == (5 * size, 5 * size, 3) and image.dtype == np.uint8
    assert image[int(3.5 * size), int(1.5 * size)].tolist() == [210, 40, 40]  # agent
    assert image[int(3.5 * size), int(3.5 * size)].tolist() == [70, 180, 80]  # goal
    assert image[int(0.5 * size), int(0.5 * size)].tolist() == [60, 60, 70]  # wall
    assert MazeEnv().render() is None


def test_sailing_pictures():
    env = SailingEnv(render_mode="ansi")
    env.reset()
    lines = env.render().splitlines()
    assert lines[0] == "|" + "=" * 21 + "|"
    assert lines[13] == "|" + " " * 10 + "^" + " " * 10 + "|"
    assert lines[-1].startswith("x=+0.00 y=0.00 theta=+0.0")
    for _ in range(6):
        env.step(1)
    assert any("/" in line for line in env.render().splitlines()[:-1])
    env = SailingEnv(render_mode="rgb_array")
    env.reset()
    before = env.render()
    env.step(1)
    env.step(1)
    after = env.render()
    assert before.shape == (300, 240, 3) and before.dtype == np.uint8
    assert (before != after).any()


def test_cartpole_pictures_without_pygame():
    env = CartPoleEnv(render_mode="rgb_array")
    env.use_pygame = False
    env.reset(seed=0)
    image = env.render()
    assert image.shape == (400, 600, 3) and image.dtype == np.uint8
    assert image[300, 5].tolist() == [0, 0, 0]  # the track
    assert (image == np.array([202, 152, 101], dtype=np.uint8)).all(axis=2).sum() > 500  # pole
    text = CartPoleEnv(render_mode="ansi")
    text.reset(seed=0)
    lines = text.render().splitlines()
    assert len(lines) == 3 and lines[1].count("C") == 1 and lines[2].startswith("x=")


def test_cartpole_delegates_to_gymnasium_renderer_when_pygame_is_installed():
    pytest.importorskip("pygame")
    env = CartPoleEnv(render_mode="rgb_array")
    assert env.use_pygame
    env.reset(seed=0)
    assert env.render().shape == (400, 600, 3)


def test_write_png_round_trip(tmp_path):
    # was a check of the hand-written PNG's chunks; the file is matplotlib's now: read it back
    import matplotlib.image

    image = np.random.default_rng(0).integers(0, 256, size=(7, 5, 3), dtype=np.uint8)
    path = write_png(tmp_path / "x.png", image)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    back = matplotlib.image.imread(path)
    np.testing.assert_array_equal(np.round(back[:, :, :3] * 255).astype(np.uint8), image)
    with pytest.raises(ValueError, match="uint8"):
        write_png(tmp_path / "y.png", image.astype(np.float32))


def test_pictures_script_writes_one_small_png_per_environment(tmp_path):
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "scripts" / "pictures.py"
    spec = importlib.util.spec_from_file_location("pictures_script", script)
    pictures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pictures)
    written = pictures.render_all(tmp_path)
    assert sorted(p.name for p in written) == sorted(
        ["sailing.png", "cartpole.png"] + [f"maze_{name}.png" for name in MAZE_LAYOUTS]
    )
    for path in written:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 50_000
    first = (tmp_path / "sailing.png").read_bytes()
    assert pictures.main([str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "sailing.png").read_bytes() == first  # deterministic


def test_shortest_path_actions_matches_the_independent_bfs():
    for name in MAZE_NAMES:
        env = MazeEnv(maze=name)
        for cell in env.free_cells()[:25]:
            expected = bfs_path(env.grid, cell, env.goal)
            got = shortest_path_actions(env.grid, cell, env.goal)
            assert (got is None) == (expected is None)
            if got is None:
                continue
            assert len(got) == len(expected)
            env.reset(options={"start": cell} if cell != env.goal else None)
            if cell == env.goal:
                continue
            terminated = False
            for action in got:
                assert not terminated
                _, _, terminated, _, _ = env.step(action)
            assert terminated


@pytest.mark.parametrize("env_id", ["langadapt/Sailing-v0", "langadapt/Maze-v0",
                                    "langadapt/CartPole-v0"])
def test_reset_rejects_bad_options(env_id):
    env = gym.make(env_id)
    with pytest.raises(ValueError, match="reset options is 'x', expected a dict"):
        env.reset(options="x")
    with pytest.raises(ValueError, match=r"unknown reset options \['bogus'\]"):
        env.reset(options={"bogus": 1})
    env.reset(options={})


def test_sailing_step_speed_is_boat_speed():
    from langadapt.environments.sailing import boat_speed

    env = SailingEnv()
    env.reset(seed=0, options={"theta": 0.3})
    x0, y0 = env.x, env.y
    env.step(1)
    speed = boat_speed(env.theta)
    assert env.x - x0 == pytest.approx(speed * math.sin(env.theta))
    assert env.y - y0 == pytest.approx(speed * math.cos(env.theta))


@pytest.mark.parametrize(("make", "message"), [
    (lambda: CartPoleDescriber(decimals=7),
     r"^decimals=7: .*less than or equal to 6$"),
    (lambda: CartPoleDescriber(style="words"),
     r"""^style="words": .*'bins' or 'numbers'$"""),
    (lambda: language_for(gym.make("langadapt/CartPole-v0"), decimals=True),
     r"^decimals=true: .*valid integer$"),
])
def test_bad_describer_arguments_name_the_argument_and_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()
