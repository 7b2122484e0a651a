"""GRPO fine-tuning of an LLM policy (a causal LM with a LoRA adapter) on environment reward;
registers the ``grpo`` agent. Needs ``pip install 'langadapt[finetune]'``. See docs/finetune.md."""

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
