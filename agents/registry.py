"""Agents by name: ``make_agent(name, observation_space, action_space, **hyperparameters)``;
the LLM roles register themselves when :mod:`langadapt.roles` is imported."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from .ars import ARSAgent
from .base import Agent
from .dqn import DQNAgent
from .qlearning import QLearningAgent
from .random_agent import RandomAgent
from .sb3_agent import SB3Agent

AGENTS: dict[str, type[Agent]] = {
    "qlearning": QLearningAgent,
    "dqn": DQNAgent,
    "random": RandomAgent,
    "ars": ARSAgent,  # Augmented Random Search: linear policies on Box actions
    "sb3": SB3Agent,  # Stable-Baselines3 (the sb3 extra, imported when one is built)
}


def register_agent(name: str, cls: type[Agent]) -> None:
    """Make ``cls`` available to :func:`make_agent` under ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"agent name is {name!r}, expected a non-empty string")
    AGENTS[name] = cls


def make_agent(
    name: str,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    seed: int = 0,
    **hyperparameters: Any,
) -> Agent:
    """Build the agent registered as ``name``; hyperparameters go to its pydantic config
    (unknown names raise ``pydantic.ValidationError``)."""
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}, expected one of {sorted(AGENTS)}")
    return AGENTS[name](observation_space, action_space, config=hyperparameters, seed=seed)
