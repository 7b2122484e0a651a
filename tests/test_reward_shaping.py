"""Reward shaping: policy invariance, one LLM call per state, range checks, the judge form."""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from agent_fixtures import q_learning_from_random_starts
from test_llm_policy import ScriptedBackend

import langadapt.environments  # noqa: F401
from langadapt.environments.maze import ACTION_DELTAS, bfs_distances
from langadapt.roles.reward_shaping import RewardShaping, spearman_with_distance


def maze(name: str = "umaze", **params: Any) -> gym.Env:
    return gym.make("langadapt/Maze-v0", maze=name, step_reward=0.0, **params)


def greedy_after_q_learning(env: gym.Env, episodes: int = 1500, seed: int = 0) -> dict:
    """Tabular Q-learning (gamma 0.9) from random start cells; the greedy move per cell."""
    base = env.unwrapped
    cells = [c for c in base.free_cells() if c != base.goal]
    agent = q_learning_from_random_starts(env, episodes, seed)
    return {c: agent.act(base.observation_of(c), base.legal_moves_at(c), False) for c in cells}


def optimal(env: gym.Env, policy: dict) -> bool:
    """Every greedy move shortens the path to the goal by one."""
    base = env.unwrapped
    distance = bfs_distances(base.grid, base.goal)
    return all(
        distance[(r + ACTION_DELTAS[a][0], c + ACTION_DELTAS[a][1])] == distance[(r, c)] - 1
        for (r, c), a in policy.items()
    )


def test_potential_shaping_leaves_the_greedy_policy_unchanged() -> None:
    plain = maze("double_t_maze", max_steps=30)
    oracle = RewardShaping(maze("double_t_maze", max_steps=30),
                           {"potential": "oracle", "gamma": 0.9})
    misleading = RewardShaping(maze("double_t_maze", max_steps=30),
                               {"potential": "oracle", "gamma": 0.9, "scale": 3.0})
    # a potential that is highest far from the goal: shaping pulls the wrong way at every
    # step, yet a potential-based term cannot change which policy is optimal
    misleading.potential = lambda state, legal=None: -3.0 * RewardShaping.potential(
        oracle, state, legal)
    policies = [greedy_after_q_learning(env) for env in (plain, oracle, misleading)]
    assert all(optimal(plain, policy) for policy in policies)
    broken = RewardShaping(maze("double_t_maze", max_steps=30),
                           {"potential": "oracle", "gamma": 0.9})
    # the same pull added as a plain bonus (not a difference of potentials) does change it
    broken.step = lambda a: _bonus_step(broken, a, misleading)
    assert not optimal(plain, greedy_after_q_learning(broken))


def _bonus_step(env: RewardShaping, action: int, source: RewardShaping) -> Any:
    obs, reward, terminated, truncated, info = env.env.step(action)
    bonus = 0.0 if terminated else source.potential(obs) / 3.0
    return obs, reward + bonus, terminated, truncated, info


def test_terminal_potential_is_zero_and_info_keeps_the_reward() -> None:
    env = RewardShaping(maze("umaze"), {"potential": "oracle", "gamma": 0.9})
    env.reset(options={"start": (2, 3)})
    _, reward, terminated, _, info = env.step(3)  # down onto the goal (3, 3)
    assert terminated and info["unshaped_reward"] == 1.0
    d_max = max(bfs_distances(env.unwrapped.grid, env.unwrapped.goal).values())
    assert info["shaping"] == pytest.approx(1.0 / d_max)  # 0.9 * 0 - (-1/d_max)
    assert reward == pytest.approx(1.0 + 1.0 / d_max)


def score_by_distance(messages: list[dict[str, str]], schema: dict | None) -> str:
    """A stand-in model: closer goals get higher scores (from the describer's words)."""
    text = messages[-1]["content"]
    for score, words in ((9, "right next to you"), (6, "near"), (3, "a fair way off")):
        if words in text:
            return json.dumps({"score": score})
    return json.dumps({"score": 0})


