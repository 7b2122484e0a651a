"""Advice during training: :class:`LLMAdvisor`, an action override of the step learner that,
with a probability falling to 0, replaces some actions by an LLM's, an oracle's or a random
legal move (``learn_as`` actions or demonstrations); :class:`AdvisedActions` and
:func:`sb3_advice_callback` for Stable-Baselines3. See docs/llm-in-the-loop.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..agents.base import Agent, check_count, parse_config
from ..environments import LanguageSpec, language_for
from .backends import BackendSpec, RoleCounters
from .llm_policy import LLMPolicy
from .oracles import Oracle, oracle_for

__all__ = ["AdvisorConfig", "LLMAdvisor", "AdvisedActions", "sb3_advice_callback"]


class AdvisorConfig(BaseModel):
    """Settings of an advisor (the ``advisor:`` block of an agent in an experiment file),
    explained in docs/llm-in-the-loop.md (Advisor)."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["llm", "oracle", "random"] = "llm"
    probability: float = Field(0.5, ge=0, le=1)  # of taking the advice at the start
    decay_fraction: float = Field(0.5, gt=0, le=1)  # of training, where the advice stops
    replace: Literal["exploratory", "any"] = "exploratory"
    backend: BackendSpec = "llamacpp"  # source llm: decoding, prompt_style too
    decoding: Literal["structured", "text"] = "structured"
    language: dict[str, Any] = Field(default_factory=dict)  # options of the language spec
    prompt_style: Literal["verbose", "compact"] = "verbose"
    learn_as: Literal["auto", "actions", "demonstrations"] = "auto"
    until_confident: bool = False
    min_confidence: float | None = Field(None, ge=0, le=1)

    @field_validator("until_confident")
    @classmethod
    def _confident_needs_demonstrations(cls, value: bool, info: ValidationInfo) -> bool:
        learn_as = info.data.get("learn_as")  # validated before: declared first
        if value and learn_as == "actions":
            raise ValueError("advisor until_confident is true, which needs learn_as: "
                             f"demonstrations or auto (got learn_as: {learn_as})")
        return value


