"""GRPO fine-tuning of an LLM policy (a causal LM with a LoRA adapter) on environment reward.

    langadapt finetune configs/grpo_umaze.yaml          # the command
    from langadapt.finetune import LoRAPolicy, GRPOTrainer, MazeTask, run_finetune

Needs the optional dependencies: ``pip install 'langadapt[finetune]'``. See docs/finetune.md.
"""

from .export import export_gguf
from .grpo import (
    LOG_COLUMNS,
    GRPOSettings,
    GRPOTrainer,
    MazeTask,
    MiniGridTask,
    group_advantages,
)
from .policy import LoRAPolicy, LoRASettings

__all__ = [
    "LOG_COLUMNS",
    "GRPOSettings",
    "GRPOTrainer",
    "LoRAPolicy",
    "LoRASettings",
    "MazeTask",
    "MiniGridTask",
    "export_gguf",
    "group_advantages",
]
