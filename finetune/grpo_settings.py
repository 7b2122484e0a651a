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
    """Hyperparameters of GRPO (defaults: environment reward only, CPU settings)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(30, ge=1, description="GRPO steps (one gradient step each)")
    group_size: Annotated[int, Strict()] = Field(
        4, ge=2, description="rollouts per start state (G, at least 2: GRPO compares the "
        "rewards within a group, and a group of 1 has no spread)")
    states: Literal["all"] | Annotated[int, Strict(), Field(ge=1)] = Field(
        "all", description="start states per step: 'all' reachable non-goal maze cells, or N")
    group_actions: Literal["cover", "sampled"] = Field(
        "cover", description="first actions of a group: every legal action once, the rest "
        "sampled (cover), or all sampled from the policy")
    min_prob: float = Field(
        0.02, ge=0, lt=0.5, description="an action is not pushed below this probability, nor "
        "above 1 - min_prob (the policy keeps exploring and its logits stay bounded); 0 = off")
    prompt_style: Literal["verbose", "compact"] = Field(
        "verbose", description="the policy's prompt, as llm_policy's prompt_style: verbose "
        "(the describer's sentences) or compact (a few tokens: cheaper steps on a CPU)")
    learning_rate: float = Field(3e-4, gt=0, le=1.0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0, description="gradient clipping; None = off")
    temperature: float = Field(1.0, gt=0, description="policy temperature (sampling and loss)")
    kl_coef: float = Field(0.0, ge=0, description="weight of KL to the frozen model; 0 = off")
    reward: Literal["return", "step"] = Field(
        "return", description="return: the discounted return the environment pays along a "
        "rollout; step: the one-step reward")
    shaping: Literal["none", "oracle"] = Field(
        "none", description="oracle: add potential-based shaping with phi = -BFS distance to "
        "the goal (mazes; an oracle the environment does not have)")
    gamma: float = Field(0.99, gt=0, le=1.0, description="discount of returns and shaping")
    horizon: int | None = Field(
        None, ge=1, description="longest rollout of reward: return; None = the environment's "
        "step limit")
    batch_size: int = Field(16, ge=1, description="states per backward pass (bounds memory)")
    max_minutes: float | None = Field(
        None, gt=0, description="stop after this much training time (wall minutes); None = off")
    max_cpu_minutes: float | None = Field(
        None, gt=0, description="stop after this much training CPU time of the process (CPU "
        "minutes, unaffected by other jobs on the machine); None = off")
    checkpoint_every: int = Field(5, ge=1, description="steps between checkpoints")
    stop_after_solved: int | None = Field(
        3, ge=1, description="maze with states: all: stop, with that policy, once the greedy "
        "rollout has taken the shortest path in this many steps in a row (judged, never "
        "trained on); None = run every step")
    stop_after_tied: int | None = Field(
        3, ge=1, description="stop after this many steps in a row in which every group was "
        "tied (no gradient: the policy has stopped changing); None = run every step")
