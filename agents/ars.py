"""Augmented Random Search (Mania, Guy and Recht 2018, V1/V2 and -t): a linear policy on Box
actions improved by finite differences along random directions; ``iterations`` is its own
budget. The update and settings: docs/policy-search.md (continuous control)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .base import Agent, take
from .linear_policy import LinearBoxPolicy, ObservationStats, clip_range
from .loop import Budget, Callback, TrainingResult, end_run, run_episode, start_run

__all__ = ["ARSAgent", "ARSConfig", "ars_update"]


class ARSConfig(BaseModel):
    """Settings of :class:`ARSAgent` (the paper's symbols in brackets)."""

    model_config = ConfigDict(extra="forbid")

    version: Literal["V1", "V2"] = Field("V2", description="V2 normalises observations")
    iterations: int = Field(50, gt=0, description="updates; 2 * directions episodes each")
    directions: int = Field(8, gt=0, description="directions per iteration (N)")
    top_directions: int | None = Field(
        None, gt=0, description="directions used in the update (b); none = all (N)")
    step_size: float = Field(0.02, gt=0, description="step size (alpha)")
    noise: float = Field(0.03, gt=0, description="exploration noise (nu)")
    action_bounds: list[tuple[float, float]] | None = Field(
        None, description="the clip range per action dimension (needed for infinite bounds)")

    @model_validator(mode="after")
    def _top(self) -> ARSConfig:
        if self.top_directions is not None and self.top_directions > self.directions:
            raise ValueError(f"top_directions is {self.top_directions}, expected at most "
                             f"directions ({self.directions})")
        return self


def ars_update(theta: np.ndarray, deltas: np.ndarray, returns_plus: Sequence[float],
               returns_minus: Sequence[float], step_size: float, top: int | None = None
               ) -> np.ndarray:
    """ARS's step: ``theta + step_size / (b * sigma_R) * sum (r+_k - r-_k) delta_k`` over the
    ``top`` (b) directions by ``max(r+_k, r-_k)``; sigma_R is the std of their 2b returns (a
    std of 0 counts as 1: every difference is then 0 too)."""
    plus, minus = np.asarray(returns_plus, float), np.asarray(returns_minus, float)
    b = len(plus) if top is None else top
    order = np.argsort(-np.maximum(plus, minus), kind="stable")[:b]
    used = np.concatenate([plus[order], minus[order]])
    sigma = float(used.std()) or 1.0
    step = np.tensordot(plus[order] - minus[order], deltas[order], axes=1)
    return theta + step_size / (b * sigma) * step


class ARSAgent(Agent):
    """Augmented Random Search over linear policies (docs/policy-search.md)."""

    kind = "ars"
    config_model = ARSConfig
    config: ARSConfig
    box_actions = True

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 config: ARSConfig | dict[str, Any] | None = None, seed: int = 0) -> None:
        super().__init__(observation_space, action_space, config, seed)
        if not isinstance(action_space, spaces.Box):
            raise ValueError(f"agent ars writes linear policies for a Box action space, but "
                             f"the action space is {action_space!r}")
        if not isinstance(observation_space, spaces.Box) or len(self.obs_shape) != 1:
            raise ValueError(
                f"observation_space is {observation_space!r}, expected a one-dimensional Box")
        self.obs_dim = int(self.obs_shape[0])
        self.low, self.high = clip_range(action_space, self.config.action_bounds)
        self.shape = (len(self.low), self.obs_dim + 1)
        self.reset_search()

    def reset_search(self) -> None:
        """Start afresh: theta = 0, no statistics, iteration 0."""
        self.theta = np.zeros(self.shape)
        self.obs_stats = ObservationStats(self.obs_dim)
        self.iteration = 0
        self.finished = False
        self.policy = self._policy(self.theta)
        self.candidate = self.policy
        self.counters = {"iterations": 0, "episodes": 0, "env_steps": 0}

    def _policy(self, weights: np.ndarray) -> LinearBoxPolicy:
        mean, std = (self.obs_stats.snapshot() if self.config.version == "V2" else (None, None))
        return LinearBoxPolicy(weights, self.low, self.high, mean, std,
                               self.action_space.dtype.type)

    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> np.ndarray:
        """The perturbed policy being run (``explore``) or the current theta's action."""
        return (self.candidate if explore else self.policy).action(
            np.asarray(obs, dtype=np.float32))

    def learn(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError("ars learns from whole episodes: train it with agents.train (or "
                         "agent.learner().learn), not transition by transition")

    def learner(self, override: Any = None) -> ARSLearner:
        if override is not None:
            raise ValueError("an advisor replaces actions a step learner learns from; ars "
                             "scores whole episodes of perturbed policies")
        return ARSLearner(self)

    def update(self, deltas: np.ndarray, plus: Sequence[float], minus: Sequence[float],
               observations: np.ndarray) -> None:
        """One iteration's step, then the statistics take in its ``observations``."""
        cfg = self.config
        self.theta = ars_update(self.theta, deltas, plus, minus, cfg.step_size,
                                cfg.top_directions)
        if cfg.version == "V2":
            self.obs_stats.update(observations)
        self.iteration += 1
        self.counters["iterations"] += 1
        self.finished = self.iteration >= cfg.iterations
        self.policy = self.candidate = self._policy(self.theta)

    def count_step(self, *_: Any) -> None:
        self.counters["env_steps"] += 1

    def stats(self) -> dict[str, float]:
        """Iterations, episodes and environment steps so far."""
        return dict(self.counters)

    # ------------------------------------------------------------ copies, files
    def snapshot(self) -> tuple[np.ndarray, LinearBoxPolicy]:
        return self.theta.copy(), self.policy

    def restore(self, snapshot: tuple[np.ndarray, LinearBoxPolicy]) -> None:
        self.theta, self.policy = snapshot[0].copy(), snapshot[1]
        self.candidate = self.policy

    def header(self) -> dict[str, Any]:
        return super().header() | {"action_shape": list(self.action_space.shape),
                                   "ars_version": self.config.version}

    def get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        state, _ = super().get_state()
        state |= {"iteration": self.iteration, "counters": self.counters}
        return state, {"theta": torch.as_tensor(self.theta),
                       "mean": torch.as_tensor(self.policy.mean),
                       "std": torch.as_tensor(self.policy.std)}

    def set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        super().set_state(state, tensors)
        self.iteration, self.counters = int(state["iteration"]), dict(state["counters"])
        self.theta = take(tensors, "theta", self.shape).numpy().copy()
        mean = take(tensors, "mean", (self.obs_dim,)).numpy()
        std = take(tensors, "std", (self.obs_dim,)).numpy()
        self.policy = self.candidate = LinearBoxPolicy(
            self.theta, self.low, self.high, mean, std, self.action_space.dtype.type)


class ARSLearner:
    """The loop of :class:`ARSAgent`: iterations of ``2 * directions`` episodes, each
    recorded for the callbacks, until the iterations are done or the budget is spent."""

    def __init__(self, agent: ARSAgent) -> None:
        self.agent = agent

    def learn(self, env: gym.Env, budget: Budget,
              callbacks: Sequence[Callback] = ()) -> TrainingResult:
        agent, cfg = self.agent, self.agent.config
        run = start_run(agent, env, budget, callbacks)
        agent.reset_search()
        seed: int | None = budget.seed
        seen: list[np.ndarray] = []  # the iteration's observations

        def act(obs: Any, _: Any) -> np.ndarray:
            seen.append(np.asarray(obs, dtype=np.float32))
            return agent.candidate.action(seen[-1])

        while not agent.finished:
            deltas = agent.rng.standard_normal((cfg.directions, *agent.shape))
            returns: list[list[float]] = [[], []]
            seen.clear()
            for k in range(cfg.directions):
                for side, sign in enumerate((1.0, -1.0)):
                    if budget.spent(run.episodes, run.steps):
                        return end_run(run)
                    agent.candidate = agent.policy.with_weights(
                        agent.theta + sign * cfg.noise * deltas[k])
                    record = run_episode(run, seed, act, agent.count_step)
                    seed = None
                    if record is None:  # cut short by the step budget
                        return end_run(run)
                    agent.counters["episodes"] += 1
                    returns[side].append(record.return_)
                    if len(returns[1]) == cfg.directions:  # before the record: an
                        agent.update(deltas, *returns, np.asarray(seen))  # evaluation sees it
                    run.record(record)
        return end_run(run)

