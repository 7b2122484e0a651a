"""The LLM roles: one bad reply never ends a run (issue rows 5, 6, 7), and decisions as
distributions over the known replies (greedy, sampled, withheld advice, expected potential).

Each test failed on the code before: a reply of 5,000 nested ``[`` ended in a
``RecursionError`` traceback; a structured reply outside the legal moves (``{"action": 5}``)
ended the experiment; ``{"action": 3.0}`` was a parse failure; policy search with five bad
replies opened the circuit breaker and aborted, and with ``vary_seed`` every seed copy had
its own breaker and warning timer.
"""

from __future__ import annotations

import json
import logging
import warnings

import gymnasium as gym
import pytest
from fake_ollama import FakeOllama

import langadapt.environments  # noqa: F401  (registers the ids)
from langadapt.agents import make_agent, train
from langadapt.roles import LLMPolicy

NESTED = "[" * 5000


def _ollama(fake: FakeOllama, **extra) -> dict:
    return {"backend": "ollama", "model": "llama3.2", "host": fake.host, "cache_path": None,
            "retries": 0, **extra}


def _policy(env: gym.Env, fake: FakeOllama) -> LLMPolicy:
    policy = LLMPolicy(env.observation_space, env.action_space, {"backend": _ollama(fake)})
    policy.bind(env)
    return policy


@pytest.mark.parametrize("reply", [NESTED, '{"action": 5}', "x" * 2_000_000],
                         ids=["nested", "illegal", "huge"])
def test_llm_policy_counts_an_unusable_structured_reply_and_goes_on(reply):
    env = gym.make("langadapt/Maze-v0", maze="medium")
    obs, info = env.reset(seed=0)  # the start (1, 1): legal moves right, down, down-right
    assert 5 not in info["legal_moves"]
    with FakeOllama(reply=lambda body: reply) as fake:
        policy = _policy(env, fake)
        action = policy.act(obs, info["legal_moves"], explore=False)
    assert action in info["legal_moves"]
    stats = policy.stats()
    assert stats["parse_failures"] == 1 and stats["llm_fallbacks"] == 1


def test_an_integral_float_action_is_the_action():
    env = gym.make("langadapt/Maze-v0", maze="medium")
    obs, info = env.reset(seed=0)
    legal = info["legal_moves"]
    with FakeOllama(reply=lambda body: json.dumps({"action": float(legal[-1])})) as fake:
        policy = _policy(env, fake)
        assert policy.act(obs, legal, explore=False) == legal[-1]
    assert policy.stats()["parse_failures"] == 0


@pytest.mark.parametrize("vary_seed", [False, True])
def test_policy_search_skips_rounds_of_bad_replies_without_opening_the_breaker(
        vary_seed, caplog):
    lake = gym.make("langadapt/FrozenLake-v0", is_slippery=False)
    with FakeOllama(reply=lambda body: NESTED) as fake:
        agent = make_agent(
            "llm_policy_search", lake.observation_space, lake.action_space, seed=0,
            proposer="llm", rounds=5, evaluation_episodes=1, initial="zeros",
            vary_seed=vary_seed, llm=_ollama(fake, breaker_failures=3))
        with caplog.at_level(logging.WARNING, logger="langadapt"):
            train(agent, lake, seed=0, progress=False)
    assert agent.finished
    assert agent.counters["skipped_rounds"] == 5 and agent.counters["requests"] == 10
    assert agent.stats()["llm_breaker_skips"] == 0  # reply problems are not outages
    failures = [r for r in caplog.records if "LLM call failed" in r.getMessage()]
    assert len(failures) <= 1  # one warning throttle per backend, not one per seed


# ------------------------------------------------------------ decisions as distributions
def _scoring_backend(weights):
    """A backend (real cache and counters of the LLM layer) whose model gives each candidate
    reply the log-probability ``weights(reply)``."""
    import math
    from typing import ClassVar

    from langadapt.llm import LLMBackend

    class Scored(LLMBackend):
        name: ClassVar[str] = "scored-test"
        supports_scoring: ClassVar[bool] = True

        def generate(self, messages, schema, max_tokens, **_):
            raise AssertionError("a scoring backend is never asked to generate here")

        def compute_scores(self, messages, replies, **_):
            return [math.log(weights(r)) for r in replies]

        def resolve_identity(self):
            return "scored-test-model"

    return Scored(cache_path=None)


