"""`LanguageVectorEnv`: N copies of an environment under one adapter, each ``reset`` /
``step`` adapted in one ``adapt_many`` batch (autoreset ``SAME_STEP``). See
docs/adapters.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .history import check_history_length
from .memory import Frames
from .wrapper import recorded_action

__all__ = ["LanguageVectorEnv"]

History = list[tuple[Any, Any]] | deque[tuple[Any, Any]]


class LanguageVectorEnv(VectorEnv):
    """``LanguageVectorEnv(envs, adapter, history_length=None)``: N distinct copies of one
    environment observed through ``adapter``; copy ``i`` resets with ``seed + i``, ended
    copies' final observations are in ``infos["final_obs"]`` (docs/agents.md)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, envs: Sequence[gym.Env], adapter: Any,
                 history_length: int | None = None) -> None:
        if isinstance(envs, gym.Env) or not isinstance(envs, Sequence) or not envs:
            raise ValueError(f"envs={envs!r}: expected a non-empty list of environments")
        for env in envs:
            if not isinstance(env, gym.Env):
                raise ValueError(f"envs holds {env!r}, expected gymnasium environments")
        if len({id(env) for env in envs}) != len(envs):
            raise ValueError("envs holds one environment more than once; expected distinct "
                             "copies (e.g. [gymnasium.make(id) for _ in range(n)])")
        action_space = envs[0].action_space
        if any(env.action_space != action_space for env in envs):
            raise ValueError("the envs have different action spaces; expected copies of one "
                             "environment")
        if not callable(getattr(adapter, "adapt_many", None)):
            raise ValueError(f"adapter {adapter!r} has no adapt_many() method; expected an "
                             "adapter from adapters.make(...)")
        check_history_length(history_length)
        self.envs, self.adapter, self.history_length = list(envs), adapter, history_length
        self.num_envs = len(self.envs)
        self.single_observation_space = adapter.observation_space
        self.single_action_space = action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(action_space, self.num_envs)
        self._all_moves = (list(range(action_space.n))
                           if isinstance(action_space, spaces.Discrete) else [])
        self._box = isinstance(action_space, spaces.Box)  # actions recorded as tuples of floats
        self._histories: list[History] = [self._new_history() for _ in self.envs]
        self._previous: list[Any] = [None] * self.num_envs
        memory = getattr(adapter, "memory", None)
        self._frames = None if memory is None else [
            Frames(memory, int(adapter.frame_space.shape[0]), action_space) for _ in self.envs]

    @property
    def supplies_descriptions(self) -> bool:
        """Whether ``info["description"]`` says what the state means (as the wrapper's)."""
        return bool(getattr(self.adapter, "describes_states", True))

    def get_wrapper_attr(self, name: str) -> Any:
        """An attribute of this environment (as an agent's ``bind`` reads a wrapped env's)."""
        return getattr(self, name)

    def _new_history(self) -> History:
        return [] if self.history_length is None else deque(maxlen=self.history_length)

    def _legal(self, info: dict[str, Any]) -> Any:
        legal = info.get("legal_moves")
        return self._all_moves if legal is None else legal

    def _begin(self, index: int, obs: Any, info: dict[str, Any]) -> tuple[Any, Any, History]:
        """Start copy ``index``'s episode at ``obs``: a new history; its adapter input."""
        history = self._histories[index] = self._new_history()
        self._previous[index] = obs
        return obs, self._legal(info), history

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every copy (copy ``i`` with ``seed + i``); the first observations."""
        super().reset(seed=seed if isinstance(seed, int) else None)
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed is a list of {len(seeds)}, expected one per copy "
                                 f"({self.num_envs})")
        inputs, infos_of = [], []
        for index, (env, copy_seed) in enumerate(zip(self.envs, seeds, strict=True)):
            obs, info = env.reset(seed=copy_seed, options=options)
            inputs.append(self._begin(index, obs, info))
            infos_of.append(info)
        pairs = self.adapter.adapt_many(inputs)
        infos: dict[str, Any] = {}
        for index, (info, (_, text)) in enumerate(zip(infos_of, pairs, strict=True)):
            info["description"] = text
            infos = self._add_info(infos, info, index)
        if self._frames is not None:
            return np.stack([frames.start(vector) for frames, (vector, _)
                             in zip(self._frames, pairs, strict=True)]), infos
        return np.stack([vector for vector, _ in pairs]), infos

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        """Step every copy (one that ended is reset at once); one adapted batch."""
        actions = np.asarray(actions)
        expected = (self.num_envs, *self.single_action_space.shape)
        if actions.shape != expected:
            raise ValueError(f"actions has shape {actions.shape}, expected {expected}: "
                             "one action per copy")
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float64)
        terminations = np.zeros(n, dtype=np.bool_)
        truncations = np.zeros(n, dtype=np.bool_)
        inputs, step_infos, firsts = [], [], {}  # firsts: copy -> its new episode's info
        recorded = [recorded_action(action, self._box) for action in actions]
        for index, env in enumerate(self.envs):
            action = actions[index] if self._box else recorded[index]
            obs, rewards[index], terminations[index], truncations[index], info = env.step(action)
            self._histories[index].append((self._previous[index], recorded[index]))
            self._previous[index] = obs
            inputs.append((obs, self._legal(info), self._histories[index]))
            step_infos.append(info)
            if terminations[index] or truncations[index]:
                first, first_info = env.reset()
                firsts[index] = first_info
                inputs.append(self._begin(index, first, first_info))
        pairs = self.adapter.adapt_many(inputs)
        observations = np.empty((n, *self.single_observation_space.shape), dtype=np.float32)
        infos: dict[str, Any] = {}
        position = 0
        frames = self._frames
        for index, info in enumerate(step_infos):
            vector, info["description"] = pairs[position]
            position += 1
            if frames is not None:
                vector = frames[index].push(vector, recorded[index])
            if index in firsts:  # the episode ended: its final obs, then the next one's first
                infos = self._add_info(infos, {"final_obs": vector.copy(), "final_info": info},
                                       index)
                info = firsts[index]
                vector, info["description"] = pairs[position]
                position += 1
                if frames is not None:
                    vector = frames[index].start(vector)
            observations[index] = vector
            infos = self._add_info(infos, info, index)
        return observations, rewards, terminations, truncations, infos

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()
