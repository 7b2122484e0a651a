"""Helpers shared by the tests of the reward wrappers (tests/test_reward_shaping.py,
tests/test_instructions.py)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from langadapt import agents


def q_learning_from_random_starts(env: gym.Env, episodes: int, seed: int = 0) -> Any:
    """Tabular Q-learning (gamma 0.9, epsilon 0.3) on a maze ``env`` (wrapped or not), every
    episode from a random non-goal cell; returns the agent."""
    base = env.unwrapped
    cells = [c for c in base.free_cells() if c != base.goal]
    agent = agents.make_agent("qlearning", env.observation_space, env.action_space, seed=seed,
                              alpha=0.5, gamma=0.9, epsilon_start=0.3, epsilon_min=0.3,
                              epsilon_decay=1.0)
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        obs, info = env.reset(options={"start": cells[int(rng.integers(len(cells)))]})
        done = False
        while not done:
            action = agent.act(obs, info["legal_moves"], True)
            nxt, reward, terminated, truncated, info = env.step(action)
            agent.learn(obs, action, reward, nxt, terminated, truncated, info["legal_moves"])
            obs, done = nxt, terminated or truncated
    return agent
