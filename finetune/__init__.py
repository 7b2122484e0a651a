"""GRPO fine-tuning of an LLM policy (a causal LM with a LoRA adapter) on environment reward.

    langadapt run grpo_umaze                 # an experiment with an agent of type grpo
    from langadapt.finetune import LoRAPolicy, GRPOTrainer, MazeTask, GRPOAgent

Importing this package registers the ``grpo`` agent (`GRPOAgent`) with ``agents.make_agent``.

Needs the optional dependencies: ``pip install 'langadapt[finetune]'``. See docs/finetune.md.
"""

from ..agents import register_agent
from .agent import GRPOAgent, GRPOAgentConfig
from .export import export_gguf
from .grpo import (
    LOG_COLUMNS,
    GRPOSettings,
    GRPOTrainer,
    MazeTask,
    SnapshotTask,
    group_advantages,
)
from .policy import LoRAPolicy, LoRASettings

__all__ = [
    "LOG_COLUMNS",
    "GRPOAgent",
    "GRPOAgentConfig",
    "GRPOSettings",
    "GRPOTrainer",
    "LoRAPolicy",
    "LoRASettings",
    "MazeTask",
    "SnapshotTask",
    "export_gguf",
    "group_advantages",
]

register_agent("grpo", GRPOAgent)
