"""LLM advisor: schedule, sources, zero calls at evaluation, calls <= distinct prompts."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from test_llm_policy import ScriptedBackend, first_legal

import langadapt.environments  # noqa: F401
from langadapt.agents import evaluate, make_agent, train
from langadapt.environments.maze import ACTION_DELTAS, bfs_distances
from langadapt.roles.advisor import AdvisedActions, AdvisorConfig, LLMAdvisor


def maze(name: str = "medium") -> gym.Env:
    return gym.make("langadapt/Maze-v0", maze=name, step_reward=0.0)


def qlearner(env: gym.Env, seed: int = 0):
    return make_agent("qlearning", env.observation_space, env.action_space, seed=seed,
                      alpha=0.5, epsilon_decay=0.97)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"probability": 1.5}, r"probability\n.*less than or equal to 1 .*input_value=1.5,"),
        ({"probability": -0.1}, r"probability\n.*greater than or equal to 0 .*input_value=-0.1,"),
        ({"decay_fraction": 0.0}, r"decay_fraction\n.*greater than 0 .*input_value=0.0,"),
        ({"decay_fraction": 2}, r"decay_fraction\n.*less than or equal to 1 .*input_value=2,"),
        ({"min_confidence": 1.5}, r"min_confidence\n.*less than or equal to 1 .*input_value=1.5,"),
        ({"source": "teacher"}, "source"),
    ],
)
def test_bad_schedules_are_errors_naming_the_value(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AdvisorConfig(**settings)
    with pytest.raises(ValueError):
        LLMAdvisor(settings)


def test_oracle_needs_a_maze() -> None:
    env = gym.make("langadapt/CartPole-v0")
    with pytest.raises(ValueError, match="source 'oracle': no oracle can plan on "
                                         "langadapt/CartPole-v0; oracles exist for: MazeEnv"):
        LLMAdvisor({"source": "oracle"}).bind(env)


def test_schedule_decays_to_zero_at_the_fraction() -> None:
    advice = LLMAdvisor({"source": "random", "probability": 0.8, "decay_fraction": 0.5})
    assert advice.probability(0.0) == pytest.approx(0.8)
    assert advice.probability(0.25) == pytest.approx(0.4)
    assert advice.probability(0.5) == 0.0 and advice.probability(0.9) == 0.0


def test_oracle_advice_is_a_shortest_path_move() -> None:
    env = maze("large")
    advisor = LLMAdvisor({"source": "oracle", "probability": 1.0})
    advisor.bind(env)
    base = env.unwrapped
    distance = bfs_distances(base.grid, base.goal)
    for cell in base.free_cells():
        if cell == base.goal:
            continue
        env.reset(options={"start": cell})
        legal = base.legal_moves_at(cell)
        move = advisor.suggest(legal)
        target = (cell[0] + ACTION_DELTAS[move][0], cell[1] + ACTION_DELTAS[move][1])
        assert distance[target] == distance[cell] - 1


def test_llm_advice_costs_at_most_one_call_per_prompt_and_none_at_evaluation() -> None:
    env = maze("medium")
    backend = ScriptedBackend(script=first_legal)
    advisor = LLMAdvisor({"source": "llm", "probability": 0.9, "decay_fraction": 0.8},
                         backend=backend)
    agent = qlearner(env)
    train(agent, env, episodes=30, seed=0, progress=False, advisor=advisor)
    stats = advisor.stats()
    assert stats["advised"] > 0
    assert stats["llm_calls"] == len(set(backend.asked)) == len(backend.asked) > 0
    # counters add up: every advised decision was a call, a cache hit or a single move
    assert stats["decisions"] == stats["advised"]
    assert stats["llm_calls"] + stats["llm_cache_hits"] <= stats["decisions"]
    assert stats["llm_fallbacks"] == stats["parse_failures"] == 0
    evaluate(agent, env, episodes=5, seed=1)
    assert advisor.stats() == stats  # greedy evaluation never asks
    assert advisor.stats()["llm_calls"] == stats["llm_calls"]


def test_an_unusable_reply_is_no_advice_not_a_random_move() -> None:
    env = maze("medium")
    backend = ScriptedBackend(script=lambda messages, schema: json.dumps({"action": 99}),
                              retries=0)
    advisor = LLMAdvisor({"source": "llm", "probability": 1.0}, backend=backend)
    advisor.bind(env)
    env.reset(seed=0)
    legal = env.unwrapped.legal_moves_at(env.unwrapped.cell)
    assert len(legal) > 1
    assert advisor.suggest(legal) is None  # the agent's own action stands
    stats = advisor.stats()
    assert stats["llm_fallbacks"] == 1 and stats["advised"] == 0


def test_advice_stops_after_the_decay_and_the_agent_learns_it() -> None:
    env = maze("medium")
    inner = qlearner(env)
    advisor = LLMAdvisor({"source": "oracle", "probability": 1.0, "decay_fraction": 0.5})
    advised = []  # advice counted after each training episode
    train(inner, env, episodes=10, seed=0, progress=False, advisor=advisor,
          on_episode=lambda r: advised.append(advisor.stats()["advised"]))
    assert advised[0] > 0  # p = 1 at the start: every exploratory choice is advised
    assert advised[4] == advised[-1]  # after half of the 10 episodes: never again
    records = evaluate(inner, env, episodes=1, seed=0)
    assert records[0].success  # p=1 oracle advice for half the episodes teaches the path


def test_advised_actions_wrapper_for_sb3_stores_the_executed_action() -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import DQN

    from langadapt.roles.advisor import sb3_advice_callback

    env = AdvisedActions(maze("umaze"), {"source": "oracle", "probability": 1.0,
                                         "decay_fraction": 1.0}, total_steps=200)
    executed: list[int] = []

    class Log(gym.Wrapper):
        def step(self, action):
            out = self.env.step(action)
            executed.append(out[4]["executed_action"])
            return out

    model = DQN("MlpPolicy", Log(env), learning_starts=1000, buffer_size=1000, seed=0,
                policy_kwargs={"net_arch": [8]})
    model.learn(total_timesteps=60, callback=sb3_advice_callback())
    stored = model.replay_buffer.actions[: len(executed), 0, 0].astype(int).tolist()
    assert stored == executed
    assert env.advice.counters["advised"] > 0
    env.training = False
    before = env.advice.counters["advised"]
    env.reset(seed=0)
    env.step(0)
    assert env.advice.counters["advised"] == before


def test_advisor_in_an_experiment_file(tmp_path) -> None:
    import yaml

    from langadapt.experiments.config import load_config
    from langadapt.experiments.runner import run_experiment
    from langadapt.experiments.schema import ConfigError

    data = {
        "name": "advice",
        "environment": {"id": "langadapt/Maze-v0",
                        "params": {"maze": "umaze", "step_reward": 0.0}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "qlearning", "label": "q+oracle",
                    "advisor": {"source": "oracle", "probability": 0.5}}],
        "training": {"episodes": 5}, "seeds": 1,
        "evaluation": {"every": 5, "episodes": 1, "final_episodes": 1},
    }
    path = tmp_path / "advice.yaml"
    path.write_text(yaml.safe_dump(data))
    out = run_experiment(load_config(path), out_dir=tmp_path / "out", progress=False,
                         log=lambda _: None)
    done = json.loads(next((out / "runs").glob("*/done.json")).read_text())
    assert done["llm_roles"]["advisor"]["advised"] > 0
    data["agents"][0]["advisor"]["probability"] = 2
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"agents\.0\.advisor\.probability=2: input should be "
                                          r"less than or equal to 1"):
        load_config(path)


def test_only_exploratory_choices_are_replaced_unless_any() -> None:
    env = maze("medium")
    counts = {}
    for replace in ("exploratory", "any"):
        greedy = make_agent("dqn", env.observation_space, env.action_space, hidden_sizes=[8],
                            learning_starts=0, exploration_initial_eps=0.0,
                            exploration_final_eps=0.0)
        advisor = LLMAdvisor({"source": "random", "probability": 1.0, "decay_fraction": 1.0,
                              "replace": replace})
        train(greedy, env, episodes=3, seed=0, progress=False, advisor=advisor)
        counts[replace] = advisor.stats()["advised"]
    assert counts["exploratory"] == 0 and counts["any"] > 0
