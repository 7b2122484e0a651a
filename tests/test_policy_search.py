"""LLM policy search: retention with scripted replies through the fake Ollama server, bad
replies, the discretisation, the linear family, the templates, FrozenLake and the experiment
files."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from fake_ollama import FakeOllama
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

import langadapt.environments  # noqa: F401  (registers the ids)
from langadapt.agents import Discretisation, make_agent, train
from langadapt.llm import schema_errors
from langadapt.roles.policy_families import (
    TEMPLATE_DIR,
    TEMPLATE_FILES,
    TEMPLATE_VARIABLES,
    LinearPolicy,
    TemplateError,
    load_templates,
    parse_proposal,
    proposal_schema,
)
from langadapt.roles.policy_search import LLMPolicySearch

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


class Script:
    """Replies to the fake server's chat requests in order; records the requests."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.bodies: list[dict] = []

    def __call__(self, body: dict) -> str:
        self.bodies.append(body)
        if not self.replies:
            raise AssertionError("the agent asked for more replies than the script has")
        return self.replies.pop(0)


def _table(actions: list[int]) -> str:
    return json.dumps({"actions": actions})


@pytest.fixture
def lake():
    env = gym.make("langadapt/FrozenLake-v0", is_slippery=False)
    yield env
    env.close()


# The deterministic 4x4 lake: S at (0,0), holes at 5, 7, 11, 12, goal at 15.
# Actions: 0 left, 1 down, 2 right, 3 up. A table reaching the goal in 6 steps:
SOLVED = [1, 2, 1, 0, 1, 0, 1, 0, 2, 1, 1, 0, 0, 2, 2, 0]  # path 0-4-8-9-13-14-15
ALL_LEFT = [0] * 16  # never leaves the start: return 0


def _search(lake, fake: FakeOllama, rounds: int, **settings_):
    config = {"proposer": "llm", "rounds": rounds, "evaluation_episodes": 2,
              "initial": "zeros",
              "llm": {"backend": "ollama", "model": "llama3.2", "host": fake.host,
                      "cache_path": None, "retries": 0, "breaker_failures": 100}} | settings_
    agent = make_agent("llm_policy_search", lake.observation_space, lake.action_space,
                       seed=0, **config)
    records = train(agent, lake, progress=False, seed=0)
    return agent, records


def test_retention_worse_better_malformed(lake):
    """Worse proposals never replace the kept policy, a better one is adopted on the round it
    arrives, malformed replies get one correction and are then skipped, never evaluated."""
    script = Script([
        _table(ALL_LEFT),                      # round 1: as bad as the initial policy
        "Sure! " + _table(SOLVED),             # round 2: text around the JSON ...
        _table(SOLVED),                        # ... corrected: adopted in round 2
        _table(ALL_LEFT),                      # round 3: worse, not kept
        _table([0] * 15),                      # round 4: wrong length ...
        _table([7] * 16),                      # ... illegal actions: round skipped
        json.dumps({"actions": [float("nan")] * 16}),  # round 5: NaN ...
        _table(SOLVED[:-1] + [1]),             # ... corrected, equal return: not kept
    ])
    with FakeOllama(reply=script) as fake:
        agent, records = _search(lake, fake, rounds=5, structured_output=False)
    log = agent.round_log
    assert [e["round"] for e in log] == [0, 1, 2, 3, 4, 5]
    assert [e["kept"] for e in log] == [True, False, True, False, False, False]
    assert [e["skipped"] for e in log] == [False, False, False, False, True, False]
    assert [e["requests"] for e in log] == [0, 1, 2, 1, 2, 2]
    assert log[2]["evaluated_return"] == 1.0 and log[2]["proposal"] == SOLVED
    best = [e["best_return"] for e in log]
    assert best == sorted(best) and best[-1] == 1.0
    assert log[2]["corrections"] == 1 and log[2]["error"] is None
    assert "not actions 0..3" in log[4]["error"] and log[4]["evaluated_return"] is None
    assert "15 entries, expected 16" in script.bodies[5]["messages"][-1]["content"]
    assert agent.counters["skipped_rounds"] == 1 and agent.counters["corrections"] == 3
    assert agent.counters["requests"] == 8 == fake.chat_requests
    # 5 evaluated policies x 2 episodes; the skipped round ran no episode
    assert sum(r.phase == "train" for r in records) == 10
    assert agent.best.to_json() == SOLVED  # the greedy policy is the kept one
    obs, info = lake.reset(seed=1)
    assert agent.act(obs, info["legal_moves"], explore=False) == SOLVED[0]
    # the correction prompt names what was wrong, and the next round shows the last reply
    correction = script.bodies[2]["messages"][-1]["content"]
    assert "could not be used" in correction and "JSON object" in correction
    round3 = script.bodies[3]["messages"][-1]["content"]
    assert "kept as the new best" in round3 and "1" in round3


