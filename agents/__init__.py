"""RL agents that work on raw vectors, 384-dim language encodings and descriptions alike.

Public names: the agents (:class:`QLearningAgent`, :class:`DQNAgent`, :class:`RandomAgent`)
with their pydantic configs, :func:`make_agent` / :func:`register_agent`, the loop
(:func:`train`, :func:`evaluate`, :class:`EpisodeRecord`, :class:`TrainingResult`) and
:func:`read_agent_file` (the one save format). Agents know only gymnasium spaces.
"""

from langadapt.agents.base import Agent, read_agent_file
from langadapt.agents.dqn import DQNAgent, DQNConfig, dqn_targets, q_network
from langadapt.agents.qlearning import QLearningAgent, QLearningConfig
from langadapt.agents.random_agent import RandomAgent
from langadapt.agents.registry import AGENTS, make_agent, register_agent
from langadapt.agents.training import EpisodeRecord, Evaluation, TrainingResult, evaluate, train

__all__ = [
    "AGENTS",
    "Agent",
    "DQNAgent",
    "DQNConfig",
    "EpisodeRecord",
    "Evaluation",
    "QLearningAgent",
    "QLearningConfig",
    "RandomAgent",
    "TrainingResult",
    "dqn_targets",
    "evaluate",
    "make_agent",
    "q_network",
    "read_agent_file",
    "register_agent",
    "train",
]