class LLMAdvisor:
    """A suggestion source with its schedule and counters: the step learner's action
    override, and the advice of :class:`AdvisedActions`.

    Two generators seeded with ``seed``: one draws whether to take the advice, one is the
    ``random`` source's."""

    def __init__(
        self, config: AdvisorConfig | dict[str, Any] | None = None, seed: int = 0,
        backend: Any = None,
    ) -> None:
        self.config = parse_config(config, AdvisorConfig)
        check_count("seed", seed, minimum=0, optional=False)
        self.seed = seed
        self.draws = np.random.default_rng(seed)
        self.rng = np.random.default_rng(seed)
        self._backend = backend
        self.env: Any = None
        self.n_actions = 0
        self.spec: LanguageSpec | None = None
        self.policy: LLMPolicy | None = None
        self.oracle: Oracle | None = None
        self.counters = {"advised": 0, "withheld": 0}
        #: whether the last action :meth:`__call__` returned is the advice
        self.advised = False

    @property
    def marks_demonstrations(self) -> bool | None:
        """Whether advised transitions are learnt as demonstrations (``learn_as``); None
        (``auto``): as the agent can."""
        if self.config.until_confident:  # the agent's confidence is a demonstration learner's
            return True
        return {"actions": False, "demonstrations": True}.get(self.config.learn_as)

    def probability(self, progress: float) -> float:
        """``p`` after ``progress`` (0..1) of training: linear from ``probability`` to 0."""
        left = 1.0 - progress / self.config.decay_fraction
        return self.config.probability * min(1.0, max(0.0, left))

    def bind(self, env: Any) -> None:
        """Read states from ``env`` (ValueError when the source cannot serve it); the source
        is built on the first call, later calls only change the environment."""
        first = self.env is None
        self.env = getattr(env, "unwrapped", env)
        if not isinstance(env.action_space, spaces.Discrete):
            raise ValueError(f"action_space is {env.action_space!r}, expected Discrete")
        self.n_actions = int(env.action_space.n)
        if self.config.source == "random" or not first:
            return
        self.spec = language_for(env, **self.config.language)
        if self.config.source == "oracle":
            self.oracle = oracle_for(self.env, "advisor source 'oracle'")
            return
        shape = self.spec.state_shape  # None: the environment's own (Dict/Tuple) states
        space = self.env.observation_space if shape is None else spaces.Box(
            -np.inf, np.inf, shape=shape, dtype=np.float32)
        self.policy = LLMPolicy(
            space, spaces.Discrete(self.n_actions), seed=self.seed, backend=self._backend,
            spec=self.spec,
            config={"backend": self.config.backend, "decoding": self.config.decoding,
                    "prompt_style": self.config.prompt_style},
        )
        self.policy.check_backend()

    def __call__(self, policy: Agent, obs: Any, legal_moves: Sequence[int] | None,
                 action: int, progress: float) -> int:
        """The action to take instead of ``policy``'s exploratory ``action`` after
        ``progress`` of training: the advice with probability ``p``, else ``action``
        (``advised`` says which)."""
        self.advised = False
        p = self.probability(progress)
        if p <= 0.0 or self.draws.random() >= p:
            return action
        if self.config.replace == "exploratory" and action == policy.act(
            obs, legal_moves, False
        ):
            return action  # the agent's greedy choice: tried as it is
        if self.config.until_confident and policy.confident(obs, legal_moves):
            return action  # the agent is sure here: its own choice stands
        advice = self.suggest(legal_moves)
        self.advised = advice is not None
        return action if advice is None else advice

    def suggest(self, legal_moves: Sequence[int] | None) -> int | None:
        """The advised action in the current state; None when the LLM's advice is less
        probable than ``min_confidence`` (counted in ``withheld``) or when the LLM gave no
        usable reply (its policy's random fallback is no advice; counted in
        ``llm_fallbacks``)."""
        if self.env is None:
            raise ValueError("the advisor needs bind(env) first")
        moves = list(range(self.n_actions)) if legal_moves is None else [int(m) for m in
                                                                          legal_moves]
        if self.config.source == "random":
            self.counters["advised"] += 1
            return int(self.rng.choice(moves))
        if self.config.source == "oracle":
            self.counters["advised"] += 1
            return self.oracle.best_move(self.env, moves)
        fallbacks = self.policy.counters["llm_fallbacks"]
        action, probability = self.policy.decide_with_probability(
            self.spec.state_of(self.env), moves)
        if self.policy.counters["llm_fallbacks"] > fallbacks:
            return None
        floor = self.config.min_confidence
        if floor is not None and probability is not None and probability < floor:
            self.counters["withheld"] += 1
            return None
        self.counters["advised"] += 1
        return action

    def stats(self) -> dict[str, float]:
        """``advised`` plus the counters of the ``llm`` source's policy (zeros otherwise)."""
        stats = (self.policy.stats() if self.policy is not None
                 else RoleCounters("decisions", "parse_failures", "corrections").as_stats())
        return {**stats, **self.counters}


class AdvisedActions(gym.Wrapper):
    """A gymnasium wrapper taking the advice with probability ``p(t)`` over ``total_steps`` (for
    libraries with their own loop); the executed action goes in ``info["executed_action"]``;
    ``training = False`` for evaluation."""

    def __init__(
        self, env: gym.Env, config: AdvisorConfig | dict[str, Any] | None = None, *,
        total_steps: int, seed: int = 0, backend: Any = None,
    ) -> None:
        super().__init__(env)
        check_count("total_steps", total_steps, optional=False)
        self.advice = LLMAdvisor(config, seed, backend)
        if self.advice.marks_demonstrations:
            raise ValueError("AdvisedActions: advisor learn_as: demonstrations needs an agent "
                             "that learns from demonstrations (langadapt's dqn); a library "
                             "with its own loop learns advice as actions (learn_as: actions)")
        self.advice.bind(env)
        self.total_steps = int(total_steps)
        self.steps = 0
        self.training = True
        self._legal: list[int] | None = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._legal = info.get("legal_moves")
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        action = int(action)
        if self.training:
            p = self.advice.probability(self.steps / self.total_steps)
            self.steps += 1
            if p > 0.0 and self.advice.draws.random() < p:
                advice = self.advice.suggest(self._legal)
                action = action if advice is None else advice
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._legal = info.get("legal_moves")
        info["executed_action"] = action
        return obs, reward, terminated, truncated, info


def sb3_advice_callback() -> Any:
    """An SB3 callback that puts :class:`AdvisedActions`' executed actions in the replay buffer
    (it overwrites the action arrays in SB3's ``locals`` before the transition is stored)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class AdviceCallback(BaseCallback):
        def _on_step(self) -> bool:
            infos = self.locals.get("infos") or []
            for name in ("buffer_actions", "actions"):
                array = self.locals.get(name)
                if isinstance(array, np.ndarray):
                    for i, info in enumerate(infos):
                        if "executed_action" in info:
                            array.reshape(len(infos), -1)[i] = info["executed_action"]
            return True

    return AdviceCallback()
