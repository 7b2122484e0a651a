"""Continuous control: linear policies and tables over discretised actions on Box actions
(hand-computed), ARS's update on a quadratic toy, the proposal parser, LLM replies as counted
fallbacks, family / action-space mismatches, and the experiment files run shrunk."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml
from fake_ollama import FakeOllama
from gymnasium import spaces

import langadapt  # noqa: F401  (registers the roles)
from langadapt.agents import LinearBoxPolicy, ars_update, clip_range, make_agent, train

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------ the linear policy
def test_linear_policy_actions_are_clipped_to_the_space_2x3():
    """W = [[1, 2], [-0.5, 0.25]], b = [0.5, -0.1]; action space [-1, 1] x [-1, 0.5]."""
    space = spaces.Box(np.array([-1.0, -1.0], np.float32), np.array([1.0, 0.5], np.float32))
    low, high = clip_range(space)
    policy = LinearBoxPolicy([[1.0, 2.0, 0.5], [-0.5, 0.25, -0.1]], low, high)
    # [1, 2]: 1 + 4 + 0.5 = 5.5 -> 1 (clipped);  -0.5 + 0.5 - 0.1 = -0.1
    assert policy.action(np.array([1.0, 2.0])).tolist() == pytest.approx([1.0, -0.1])
    # [-1, 0]: -1 + 0.5 = -0.5;  0.5 - 0.1 = 0.4
    assert policy.action(np.array([-1.0, 0.0])).tolist() == pytest.approx([-0.5, 0.4])
    # [0, 4]: 8.5 -> 1;  1 - 0.1 = 0.9 -> 0.5 (clipped)
    assert policy.action(np.array([0.0, 4.0])).tolist() == pytest.approx([1.0, 0.5])
    # [0, -3]: -6 + 0.5 = -5.5 -> -1 (clipped);  -0.75 - 0.1 = -0.85
    action = policy.action(np.array([0.0, -3.0]))
    assert action.tolist() == pytest.approx([-1.0, -0.85]) and space.contains(action)
    # normalised by mean [1, 0], std [2, 0]: [3, 5] -> s = [1, 0] (a zero std counts 0)
    normalised = LinearBoxPolicy(policy.weights, low, high, np.array([1.0, 0.0]),
                                 np.array([2.0, 0.0]))
    assert normalised.action(np.array([3.0, 5.0])).tolist() == pytest.approx([1.0, -0.6])


def test_clip_range_of_an_infinite_box_asks_for_bounds():
    space = spaces.Box(-np.inf, np.inf, (2,))
    with pytest.raises(ValueError, match="infinite bounds: give action_bounds"):
        clip_range(space)
    low, high = clip_range(space, [[-1, 1], [0, 3]])
    assert low.tolist() == [-1, 0] and high.tolist() == [1, 3]
    with pytest.raises(ValueError, match="expected 2 pairs"):
        clip_range(space, [[-1, 1]])


# ------------------------------------------------------------------ ARS
def test_ars_update_on_a_quadratic_improves_as_the_formula_says():
    """f(theta) = -|theta - target|^2; the step is alpha / (b sigma_R) sum (r+ - r-) delta
    over the top b directions by max(r+, r-), and f improves."""
    target = np.array([[1.0, -2.0, 0.5]])
    theta = np.zeros((1, 3))

    def f(t: np.ndarray) -> float:
        return -float(((t - target) ** 2).sum())

    nu, alpha = 0.1, 0.05
    deltas = np.array([[[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]], [[0.0, 0.0, 1.0]],
                       [[1.0, 1.0, 1.0]]])
    plus = [f(theta + nu * d) for d in deltas]
    minus = [f(theta - nu * d) for d in deltas]
    # by hand: f(0) = -5.25; r+ - r- = 4 nu (target . delta) = 0.4, -0.8, 0.2, -0.2;
    # max(r+, r-) ranks directions 1 (-5.06+...), 0, 3, 2; top 2 = directions 1 and 0
    best2 = [1, 0]
    used = np.array([plus[k] for k in best2] + [minus[k] for k in best2])
    step = sum((plus[k] - minus[k]) * deltas[k] for k in best2)
    expected = theta + alpha / (2 * used.std()) * step
    new = ars_update(theta, deltas, plus, minus, alpha, top=2)
    assert new == pytest.approx(expected)
    assert new[0, 2] == 0.0  # direction 2 is not among the top 2
    assert f(new) > f(theta)
    everything = ars_update(theta, deltas, plus, minus, alpha)  # b = N: ARS V1 / V2
    all_used = np.array(plus + minus)
    assert everything == pytest.approx(
        theta + alpha / (4 * all_used.std()) * sum((p - m) * d for p, m, d in
                                                  zip(plus, minus, deltas, strict=True)))
    assert f(everything) > f(theta)


def test_ars_trains_on_pendulum_with_its_own_episode_budget(tmp_path):
    env = gym.make("Pendulum-v1")
    agent = make_agent("ars", env.observation_space, env.action_space, seed=0, iterations=3,
                       directions=2, top_directions=1)
    records = train(agent, env, progress=False, seed=0)
    assert len(records) == 3 * 2 * 2 and agent.finished
    assert agent.iteration == 3 and np.abs(agent.theta).sum() > 0
    obs, _ = env.reset(seed=1)
    action = agent.act(obs, None, explore=False)
    assert env.action_space.contains(action)
    path = tmp_path / "ars.pt"
    agent.save(path)
    other = make_agent("ars", env.observation_space, env.action_space, seed=5, iterations=3,
                       directions=2, top_directions=1)
    other.load(path)
    assert other.act(obs, None, explore=False).tolist() == action.tolist()


def test_ars_refuses_discrete_actions_and_a_top_beyond_the_directions():
    env = gym.make("langadapt/CartPole-v0")
    with pytest.raises(ValueError, match="Discrete"):
        make_agent("ars", env.observation_space, env.action_space)
    box = spaces.Box(-1, 1, (1,))
    with pytest.raises(ValueError, match="top_directions is 5, expected at most directions"):
        make_agent("ars", box, box, directions=4, top_directions=5)


# ------------------------------------------------------------------ the LLM's proposals
def _pendulum_search(fake: FakeOllama, rounds: int, **settings):
    env = gym.make("Pendulum-v1")
    config = {"family": "linear", "rounds": rounds, "evaluation_episodes": 1,
              "initial": "zeros", "structured_output": False,
              "llm": {"backend": "ollama", "model": "llama3.2", "host": fake.host,
                      "cache_path": None, "retries": 0, "breaker_failures": 100}} | settings
    agent = make_agent("llm_policy_search", env.observation_space, env.action_space, seed=0,
                       **config)
    return agent, train(agent, env, progress=False, seed=0)


def test_parse_proposal_on_valid_short_long_and_non_finite_replies():
    from langadapt.roles.policy_families import parse_proposal

    def parse(reply: str):  # Pendulum: 1 action dimension, 3 observation dimensions
        return parse_proposal(reply, "linear", 1, 0, 3)

    assert parse('{"weights": [[1, -2.5, 0, 0.25]]}').weights.tolist() == [[1, -2.5, 0, 0.25]]
    for short in ('{"weights": [[1, 2, 3]]}', '{"weights": []}'):
        with pytest.raises(ValueError, match="1 rows of 4 numbers"):
            parse(short)
    for long in ('{"weights": [[1, 2, 3, 4, 5]]}', '{"weights": [[1, 2, 3, 4], [1, 2, 3, 4]]}'):
        with pytest.raises(ValueError, match="1 rows of 4 numbers"):
            parse(long)
    for non_finite in ('{"weights": [[NaN, 0, 0, 0]]}', '{"weights": [[1e999, 0, 0, 0]]}',
                       '{"weights": [[Infinity, 0, 0, 0]]}'):
        with pytest.raises(ValueError, match="not a number JSON allows|finite numbers only"):
            parse(non_finite)


def test_bad_replies_on_a_box_are_counted_fallbacks_and_a_good_one_is_kept():
    replies = iter([
        json.dumps({"weights": [[1, 2, 3]]}),             # round 1: short ...
        json.dumps({"weights": [[1, 2, 3, 4, 5]]}),       # ... corrected, still long: skipped
        '{"weights": [[NaN, 0, 0, 0]]}',                   # round 2: non-finite ...
        json.dumps({"weights": [[0, 0, 0, 2.0]]}),         # ... corrected: a constant torque
    ])
    with FakeOllama(reply=lambda _body: next(replies)) as fake:
        agent, records = _pendulum_search(fake, rounds=2)
    log = agent.round_log
    assert [e["skipped"] for e in log] == [False, True, False]
    assert agent.counters["skipped_rounds"] == 1 and agent.counters["corrections"] == 2
    assert "1 rows of 4 numbers" in log[1]["error"]
    assert sum(r.phase == "train" for r in records) == 2  # the skipped round ran nothing
    assert log[2]["proposal"] == [[0, 0, 0, 2.0]]
    obs, _ = gym.make("Pendulum-v1").reset(seed=0)
    kept = agent.act(obs, None, explore=False)
    assert kept.dtype == np.float32 and kept.shape == (1,)
    assert agent.best_return == max(e["evaluated_return"] for e in log if not e["skipped"])
    assert "action 0 in [-2, 2]" in fake.chat_bodies[0]["messages"][0]["content"]
    assert "Best episodes so far" in fake.chat_bodies[2]["messages"][-1]["content"]
    assert "1 rows, one per action dimension" in fake.chat_bodies[-1]["messages"][-1]["content"]


@pytest.mark.parametrize(("family", "space", "settings", "named"), [
    ("tabular", spaces.Box(-2, 2, (1,)), {},
     r"family tabular does not fit action space Box\(-2.0, 2.0, \(1,\), float32\) without "
     "action_bins: add action_bins"),
    ("tabular", spaces.Box(-np.inf, np.inf, (2,)), {"action_bins": 3},
     "infinite bounds: give action_bounds"),
    ("tabular", spaces.Box(-2, 2, (2,)), {"action_bins": [3, 3, 3]},
     "action_bins is .3, 3, 3.*, expected one int or 2 ints"),
    ("tabular", spaces.Box(-2, 2, (1,)), {"action_bins": 3, "normalise": True},
     "normalise applies to linear policies"),
    ("linear", spaces.Box(-2, 2, (1,)), {"action_bins": 3}, "action_bins applies to family: "
     "tabular"),
    ("tabular", spaces.Discrete(2), {"action_bins": 3}, "apply to a Box action space, not to "
     "Discrete"),
    ("linear", spaces.MultiBinary(3), {}, "family linear does not fit action space MultiBinary"),
    ("linear", spaces.Box(-np.inf, np.inf, (2,)), {}, "infinite bounds: give action_bounds"),
])
def test_a_family_that_does_not_fit_the_action_space_is_one_line(family, space, settings,
                                                                  named):
    obs = spaces.Box(-1, 1, (3,))
    with pytest.raises(ValueError, match=named) as error:
        make_agent("llm_policy_search", obs, space, family=family, proposer="random",
                   bins=[3] * 3 if family == "tabular" else None, **settings)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="action_bins is 1, expected ints of at least 2"):
        make_agent("llm_policy_search", obs, spaces.Box(-1, 1, (1,)), proposer="random",
                   bins=[3] * 3, action_bins=1)


# ------------------------------------------------------------------ tables on Box actions
def test_a_table_over_discretised_states_and_actions_acts_as_computed_by_hand(tmp_path):
    """States: 2 x 2 bins of [-1, 1]^2 (state = 2 i0 + i1). Actions: 3 values of [-1, 1] and
    2 of [0, 2], action = 2 j0 + j1: 0 (-1, 0), 1 (-1, 2), 2 (0, 0), 3 (0, 2), 4 (1, 0),
    5 (1, 2). Table [5, 0, 3, 2]."""
    from langadapt.roles.policy_families import TabularPolicy, parse_proposal

    space = spaces.Box(np.array([-1, 0], np.float32), np.array([1, 2], np.float32))
    agent = make_agent("llm_policy_search", spaces.Box(-1, 1, (2,)), space, proposer="random",
                       bins=[2, 2], action_bins=[3, 2], initial="zeros")
    assert agent.n_states == 4 and agent.n_choices == 6
    agent.candidate = TabularPolicy([5, 0, 3, 2], 6)
    for obs, action in (([-0.5, -0.5], [1, 2]), ([-0.5, 0.5], [-1, 0]), ([0.5, -0.5], [0, 2]),
                        ([0.5, 0.5], [0, 0])):  # states 0, 1, 2, 3
        got = agent.act(np.array(obs, np.float32))
        assert got.tolist() == action and got.dtype == np.float32 and space.contains(got)
    agent.record_step(np.array([0.5, -0.5]), np.array([0, 2], np.float32), 1.0)
    assert agent._steps[-1] == (2, 3, 1.0)  # trajectories show (state, action index, reward)
    layout = agent.prompt_variables()["actions"]
    assert "action = j0*2 + j1" in layout and "j0 is the value of action 0 (0: -1, 1: 0, 2: 1)" \
        in layout and "j1 is the value of action 1 (0: 0, 1: 2)" in layout
    schema = agent.schema["properties"]["actions"]
    assert schema["items"]["enum"] == [0, 1, 2, 3, 4, 5]
    assert schema["minItems"] == schema["maxItems"] == 4

    def parse(reply: str):
        return parse_proposal(reply, "tabular", agent.n_choices, agent.n_states)

    assert parse('{"actions": [5, 0, 3, 2]}').to_json() == [5, 0, 3, 2]
    for wrong, says in (("[5, 0, 3]", "3 entries, expected 4"), ("[5, 0, 3, 2, 1]", "5 entries"),
                        ("[5, 0, 6, 2]", "not actions 0..5 at states .2."),
                        ("[-1, 0, 3, 2]", "at states .0.")):
        with pytest.raises(ValueError, match=says):
            parse(f'{{"actions": {wrong}}}')
    for _ in range(20):  # random search draws tables of the grid's indices
        assert agent._random_policy().table.max() < 6
    agent.best, agent.best_return = TabularPolicy([5, 0, 3, 2], 6), 1.0
    agent.save(tmp_path / "table.pt")
    other = make_agent("llm_policy_search", spaces.Box(-1, 1, (2,)), space, proposer="random",
                       bins=[2, 2], action_bins=[3, 2])
    other.load(tmp_path / "table.pt")
    assert other.act(np.array([-0.5, -0.5]), None, explore=False).tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"saved with action_bins=\[3, 2\], but this agent"):
        make_agent("llm_policy_search", spaces.Box(-1, 1, (2,)), space, proposer="random",
                   bins=[2, 2], action_bins=3).load(tmp_path / "table.pt")


def test_bad_tables_on_a_box_are_counted_fallbacks_and_a_good_one_is_kept():
    """Pendulum, 8 states (2 bins per dimension), 5 torques -2, -1, 0, 1, 2."""
    replies = iter([
        json.dumps({"actions": [4] * 7}),                 # round 1: short ...
        json.dumps({"actions": [5] * 8}),                 # ... corrected, out of range: skipped
        json.dumps({"actions": [4] * 9}),                 # round 2: long ...
        json.dumps({"actions": [4] * 8}),                 # ... corrected: torque 2 everywhere
    ])
    with FakeOllama(reply=lambda _body: next(replies)) as fake:
        agent, records = _pendulum_search(fake, rounds=2, family="tabular", bins=[2] * 3,
                                          action_bins=5)
    log = agent.round_log
    assert [e["skipped"] for e in log] == [False, True, False]
    assert agent.counters["skipped_rounds"] == 1 and agent.counters["corrections"] == 2
    assert "7 entries, expected 8" in fake.chat_bodies[1]["messages"][-1]["content"]
    assert "not actions 0..4 at states [0, 1" in log[1]["error"]  # the correction's error
    assert sum(r.phase == "train" for r in records) == 2 and log[2]["proposal"] == [4] * 8
    obs, _ = gym.make("Pendulum-v1").reset(seed=0)
    if agent.best_return == log[2]["evaluated_return"]:  # kept only when it scored higher
        assert agent.act(obs, None, explore=False).tolist() == [2.0]
    assert agent.best_return == max(e["evaluated_return"] for e in log if not e["skipped"])
    system = fake.chat_bodies[0]["messages"][0]["content"]
    assert "j0 is the value of action 0 (0: -2, 1: -1, 2: 0, 3: 1, 4: 2)" in system
    assert "exactly 8 action indices, one per state in state order, each 0 to 4" in system
    assert ",0," in fake.chat_bodies[2]["messages"][-1]["content"]  # round 0's action index


def test_action_bounds_clip_an_infinite_box_and_normalise_false_acts_on_raw_observations():
    obs_space, action_space = spaces.Box(-5, 5, (2,)), spaces.Box(-np.inf, np.inf, (1,))
    agent = make_agent("llm_policy_search", obs_space, action_space, family="linear",
                       proposer="random", action_bounds=[[-0.5, 0.5]], normalise=False,
                       initial="zeros")
    agent.candidate = agent._own(agent.candidate.__class__(  # weights 10 * x0
        [[10.0, 0.0, 0.0]], agent.low, agent.high))
    assert agent.act(np.array([1.0, 0.0])).tolist() == [0.5]
    assert agent.act(np.array([0.01, 0.0])).tolist() == pytest.approx([0.1])
    with pytest.raises(ValueError, match="apply to a Box action space, not to Discrete"):
        make_agent("llm_policy_search", obs_space, spaces.Discrete(2), family="linear",
                   proposer="random", normalise=True)


# ------------------------------------------------------------------ experiment files
CONTINUOUS_FILES = ["policy_search_pendulum", "policy_search_mountaincar_continuous",
                    "policy_search_swimmer", "policy_search_bipedalwalker"]


@pytest.mark.parametrize("name", CONTINUOUS_FILES)
def test_continuous_experiment_files_run_shrunk(name, tmp_path, monkeypatch):
    """Each file with 2 rounds / 1 iteration, one seed, the LLMs behind the fake server: every
    row trains and the search's rows and ARS's rows share the results folder."""
    from langadapt.experiments.config import load_config
    from langadapt.experiments.runner import run_experiment

    if name.endswith("swimmer"):
        pytest.importorskip("mujoco", reason="the mujoco extra (in dev) runs Swimmer-v5")
    if name.endswith("bipedalwalker"):
        pytest.importorskip("Box2D", reason="the box2d extra (in dev) runs BipedalWalker-v3")

    data = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    assert [a["type"] for a in data["agents"][:3]] == ["llm_policy_search"] * 2 + ["ars"]
    searches = [a for a in data["agents"] if a["type"] == "llm_policy_search"]
    llms = [a for a in searches if a["params"].get("proposer", "llm") == "llm"]
    assert all(a["params"]["llm"]["backend"] == "llamacpp" for a in llms)
    assert data["seeds"] >= 3
    episodes = {(a["params"]["rounds"] + 1) * a["params"]["evaluation_episodes"]
                for a in searches}
    ars = data["agents"][2]["params"]
    assert episodes == {2 * ars["directions"] * ars["iterations"]}  # the same budget
    with FakeOllama() as fake:  # schema-fitting replies
        for agent in searches:
            agent["params"] = {**agent["params"], "rounds": 2, "evaluation_episodes": 1}
        for agent in llms:
            agent["params"]["llm"] = {"backend": "ollama", "model": "llama3.2", "host": fake.host}
        data["agents"][2]["params"] |= {"iterations": 1, "directions": 1, "top_directions": 1}
        data |= {"seeds": [0], "cache_dir": str(tmp_path / "cache"),
                 "evaluation": {"final_episodes": 1}}
        path = tmp_path / "shrunk.yaml"
        path.write_text(yaml.safe_dump(data))
        monkeypatch.setenv("LANGADAPT_CACHE_DIR", str(tmp_path / "llm"))
        out = run_experiment(load_config(path), tmp_path / "out", progress=False,
                             log=lambda _: None)
    assert fake.chat_requests == 2 * len(llms)
    with open(out / "episodes.csv") as handle:
        rows = list(csv.DictReader(handle))
    labels = [a["label"] for a in data["agents"]]
    train_rows = {a: sum(r["phase"] == "train" for r in rows if r["agent"] == a) for a in labels}
    assert train_rows == {a: 2 if a == "ars" else 3 for a in labels}
    assert all(math.isfinite(float(r["return"])) for r in rows)
    assert {r["agent"] for r in rows if r["phase"] == "final"} == set(train_rows)


def test_a_missing_mujoco_or_box2d_extra_is_one_line_naming_the_install(monkeypatch, tmp_path):
    import importlib.util

    from langadapt.experiments.config import load_config
    from langadapt.experiments.schema import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("mujoco", "Box2D") else real(name, *a))
    for env_id, extra in (("Swimmer-v5", "mujoco"), ("BipedalWalker-v3", "box2d")):
        data = yaml.safe_load((CONFIGS / "policy_search_pendulum.yaml").read_text())
        data["environment"] = {"id": env_id}
        path = tmp_path / f"{extra}.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError) as error:
            load_config(path)
        assert f"pip install 'langadapt[{extra}]'" in str(error.value)
        assert f"environment {env_id} needs" in str(error.value)
    assert load_config(CONFIGS / "policy_search_pendulum.yaml")  # classic control: no extra


# ------------------------------------------------------------------ language states
def test_pendulum_and_mountain_car_describers_say_what_is_true_of_the_state():
    from langadapt.environments import language_for

    pendulum = language_for("Pendulum-v1")
    upright_left = np.array([math.cos(0.6), math.sin(0.6), -1.5], dtype=np.float32)
    assert pendulum.describe(upright_left) == (
        "The pendulum is 34 degrees counterclockwise from upright, above the pivot. It turns "
        "clockwise at 1.50 rad/s, toward upright.")
    hanging = np.array([-1.0, 0.0, 0.0], dtype=np.float32)
    assert pendulum.describe(hanging) == (
        "The pendulum is 180 degrees counterclockwise from upright, below the pivot. It is "
        "almost at rest.")
    assert "away from upright" in pendulum.describe(np.array([0.0, -1.0, -2.0]))
    assert pendulum.describe(np.array([1.0, 0.0, 0.0])) == (
        "The pendulum points straight up. It is almost at rest.")
    assert pendulum.action_names == ("torque",) and "from -2 to 2" in pendulum.task
    with pytest.raises(ValueError, match="angular velocity 9.0 is outside"):
        pendulum.describe(np.array([1.0, 0.0, 9.0]))
    car = language_for("MountainCarContinuous-v0")
    assert car.describe(np.array([-0.9, -0.01])) == (
        "The car is at position -0.90, on the left slope, 1.35 left of the flag. It moves left "
        "at 0.010 per step.")
    assert "at the bottom of the valley" in car.describe(np.array([-0.52, 0.0]))
    assert "on the right slope" in car.describe(np.array([0.2, 0.03]))
    assert car.action_names == ("force",) and "from -1 (push left) to 1" in car.task


def test_a_box_action_language_wrapper_passes_gymnasiums_env_checker():
    import warnings

    from gymnasium.utils.env_checker import check_env

    from langadapt import adapters
    from langadapt.adapters import LanguageObservation

    minilm = adapters.get_encoder()

    env = LanguageObservation(gym.make("Pendulum-v1").unwrapped,
                              adapters.make("language", gym.make("Pendulum-v1"), encoder=minilm))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    # besides every wrapper's "unwrapped" warning, only Pendulum's own torque range [-2, 2]
    assert [str(w.message) for w in caught if "unwrapped" not in str(w.message)
            and "symmetric and normalized space" not in str(w.message)] == []
    obs, info = env.reset(seed=0)
    assert obs.shape == (384,) and info["description"].startswith("The pendulum is")
    env.step(np.array([1.5], dtype=np.float32))
    assert env.history[-1][1] == (1.5,)  # a Box action recorded as a tuple of floats


@pytest.mark.parametrize("algorithm", ["SAC", "TD3"])
def test_sb3_sac_and_td3_train_on_box_actions_and_refuse_discrete(algorithm):
    pytest.importorskip("stable_baselines3")
    env = gym.make("Pendulum-v1")
    agent = make_agent("sb3", env.observation_space, env.action_space, seed=0,
                       algorithm=algorithm, buffer_size=500, learning_starts=150)
    records = train(agent, env, steps=200, seed=0, progress=False)
    assert len(records) == 1 and records[0].length == 200
    obs, _ = env.reset(seed=3)
    for explore in (True, False):
        assert env.action_space.contains(np.asarray(agent.act(obs, None, explore)))
    with pytest.raises(ValueError, match=f"SB3's {algorithm} does not take action space "
                                         "Discrete"):
        make_agent("sb3", env.observation_space, spaces.Discrete(3), algorithm=algorithm)
    with pytest.raises(ValueError, match="SB3's DQN does not take action space Box"):
        make_agent("sb3", env.observation_space, env.action_space, algorithm="DQN")


ROWS = ("raw", "language", "language_raw", "language_numbers")
"""The continuous files' rows: raw, language alone, beside the raw state, numbers kept."""


def test_the_continuous_language_file_runs_shrunk(tmp_path):
    """SAC on raw and language Pendulum states: 250 steps, one seed; the language rows are
    the describer's sentences (the wrapper on a Box action space)."""
    pytest.importorskip("stable_baselines3")
    from test_continuous_language import run_sac_shrunk  # tests/ is on pytest's path

    data = yaml.safe_load((CONFIGS / "continuous_language.yaml").read_text())
    assert [a["type"] for a in data["adapters"]] == ["raw", "language", "language", "language"]
    assert data["adapters"][2]["settings"] == {"with_raw": True}
    assert data["adapters"][3]["settings"] == {"numbers": 8}
    assert data["agents"][0]["params"]["algorithm"] == "SAC"
    rows = run_sac_shrunk(data, tmp_path)
    assert all(math.isfinite(float(r["return"])) for r in rows)
    assert {r["adapter"] for r in rows} == set(ROWS)
