"""RL agents that work on raw vectors, 384-dim language encodings and descriptions alike.

Public names: the agents (:class:`QLearningAgent`, :class:`DQNAgent`, :class:`RandomAgent`)
with their pydantic configs, :func:`make_agent` / :func:`register_agent`, the loop
(:func:`train`, :func:`evaluate`, :class:`EpisodeRecord`, :class:`TrainingResult`),
:class:`Discretisation` and :func:`read_agent_file` (the one save format). Agents know only
gymnasium spaces and the environment they are bound to; the LLM roles that act as agents
live in :mod:`langadapt.roles`.
"""

from .base import Agent, read_agent_file
from .discretisation import Discretisation
from .dqn import DQNAgent, DQNConfig, dqn_targets, q_network
from .qlearning import QLearningAgent, QLearningConfig
from .random_agent import RandomAgent
from .registry import AGENTS, make_agent, register_agent
from .training import EpisodeRecord, Evaluation, TrainingResult, evaluate, train

__all__ = [
    "AGENTS",
    "Agent",
    "DQNAgent",
    "DQNConfig",
    "Discretisation",
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