def test_structured_output_every_reply_parses(lake):
    """With structured output (the default) the server's schema-fitting replies all parse:
    one request per round, no corrections, no skipped rounds."""
    with FakeOllama() as fake:  # answers the smallest JSON value that fits the schema
        agent, _ = _search(lake, fake, rounds=4)
    assert agent.counters["requests"] == 4 == fake.chat_requests
    assert agent.counters["corrections"] == agent.counters["skipped_rounds"] == 0
    schema = fake.chat_bodies[0]["format"]
    assert schema == proposal_schema("tabular", 4, n_states=16)
    assert [e["requests"] for e in agent.round_log[1:]] == [1, 1, 1, 1]
    # a new sampling seed every round (backend seed 0 + round); one set of counters
    assert [b["options"]["seed"] for b in fake.chat_bodies] == [1, 2, 3, 4]
    assert agent.stats()["llm_calls"] == 4


def test_replies_that_break_the_schema_are_skipped_not_raised(lake):
    """A server that ignores the schema: StructuredOutputError -> correction -> skipped."""
    with FakeOllama(reply=Script(["no idea"] * 4)) as fake:
        agent, records = _search(lake, fake, rounds=2)
    assert [e["skipped"] for e in agent.round_log] == [False, True, True]
    assert agent.counters["requests"] == 4 and agent.finished
    assert sum(r.phase == "train" for r in records) == 2  # only round 0 ran


def test_random_search_keeps_best_and_never_decreases():
    env = gym.make("langadapt/CartPole-v0")
    agent = make_agent("llm_policy_search", env.observation_space, env.action_space, seed=3,
                       family="linear", proposer="random", rounds=30, evaluation_episodes=3)
    records = train(agent, env, progress=False, seed=3)
    scores = [e["evaluated_return"] for e in agent.round_log]
    best = [e["best_return"] for e in agent.round_log]
    assert best == list(np.maximum.accumulate(scores))
    assert len(records) == 31 * 3 and agent.finished
    assert agent.best_return == max(scores)


def test_the_rounds_last_row_carries_the_proposals_time(monkeypatch):
    # progress's ETA and the summary's wall times read rows: a slow proposer must show there
    env = gym.make("langadapt/CartPole-v0")
    agent = make_agent("llm_policy_search", env.observation_space, env.action_space, seed=0,
                       family="linear", proposer="random", rounds=2, evaluation_episodes=2)
    end_round = agent.end_round
    monkeypatch.setattr(agent, "end_round", lambda returns: (time.sleep(0.3), end_round(returns)))
    records = [r for r in train(agent, env, progress=False, seed=0) if r.phase == "train"]
    assert [r.wall_time >= 0.3 for r in records] == [False, True] * 3

def test_search_stops_at_the_step_cap():
    env = gym.make("langadapt/CartPole-v0")
    agent = make_agent("llm_policy_search", env.observation_space, env.action_space,
                       family="linear", proposer="random", rounds=1000)
    train(agent, env, progress=False, steps=300)
    assert agent.counters["env_steps"] == 300 and not agent.finished


# ------------------------------------------------------------------ discretisation