def test_llm_potential_one_call_per_state_cached_and_scaled(tmp_path) -> None:
    backend = ScriptedBackend(script=score_by_distance, cache_path=tmp_path / "c.sqlite")
    env = RewardShaping(maze("medium"), {"potential": "llm", "scale": 2.0}, backend=backend)
    env.prepare()
    base = env.unwrapped
    states = len(base.free_cells()) - 1
    assert env.stats()["llm_calls"] == states == len(set(backend.asked))
    assert set(env.potentials.values()) <= {0.0, 0.6, 1.2, 1.8}
    env.reset(seed=0)
    for _ in range(20):
        env.step(int(np.random.default_rng(0).choice(base.legal_moves_at(base.cell))))
    assert env.stats()["llm_calls"] == states  # every state was scored already
    assert spearman_with_distance(env) > 0.8
    rerun = RewardShaping(maze("medium"), {"potential": "llm"}, backend=ScriptedBackend(
        script=score_by_distance, cache_path=tmp_path / "c.sqlite"))
    rerun.prepare()
    assert rerun.stats()["llm_calls"] == 0 and rerun.stats()["llm_cache_hits"] == states


class Unchecked:
    """A backend that does not enforce schemas (any object with chat() may be one)."""

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def chat(self, messages: Any, schema: Any = None, max_tokens: Any = None) -> str:
        return self.reply


@pytest.mark.parametrize("reply", ['{"score": 12}', '{"score": -1}', '{"score": "high"}',
                                   "seven"])
def test_a_potential_reply_out_of_range_fails_before_training(reply: str) -> None:
    env = RewardShaping(maze("umaze"), {"potential": "llm"}, backend=Unchecked(reply))
    with pytest.raises(ValueError, match=re.escape("out of range; expected JSON {'score': N} "
                                                   "with N in 0..10")):
        env.prepare()


def test_bad_shaping_settings_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"gamma\n.*less than or equal to 1 .*input_value=1.5"):
        RewardShaping(maze(), {"gamma": 1.5})
    with pytest.raises(ValueError, match=r"scale\n.*greater than 0 .*input_value=-1.0"):
        RewardShaping(maze(), {"scale": -1.0})
    with pytest.raises(ValueError, match=r"scale\n.*a finite number .*input_value=inf"):
        RewardShaping(maze(), {"scale": float("inf")})
    with pytest.raises(ValueError, match="potential 'oracle': no oracle can plan on"):
        RewardShaping(gym.make("langadapt/CartPole-v0"), {"potential": "oracle"})
    with pytest.raises(ValueError, match="form 'judge' needs potential 'llm'"):
        RewardShaping(maze(), {"potential": "oracle", "form": "judge"})


def test_judge_form_adds_the_bonus_once_per_transition_prompt() -> None:
    backend = ScriptedBackend(script=lambda m, s: json.dumps({"judgement": 1}))
    env = RewardShaping(maze("umaze"), {"form": "judge", "scale": 0.1}, backend=backend)
    env.reset(seed=0)
    _, reward, *_ , info = env.step(2)
    assert info["shaping"] == pytest.approx(0.1) and reward == pytest.approx(0.1)
    env.reset(seed=0)
    env.step(2)
    assert env.stats()["judgements"] == 1 and env.stats()["llm_calls"] == 1


def test_shaped_runs_are_evaluated_on_the_environments_own_reward(tmp_path) -> None:
    import csv

    import yaml

    from langadapt.experiments.config import load_config
    from langadapt.experiments.runner import run_experiment

    data = {
        "name": "shaping",
        "environment": {"id": "langadapt/Maze-v0",
                        "params": {"maze": "umaze", "step_reward": 0.0},
                        "reward_shaping": {"potential": "oracle", "gamma": 0.9}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "qlearning", "params": {"gamma": 0.9}}],
        "training": {"episodes": 30}, "seeds": 1,
        "evaluation": {"every": 10, "episodes": 1, "final_episodes": 2},
    }
    path = tmp_path / "shaping.yaml"
    path.write_text(yaml.safe_dump(data))
    out = run_experiment(load_config(path), out_dir=tmp_path / "out", progress=False,
                         log=lambda _: None)
    rows = list(csv.DictReader(open(out / "episodes.csv")))
    final = [r for r in rows if r["phase"] == "final"]
    assert final and all(float(r["return"]) in (0.0, 1.0) for r in final)
    train_returns = {float(r["return"]) for r in rows if r["phase"] == "train"}
    assert train_returns - {0.0, 1.0}  # training rewards carry the shaping term