def test_llm_policy_takes_the_most_probable_action_and_samples_when_exploring():
    env = gym.make("langadapt/Maze-v0", maze="medium")
    obs, info = env.reset(seed=0)
    legal = info["legal_moves"]  # three moves at the start
    favourite = legal[1]
    backend = _scoring_backend(lambda r: 0.7 if json.loads(r)["action"] == favourite else 0.15)
    policy = LLMPolicy(env.observation_space, env.action_space, backend=backend)
    policy.bind(env)
    action, probability = policy.decide_with_probability(obs, legal)
    assert action == favourite and probability == pytest.approx(0.7)
    sampled = [policy.act(obs, legal, explore=True) for _ in range(200)]
    assert set(sampled) == set(legal) and 110 < sampled.count(favourite) < 170
    stats = policy.stats()
    assert stats["llm_scored"] == 201 and stats["llm_generated"] == 0
    assert stats["llm_calls"] == 1 and stats["llm_cache_hits"] == 200  # one prompt, scored once


def test_advice_below_min_confidence_is_withheld():
    from langadapt.agents import QLearningAgent
    from langadapt.roles import LLMAdvisor

    env = gym.make("langadapt/Maze-v0", maze="medium")
    obs, info = env.reset(seed=0)
    unsure = _scoring_backend(lambda r: 1.0)  # uniform over the legal moves: p = 1/3
    agent = QLearningAgent(env.observation_space, env.action_space, {"epsilon_start": 1.0})
    for floor, advised in ((0.5, 0), (0.2, 1)):
        advisor = LLMAdvisor({"source": "llm", "probability": 1.0, "replace": "any",
                              "min_confidence": floor}, backend=unsure)
        advisor.bind(env)
        action = agent.act(obs, info["legal_moves"], explore=True)
        advisor(agent, obs, info["legal_moves"], action, progress=0.0)
        stats = advisor.stats()
        assert (stats["advised"], stats["withheld"]) == (advised, 1 - advised)


def test_the_llm_potential_is_the_expectation_over_the_scale():
    from langadapt.roles import RewardShaping

    # the model puts 0.5 on score 2 and 0.5 on score 8: expectation 5, no single sample is 5
    backend = _scoring_backend(lambda r: {2: 0.5, 8: 0.5}.get(json.loads(r)["score"], 1e-12))
    shaper = RewardShaping(gym.make("langadapt/Maze-v0", maze="umaze"),
                           {"potential": "llm", "scale": 1.0}, backend=backend)
    assert shaper.potential([1, 1], [1, 3]) == pytest.approx(0.5, abs=1e-6)
    assert shaper.stats()["llm_scored"] == 1


# ---------------------------------------------------------------------------- the BabyAI bot oracle


@pytest.fixture()
def bot_oracle():
    pytest.importorskip("minigrid")
    from langadapt.environments.minigrid import make_minigrid
    from langadapt.roles import oracle_for

    env = make_minigrid("BabyAI-GoToObj-v0")
    _, info = env.reset(seed=0)
    return env, oracle_for(env), info


def test_a_bot_that_raises_inside_the_oracle_is_counted_and_warned(bot_oracle):
    env, oracle, info = bot_oracle

    class Broken(oracle._bot_class):
        def replan(self, action_taken=None):
            raise AssertionError("the bot lost its plan (simulated)")

    oracle._bot_class = Broken
    with pytest.warns(RuntimeWarning, match=r"oracle on BabyAI-GoToObj-v0: BabyAI's bot raised "
                      r"AssertionError: the bot lost its plan \(simulated\) \(episode 1, step 0\)"):
        env.reset(seed=1)
    assert oracle.bot_failures == 2 and "simulated" in oracle.last_bot_error
    assert oracle.potential(env) == -1.0 and oracle.best_move(env, info["legal_moves"]) == 0
    env.step(2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        oracle.best_move(env, info["legal_moves"])  # the bot fails again: counted, not warned
    assert oracle.bot_failures > 2 and not seen


def test_the_bot_oracles_plan_memo_is_bounded(bot_oracle):
    from langadapt.roles.minigrid_oracle import PLAN_MEMO_SIZE

    env, oracle, _ = bot_oracle
    assert oracle.plan_memo_size == PLAN_MEMO_SIZE
    oracle.plan_memo_size = 5
    rng = __import__("random").Random(0)
    for _ in range(60):
        oracle.potential(env)
        _, _, terminated, truncated, _ = env.step(rng.choice([0, 1, 2]))
        if terminated or truncated:
            env.reset(seed=rng.randrange(100))
    assert len(oracle._plans) == 5  # a 60-step walk asks about more than 5 states
    first = oracle.potential(env)
    assert oracle.potential(env) == first and next(reversed(oracle._plans)) is not None
