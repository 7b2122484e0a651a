"""RL agents that work on raw vectors, 384-dim language encodings and descriptions alike.

Public names: the agents (:class:`QLearningAgent`, :class:`DQNAgent`, :class:`RandomAgent`,
Stable-Baselines3's algorithms as :class:`SB3Agent`, Augmented Random Search as
:class:`ARSAgent` with its :class:`LinearBoxPolicy`) with their pydantic configs,
:func:`make_agent` / :func:`register_agent`, the learner loop (:class:`StepLearner` with its
:class:`Budget` and :class:`Callback` s, :func:`train`, :class:`TensorBoardLog`,
:func:`evaluate`, :class:`EpisodeRecord`, :class:`TrainingResult`),
:class:`Discretisation` and :func:`read_agent_file` (the one save format). Agents know only
gymnasium spaces and the environment they are bound to; the LLM roles that act as agents
live in :mod:`langadapt.roles`.
"""

from .ars import ARSAgent, ARSConfig, ars_update
from .base import Agent, read_agent_file
from .discretisation import Discretisation
from .dqn import DQNAgent, DQNConfig, dqn_targets, q_network
from .linear_policy import LinearBoxPolicy, ObservationStats, clip_range
from .loop import (
    Budget,
    Callback,
    EpisodeRecord,
    Evaluation,
    StepLearner,
    TrainingResult,
    TrainingRun,
    evaluate,
)
from .qlearning import QLearningAgent, QLearningConfig
from .random_agent import RandomAgent
from .registry import AGENTS, make_agent, register_agent
from .sb3_agent import SB3Agent, SB3Config
from .training import TensorBoardLog, train

__all__ = [
    "AGENTS",
    "ARSAgent",
    "ARSConfig",
    "Agent",
    "Budget",
    "Callback",
    "DQNAgent",
    "DQNConfig",
    "Discretisation",
    "EpisodeRecord",
    "Evaluation",
    "LinearBoxPolicy",
    "ObservationStats",
    "QLearningAgent",
    "QLearningConfig",
    "RandomAgent",
    "SB3Agent",
    "SB3Config",
    "StepLearner",
    "TensorBoardLog",
    "TrainingResult",
    "TrainingRun",
    "ars_update",
    "clip_range",
    "dqn_targets",
    "evaluate",
    "make_agent",
    "q_network",
    "read_agent_file",
    "register_agent",
    "train",
]
