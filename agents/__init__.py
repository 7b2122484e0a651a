"""RL agents that work on raw vectors and 384-dim language encodings alike.

Public names: the agents (:class:`QLearningAgent`, :class:`DQNAgent`, :class:`RandomAgent`)
with their pydantic configs, :func:`make_agent`, and the loop (:func:`train`,
:func:`evaluate`, :class:`EpisodeRecord`). Agents know only gymnasium spaces.
"""

from langadapt.agents.base import Agent, read_agent_file
from langadapt.agents.buffers import ReplayBatch, ReplayBuffer
from langadapt.agents.dqn import DQNAgent, DQNConfig, dqn_targets
from langadapt.agents.qlearning import QLearningAgent, QLearningConfig
from langadapt.agents.random_agent import RandomAgent, RandomConfig
from langadapt.agents.registry import AGENTS, make_agent, register_agent
from langadapt.agents.training import EpisodeRecord, evaluate, seed_everything, train

__all__ = [
    "AGENTS",
    "Agent",
    "DQNAgent",
    "DQNConfig",
    "EpisodeRecord",
    "QLearningAgent",
    "QLearningConfig",
    "RandomAgent",
    "RandomConfig",
    "ReplayBatch",
    "ReplayBuffer",
    "dqn_targets",
    "evaluate",
    "make_agent",
    "read_agent_file",
    "register_agent",
    "seed_everything",
    "train",
]
