"""A researcher's own environment with a ``Dict`` observation (tests/my_lamps.py, the
docs' worked example) through every path: the describer receiving the dict, ``describe``,
``prompt`` (raw replies and every scored candidate), a language-states experiment, an
``llm_policy`` experiment on a stand-in server, the advisor, SB3's PPO and policy search
(on the raw adapter's flattened vector); a numeric
describer given a dict says what to change in one line."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from experiment_fixtures import run_cli
from fake_ollama import FakeOllama
from gymnasium import spaces

from langadapt.environments import Describer, language_for
from langadapt.roles.llm_policy import LLMPolicy, show_prompt

LAMPS = Path(__file__).with_name("my_lamps.py").read_text(encoding="utf-8")

EXPERIMENT = """\
name: lamps
environment: {id: my_lamps:Lamps-v0}
adapters: [ADAPTERS]
agents: [AGENT]
training: {episodes: 2}
seeds: 1
evaluation: {final_episodes: 2}
cache_dir: CACHE
"""


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """The user's folder holding my_lamps.py, the working directory of the test."""
    (tmp_path / "my_lamps.py").write_text(LAMPS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LANGADAPT_CACHE_DIR", str(tmp_path / "llm-cache"))
    yield tmp_path
    sys.modules.pop("my_lamps", None)


def _run(capsys, folder: Path, adapters: str, agent: str) -> dict[tuple[str, str], dict]:
    """``langadapt run`` of a tiny experiment on Lamps-v0 -> its summary rows."""
    path = folder / "experiments" / "lamps.yaml"  # (never beside the code it imports)
    path.parent.mkdir(exist_ok=True)
    path.write_text(EXPERIMENT.replace("ADAPTERS", adapters).replace("AGENT", agent)
                    .replace("CACHE", str(folder / "cache")), encoding="utf-8")
    code, _, err = run_cli(capsys, "run", str(path), "--no-progress", "--force",
                           "--out", str(folder / "out"))
    assert code == 0, err
    with open(folder / "out" / "summary.csv", newline="") as handle:
        return {(row["adapter"], row["agent"]): row for row in csv.DictReader(handle)}


def test_the_describer_receives_the_dict_and_describe_prints_it(user_folder, capsys):
    import my_lamps

    spec = language_for(my_lamps.Lamps())
    assert spec.state_shape is None
    assert spec.describe({"cell": 0, "goal": 1}) == (
        "You stand in cell 0 of five; the lamp is lit at the right end.")
    code, out, err = run_cli(capsys, "describe", "my_lamps:Lamps-v0", "--steps", "2")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("step 0 state {'cell': 2, 'goal': ") and "lamp is lit" in first
    code, out, err = run_cli(capsys, "describe", "my_lamps:Lamps-v0",
                             "--state", '{"cell": 1, "goal": 0}')
    assert code == 0 and out == ("state {'cell': 1, 'goal': 0}: You stand in cell 1 of five; "
                                 "the lamp is lit at the left end.\n"), err
    for bad in ("1,0", '{"cell": 9, "goal": 0}', '{"cell": 1}', '{"cell": 1, "goal": 0, "x": 2}'):
        code, _, err = run_cli(capsys, "describe", "my_lamps:Lamps-v0", "--state", bad)
        assert code == 2 and err.count("\n") == 1, err
        assert f"--state {bad!r} is not an observation of Lamps-v0's observation space " \
               "Dict('cell': Discrete(5), 'goal': Discrete(2)); expected JSON, an object of " \
               "its keys" in err


def test_a_numeric_describer_given_a_dict_names_the_fix() -> None:
    class Numbers(Describer):
        state_shape = (2,)

        def describe(self, state, legal_moves, last_action):
            return "two numbers"

    assert Numbers()([1, 2]) == "two numbers" and Numbers()((1, 2)) == "two numbers"
    with pytest.raises(ValueError, match=r"is a dict; Numbers takes numbers of shape \(2,\) "
                       r"\(a describer of Dict or Tuple observations sets state_shape = None"):
        Numbers()({"cell": 1, "goal": 0})
    with pytest.raises(ValueError, match="is a tuple; Numbers takes numbers"):
        Numbers()((np.zeros(1), 2))


def test_tuple_observations_reach_the_describer_as_tuples() -> None:
    class Pair(Describer):
        state_shape = None
        n_actions = 2

        def describe(self, state, legal_moves, last_action):
            cell, lamp = state
            return f"cell {cell}, lamp {lamp}, moves {legal_moves}, last {last_action}"

    assert Pair()((3, 1), [0, 1], 1) == "cell 3, lamp 1, moves (0, 1), last 1"
    with pytest.raises(ValueError, match="last_action"):
        Pair()((3, 1), [0, 1], 5)


def test_prompt_shows_the_dict_state_and_the_raw_replies(user_folder, capsys):
    with FakeOllama(models=["llama3.2"], default_answer="I would go left.") as fake:
        code, out, err = run_cli(capsys, "prompt", "my_lamps:Lamps-v0", "--backend", "ollama",
                                 "--host", fake.host, "--model", "llama3.2")
        assert code == 0, err
        assert "You stand in cell 2 of five" in out and "reply 1: '{\"action\": 0}'" in out
        code, out, err = run_cli(capsys, "prompt", "my_lamps:Lamps-v0", "--backend", "ollama",
                                 "--host", fake.host, "--model", "llama3.2",
                                 "--state", '{"cell": 4, "goal": 0}')
        assert code == 0 and "You stand in cell 4 of five; the lamp is lit at the left" in out
        code, out, err = run_cli(capsys, "describe", "my_lamps:Lamps-v0", "--adapter", "llm",
                                 "--steps", "1", "--backend", "ollama", "--host", fake.host,
                                 "--model", "llama3.2")
        assert code == 0 and "step 1 state {'cell': " in out, err
        assert "You stand in cell 2 of five" in fake.chat_bodies[-2]["messages"][-1]["content"]
        code, out, err = run_cli(capsys, "prompt", "my_lamps:Lamps-v0", "--decoding", "text",
                                 "--backend", "ollama", "--host", fake.host,
                                 "--model", "llama3.2")
    assert code == 0, err
    assert "reply 1: 'I would go left.'\n  not usable: the reply 'I would go left.' has no " \
           "line 'Action: N'" in out
    assert "(a random legal action: no usable reply)" in out


class ScoringBackend:
    """A backend that scores known replies: 'right' three times as likely as 'left'."""

    supports_scoring = True

    def score(self, messages, texts, seed=None):
        return [np.log(3.0) if '"action": 1' in text else 0.0 for text in texts]

    def chat(self, messages, schema=None, max_tokens=None):
        raise AssertionError("a scoring backend is not asked to generate")


def test_prompt_shows_every_scored_candidate(user_folder):
    import my_lamps  # noqa: F401  (registers Lamps-v0)

    shown = show_prompt(gym.make("Lamps-v0"), "policy", ScoringBackend())
    assert "scores (the model's probability of each legal action):\n  1 (right): 0.750\n" \
           "  0 (left): 0.250\n-> action 1 (right);" in shown


def test_advisor_reads_the_dict_state_off_the_environment(user_folder):
    import my_lamps  # noqa: F401

    from langadapt.roles.advisor import LLMAdvisor

    env = gym.make("Lamps-v0")
    env.reset(seed=0)
    advisor = LLMAdvisor({"source": "llm", "probability": 1.0}, backend=ScoringBackend())
    advisor.bind(env)
    assert advisor.suggest([0, 1]) == 1


def test_llm_policy_unflattens_the_raw_adapters_vector(user_folder):
    import my_lamps  # noqa: F401

    env = gym.make("Lamps-v0")
    flat = spaces.flatten_space(env.observation_space)
    policy = LLMPolicy(flat, env.action_space, backend=ScoringBackend())
    policy.bind(env)
    vector = spaces.flatten(env.observation_space, {"cell": 4, "goal": 1})
    assert policy.state_of(vector) == {"cell": 4, "goal": 1}
    assert "cell 4 of five" in policy.messages(policy.state_of(vector), (0, 1))[-1]["content"]
    assert policy.act(vector, [0, 1], explore=False) == 1


def test_language_states_llm_policy_and_ppo_experiments(user_folder, capsys):
    rows = _run(capsys, user_folder, "{type: raw}, {type: language}", "{type: qlearning}")
    assert set(rows) == {("raw", "qlearning"), ("language", "qlearning")}
    with FakeOllama(models=["llama3.2"]) as fake:
        agent = f"{{type: llm_policy, params: {{backend: {{backend: ollama, host: '{fake.host}'" \
                ", model: llama3.2}}}"
        rows = _run(capsys, user_folder, "{type: raw}", agent)
        assert fake.chat_requests >= 1
    row = rows[("raw", "llm_policy")]
    assert int(row["llm_calls"]) >= 1 and int(row["llm_fallbacks"]) == 0, row
    ppo = "{type: sb3, label: ppo, training: {steps: 64}, params: {algorithm: PPO, " \
          "n_steps: 32, batch_size: 16, n_epochs: 1}}"
    rows = _run(capsys, user_folder, "{type: raw}, {type: language}", ppo)
    assert set(rows) == {("raw", "ppo"), ("language", "ppo")}
    search = "{type: llm_policy_search, label: search, params: {family: linear, " \
             "proposer: random, rounds: 2, evaluation_episodes: 1}}"
    assert set(_run(capsys, user_folder, "{type: raw}", search)) == {("raw", "search")}


def test_reward_shaping_asks_about_the_dict_state(user_folder):
    import my_lamps  # noqa: F401

    from langadapt.roles.reward_shaping import RewardShaping

    class Scores(ScoringBackend):
        def score(self, messages, texts, seed=None):  # the score 10 of 0..10, surely
            return [0.0 if text.rstrip(" }").endswith("10") else -50.0 for text in texts]

    env = RewardShaping(gym.make("Lamps-v0"), {"potential": "llm"}, backend=Scores())
    env.reset(seed=0)
    asked = next(iter(env.potentials))
    assert "You stand in cell 2 of five" in asked and env.potentials[asked] == pytest.approx(1.0)


def test_a_tuple_observation_through_the_adapters_and_llm_policy():
    import langadapt
    from langadapt.environments import LanguageSpec, register_language

    class TupleLamps(gym.Env):
        observation_space = spaces.Tuple((spaces.Discrete(5), spaces.Discrete(2)))
        action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return (2, 1), {}

    class PairDescriber(Describer):
        state_shape, n_actions = None, 2

        def describe(self, state, legal_moves, last_action):
            return f"cell {state[0]}, lamp at the {('left', 'right')[state[1]]} end"

    register_language(TupleLamps, lambda env: LanguageSpec(
        PairDescriber(), ("left", "right"), "Reach the lamp.", lambda e: (2, 1)))
    env = TupleLamps()
    assert langadapt.make_adapter("language", env)((3, 0), [0, 1], encode=False) == (
        "cell 3, lamp at the left end")
    vector = langadapt.make_adapter("raw", env)((3, 0), [0, 1])
    assert vector.shape == (7,)
    policy = LLMPolicy(spaces.flatten_space(env.observation_space), env.action_space,
                       backend=ScoringBackend())
    policy.bind(env)
    assert policy.state_of(vector) == (3, 0) and policy.act(vector, [0, 1], False) == 1
