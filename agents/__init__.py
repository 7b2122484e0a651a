"""RL agents on raw vectors, language encodings and descriptions, the learner loop, its
callbacks and the one save format. See docs/agents.md."""

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