CARTPOLE_BOUNDS = [(-2.4, 2.4), (-3.0, 3.0), (-0.21, 0.21), (-3.5, 3.5)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=4, max_size=4))
def test_every_observation_maps_to_one_bin(obs):
    space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    d = Discretisation(space, [3, 3, 6, 6], CARTPOLE_BOUNDS)
    state = d.index(obs)
    assert 0 <= state < d.n_states == 324
    assert d.index(d.representative(state)) == state
    # each coordinate lies in its bin's range (clipped outside the bounds)
    for dim, (k, x) in enumerate(zip(d.unravel(state), obs, strict=True)):
        edges = np.linspace(*CARTPOLE_BOUNDS[dim], d.sizes[dim] + 1)
        assert (k == 0 or x >= edges[k]) and (k == d.sizes[dim] - 1 or x < edges[k + 1])


def test_discretisation_edges_and_round_trip():
    space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    d = Discretisation(space, [4, 2])
    # inner edges at -0.5, 0, 0.5 (dim 0) and 0 (dim 1): an edge belongs to the bin on its right
    assert [d.bin_indices([x, 0.0])[0] for x in (-1.0, -0.5, 0.0, 0.5, 1.0)] == [0, 1, 2, 3, 3]
    assert d.bin_indices([-7.0, 9.0]) == (0, 1)  # outside: first / last bin
    assert sorted(d.index(d.representative(s)) for s in range(d.n_states)) == list(range(8))
    with pytest.raises(ValueError, match="finite"):
        d.index([np.nan, 0.0])


def test_the_layout_names_one_bin_dimensions_once_as_not_used():
    d = Discretisation(spaces.Box(-1.0, 1.0, (3,), np.float32), [3, 1, 2])
    layout = d.layout(["angle", "speed", "contact"])
    assert layout.splitlines() == [
        "There are 6 states; state = i0*2 + i2, where",
        "- i0 is the bin of angle (0: below -0.333, 1: -0.333 to 0.333, 2: 0.333 and above)",
        "- i2 is the bin of contact (0: below 0, 1: 0 and above)",
        "Not used (one bin each): speed.",
    ]
    assert d.index([0.9, -0.9, 0.5]) == 2 * 2 + 1  # the same formula


def test_discrete_states_are_the_observation_itself():
    space = spaces.Box(np.zeros(2, np.float32), np.array([3, 4], np.float32))
    d = Discretisation(space)
    assert d.n_states == 20
    assert [d.index([r, c]) for r in range(4) for c in range(5)] == list(range(20))
    with pytest.raises(ValueError, match="not a discrete state"):
        d.index([0.5, 1.0])
    with pytest.raises(ValueError, match="finite bounds"):
        Discretisation(spaces.Box(-np.inf, np.inf, (4,), np.float32), [3, 3, 6, 6])
    with pytest.raises(ValueError, match="not integers"):
        Discretisation(spaces.Box(-0.5, 0.5, (2,), np.float32))


# ------------------------------------------------------------------ linear policies


def test_linear_policy_shape_and_argmax():
    w = [[1.0, 0.0, 0.5], [0.0, 1.0, 0.0]]
    p = LinearPolicy(w, obs_dim=2, n_actions=2)
    both = np.array([True, True])
    assert p.action(np.array([2.0, 1.0]), both)[0] == 0     # 2.5 vs 1
    assert p.action(np.array([0.0, 3.0]), both)[0] == 1     # 0.5 vs 3
    assert p.action(np.array([0.5, 1.0]), both)[0] == 0     # tie 1 vs 1: lowest action
    assert p.action(np.array([2.0, 1.0]), np.array([False, True]))[0] == 1  # legal only
    with pytest.raises(ValueError, match=r"shape \(2, 2\), expected \(2, 3\)"):
        LinearPolicy([[1.0, 2.0], [3.0, 4.0]], obs_dim=2, n_actions=2)
    with pytest.raises(ValueError, match="NaN"):
        LinearPolicy([[1.0, 2.0, math.nan], [3.0, 4.0, 5.0]], obs_dim=2, n_actions=2)


