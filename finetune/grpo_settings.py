"""The settings of GRPO (:class:`GRPOSettings`) and the columns of its step log."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

LOG_COLUMNS = (
    "step", "states", "samples", "decisions", "env_steps", "reward_mean", "reward_std",
    "rollout_success", "groups_skipped", "zero_spread_fraction", "loss", "kl",
    "greedy_success", "greedy_shortest", "greedy_length", "state_accuracy", "step_seconds",
    "train_seconds", "train_cpu_seconds", "wall_seconds", "cpu_seconds", "rss_mb",
    "peak_rss_mb",
)


class GRPOSettings(BaseModel):
    """Hyperparameters of GRPO (defaults: environment reward only, CPU settings), explained
    in docs/finetune.md."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(30, ge=1)
    group_size: Annotated[int, Strict()] = Field(4, ge=2)
    states: Literal["all"] | Annotated[int, Strict(), Field(ge=1)] = "all"
    group_actions: Literal["cover", "sampled"] = "cover"
    min_prob: float = Field(0.02, ge=0, lt=0.5)
    prompt_style: Literal["verbose", "compact"] = "verbose"
    learning_rate: float = Field(3e-4, gt=0, le=1.0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0)
    temperature: float = Field(1.0, gt=0)
    kl_coef: float = Field(0.0, ge=0)
    reward: Literal["return", "step"] = "return"
    shaping: Literal["none", "oracle"] = "none"
    gamma: float = Field(0.99, gt=0, le=1.0)
    horizon: int | None = Field(None, ge=1)
    batch_size: int = Field(16, ge=1)
    max_minutes: float | None = Field(None, gt=0)
    max_cpu_minutes: float | None = Field(None, gt=0)
    checkpoint_every: int = Field(5, ge=1)
    stop_after_solved: int | None = Field(3, ge=1)
    stop_after_tied: int | None = Field(3, ge=1)