@pytest.mark.parametrize("reply, message", [
    ('{"weights": [[1, 2, 3, 4, 5]]}', "2 rows of 5"),
    ('{"weights": [[1, 2, 3, 4], [1, 2, 3, 4]]}', "2 rows of 5"),
    ('{"weights": [[1, 2, 3, 4, NaN], [1, 2, 3, 4, 5]]}', "not one JSON object"),
    ('{"weights": [[1, 2, 3, 4, "5"], [1, 2, 3, 4, 5]]}', "finite numbers"),
    ('The weights: {"weights": [[0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]}', "not one JSON object"),
    ('{"w": [[0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]}', "single key"),
])
def test_bad_linear_replies_are_named(reply, message):
    with pytest.raises(ValueError, match=message):
        parse_proposal(reply, "linear", 2, obs_dim=4)


def test_schemas_accept_exactly_the_policies():
    table = proposal_schema("tabular", 2, n_states=3)
    assert schema_errors({"actions": [0, 1, 1]}, table) == []
    assert schema_errors({"actions": [0, 1]}, table) and schema_errors({"actions": [0, 1, 2]},
                                                                        table)
    linear = proposal_schema("linear", 2, obs_dim=1)
    assert schema_errors({"weights": [[0.5, 1], [2, -3.5]]}, linear) == []
    assert schema_errors({"weights": [[0.5, 1, 2], [2, -3.5]]}, linear)


# ------------------------------------------------------------------ templates


def test_templates_render_with_every_documented_variable():
    templates = load_templates()
    values = {name: f"<{name}>" for name in TEMPLATE_VARIABLES}
    for name, template in templates.items():
        text = template.substitute(values)
        assert "$" not in text, name
    # and with the values a real agent gives, in both families
    env = gym.make("langadapt/CartPole-v0")
    for family, extra in (("linear", {}), ("tabular", {"bins": [3, 3, 6, 6],
                                                       "bounds": CARTPOLE_BOUNDS})):
        agent = LLMPolicySearch(env.observation_space, env.action_space,
                                {"family": family, "proposer": "random", **extra})
        train(agent, env, progress=False, seed=0, episodes=agent.config.evaluation_episodes)
        variables = agent.prompt_variables()
        assert set(variables) == set(TEMPLATE_VARIABLES)
        if family == "linear":  # weights shown to 3 decimals, not 16 digits
            shown = json.loads(variables["best_policy"])["weights"]
            assert all(round(w, 3) == w for row in shown for w in row)
        for template in templates.values():
            template.substitute(variables)


def test_template_errors_name_file_and_variable(tmp_path):
    for name in TEMPLATE_FILES:
        (tmp_path / name).write_text((TEMPLATE_DIR / name).read_text())
    (tmp_path / "user.txt").write_text("Round $round, best $best_retrun.")
    with pytest.raises(TemplateError, match=r"user\.txt uses unknown variable \$best_retrun"):
        load_templates(tmp_path)
    env = gym.make("langadapt/CartPole-v0")
    with pytest.raises(ValueError, match=r"best_retrun"):
        make_agent("llm_policy_search", env.observation_space, env.action_space,
                   family="linear", templates=str(tmp_path))
    (tmp_path / "correction.txt").unlink()
    with pytest.raises(TemplateError, match=r"correction\.txt does not exist"):
        load_templates(tmp_path)


# ------------------------------------------------------------------ FrozenLake


def test_frozenlake_conventions(lake):
    obs, info = lake.reset(seed=0)
    assert obs.tolist() == [0.0, 0.0] and info == {"legal_moves": [0, 1, 2, 3],
                                                   "is_success": False}
    moves = [1, 1, 2, 1, 2, 2]  # down down right down right right
    for a in moves:
        obs, reward, terminated, truncated, info = lake.step(a)
    assert obs.tolist() == [3.0, 3.0] and reward == 1.0 and terminated and info["is_success"]
    lake.reset()
    obs, reward, terminated, _, info = lake.step(2)
    obs, reward, terminated, _, info = lake.step(1)  # (1, 1) is a hole
    assert terminated and reward == 0.0 and not info["is_success"]
    with pytest.raises(ValueError):
        lake.step(4)
    env = gym.make("langadapt/FrozenLake-v0", is_slippery=False, max_steps=3)
    env.reset(seed=0)
    assert [env.step(0)[3] for _ in range(3)] == [False, False, True]
    with pytest.raises(ValueError, match="map_name"):
        gym.make("langadapt/FrozenLake-v0", map_name="5x5")


# ------------------------------------------------------------------ experiment files


@pytest.mark.parametrize("name", ["cartpole_linear", "cartpole_tabular", "frozenlake"])
def test_shipped_experiment_files_validate(name):
    from langadapt.experiments.config import load_config

    config = load_config(CONFIGS / f"policy_search_{name}.yaml")
    types = [a.type for a in config.agents]
    assert types == ["llm_policy_search", "llm_policy_search", "qlearning"]
    llm, random_search = config.agents[0].params, config.agents[1].params
    assert llm["llm"]["backend"] == "llamacpp" and random_search["proposer"] == "random"
    assert {k: v for k, v in random_search.items() if k != "proposer"} == llm
    assert len(config.seed_list) >= 5


def test_experiment_file_two_round_smoke_through_fake_ollama(tmp_path, monkeypatch):
    """The FrozenLake file with two rounds, one seed and the LLM behind the fake Ollama server:
    results folder with the rounds in done.json, the LLM calls in episodes.csv and the
    search summary."""
    import csv

    import yaml

    from langadapt.experiments.config import load_config
    from langadapt.experiments.runner import run_experiment

    data = yaml.safe_load((CONFIGS / "policy_search_frozenlake.yaml").read_text())
    script = Script([_table(SOLVED), _table(ALL_LEFT)])
    with FakeOllama(reply=script) as fake:
        for agent in data["agents"][:2]:
            agent["params"] = {**agent["params"], "rounds": 2}
        data["agents"][0]["params"]["llm"] = {
            "backend": "ollama", "model": "llama3.2", "host": fake.host}
        data |= {"seeds": [0], "training": {"steps": 300}, "cache_dir": str(tmp_path / "cache")}
        path = tmp_path / "smoke.yaml"
        path.write_text(yaml.safe_dump(data))
        config = load_config(path)
        monkeypatch.setenv("LANGADAPT_CACHE_DIR", str(tmp_path / "llm"))
        out = run_experiment(config, tmp_path / "out", progress=False, log=lambda _: None)
    assert fake.chat_requests == 2
    done = json.loads((out / "runs" / "raw__llm__seed0" / "done.json").read_text())
    assert [r["round"] for r in done["rounds"]] == [0, 1, 2]
    assert [r["kept"] for r in done["rounds"]] == [True, True, False]
    assert done["rounds"][1]["evaluated_return"] == 1.0
    with open(out / "episodes.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r["agent"] == "llm"]
    assert sum(int(r["llm_calls"]) for r in rows) == 2
    assert [float(r["return"]) for r in rows if r["phase"] == "final"] == [1.0]
    summary = (out / "search_summary.md").read_text()
    assert "| llm | 1 | 1 |" in summary and "random_search" in summary and "qlearning" in summary
    assert (out / "best_so_far.png").stat().st_size > 0
    assert len((out / "rounds.csv").read_text().splitlines()) == 1 + 3 + 3


def test_maze_tables_and_save_load(tmp_path):
    """The maze's (row, col) is the state itself; illegal table moves fall back to a legal
    one (counted); the kept policy survives save / load."""
    env = gym.make("langadapt/Maze-v0", maze="umaze")
    agent = make_agent("llm_policy_search", env.observation_space, env.action_space, seed=1,
                       proposer="random", rounds=5, evaluation_episodes=1)
    assert agent.n_states == 25
    train(agent, env, progress=False, seed=1)
    assert agent.counters["illegal_table_actions"] > 0 and agent.finished
    agent.save(tmp_path / "search.pt")
    fresh = make_agent("llm_policy_search", env.observation_space, env.action_space,
                       proposer="random", rounds=5, evaluation_episodes=1)
    fresh.load(tmp_path / "search.pt")
    assert fresh.best.to_json() == agent.best.to_json()
    assert fresh.best_return == agent.best_return
    obs, info = env.reset(seed=2)
    assert fresh.act(obs, info["legal_moves"], False) == agent.act(obs, info["legal_moves"],
                                                                   False)
    linear = make_agent("llm_policy_search", env.observation_space, env.action_space,
                        family="linear", proposer="random", rounds=5, evaluation_episodes=1)
    with pytest.raises(ValueError, match="tabular"):
        linear.load(tmp_path / "search.pt")


# ------------------------------------------------------------------ one training loop
class StartLog(gym.Wrapper):
    """Records the first observation of every episode started on this environment."""

    def __init__(self, env):
        super().__init__(env)
        self.starts = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.starts.append(obs.tolist())
        return obs, info


def test_search_runs_through_train_and_evaluation_leaves_the_training_starts_alone():
    """Evaluating on the training environment reseeds it; the training episodes' start
    states must be the same with and without evaluations in between."""

    def training_starts(**evaluation):
        env = StartLog(gym.make("langadapt/CartPole-v0"))
        agent = make_agent("llm_policy_search", env.observation_space, env.action_space, seed=0,
                           family="linear", proposer="random", rounds=6, evaluation_episodes=2)
        result = train(agent, env, seed=4, progress=False, **evaluation)
        phases = [r.phase for r in result]
        train_starts = []
        starts = iter(env.starts)
        for phase in phases:  # every record is one episode started on env, in order
            start = next(starts)
            if phase == "train":
                train_starts.append(start)
        return agent, train_starts, phases

    agent, plain, phases = training_starts()
    assert agent.finished and phases.count("train") == 7 * 2 and "eval" not in phases
    _, evaluated, phases = training_starts(eval_every=2, eval_episodes=3)
    assert phases.count("eval") == 7 * 3
    assert evaluated == plain and len(set(map(tuple, plain))) == len(plain)


def test_search_with_keep_best_and_an_eval_env_behaves_like_any_agent():
    env, eval_env = gym.make("langadapt/CartPole-v0"), gym.make("langadapt/CartPole-v0")
    agent = make_agent("llm_policy_search", env.observation_space, env.action_space, seed=1,
                       family="linear", proposer="random", rounds=5, evaluation_episodes=1)
    result = train(agent, env, seed=1, progress=False, eval_env=eval_env, eval_every=2,
                   eval_episodes=2, keep_best=True)
    assert result.best is not None and result.last_policy is not None
    assert agent.finished


def test_the_search_learner_is_a_loop_over_rounds_and_refuses_an_advisor():
    from langadapt.roles import LLMAdvisor

    env = gym.make("langadapt/FrozenLake-v0", is_slippery=False)
    agent = make_agent("llm_policy_search", env.observation_space, env.action_space, seed=0,
                       proposer="random", rounds=3, evaluation_episodes=2)
    with pytest.raises(ValueError, match="policy search scores whole episodes"):
        train(agent, env, progress=False, advisor=LLMAdvisor({"source": "random"}))
    result = train(agent, env, progress=False, steps=10_000)
    assert len(result) == 4 * 2 and agent.finished  # the initial policy and 3 proposals
    assert [e["round"] for e in agent.round_log] == [0, 1, 2, 3]
    capped = train(agent, env, progress=False, episodes=3)  # the budget caps the rounds
    assert len(capped) == 3 and not agent.finished and agent.counters["evaluated"] == 1


def test_an_advisor_on_an_agent_that_does_not_learn_from_steps_is_a_config_error():
    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.schema import ConfigError

    for agent_type in ("llm_policy_search", "llm_policy"):
        data = {"name": "x", "environment": {"id": "langadapt/Maze-v0"},
                "adapters": [{"type": "raw"}],
                "agents": [{"type": agent_type, "params": {"proposer": "random"}
                            if agent_type == "llm_policy_search" else {},
                            "advisor": {"source": "oracle"}}],
                "training": {"episodes": 2}, "seeds": 1}
        with pytest.raises(ConfigError, match=rf"agents\.0\.advisor: .*{agent_type} does not "
                                              "learn from steps"):
            experiment_from_dict(data, "x.yaml")
