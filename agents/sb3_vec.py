"""SB3 ``VecEnv`` over one environment or a ``SAME_STEP`` vector env: counts steps, records each
finished episode in copy order, answers ``action_masks()`` from ``info["legal_moves"]``.
Imports stable_baselines3 (the ``sb3`` extra). See docs/agents.md (type: sb3)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from .loop import EpisodeRecord, TrainingRun, info_at


def legal_mask(legal_moves: Sequence[int] | None, n: int) -> np.ndarray:
    """The boolean mask of ``legal_moves`` over ``n`` actions (all True for None)."""
    if legal_moves is None:
        return np.ones(n, dtype=bool)
    mask = np.zeros(n, dtype=bool)
    mask[list(legal_moves)] = True
    return mask


class _Episodes:
    """Per-copy returns and lengths; ``finish`` records copy ``i``'s episode in ``run``."""

    def __init__(self, run: TrainingRun, n: int) -> None:
        self.run = run
        self.returns, self.lengths = [0.0] * n, [0] * n
        self.last = time.perf_counter()

    def step(self, index: int, reward: float) -> None:
        self.returns[index] += reward
        self.lengths[index] += 1
        self.run.steps += 1

    def finish(self, index: int, success: bool) -> None:
        run = self.run
        run.episodes += 1
        run.record(EpisodeRecord(
            episode=run.episodes, return_=self.returns[index], length=self.lengths[index],
            success=success, wall_time=time.perf_counter() - self.last, phase="train",
            total_steps=run.steps))
        self.returns[index], self.lengths[index], self.last = 0.0, 0, time.perf_counter()


class RecordedEpisodes(gym.Wrapper):
    """One environment for SB3: counts steps, records each finished episode (callbacks run
    while the environment is still at the episode's end), and gives ``action_masks()``."""

    def __init__(self, env: gym.Env, run: TrainingRun) -> None:
        super().__init__(env)
        self.episodes = _Episodes(run, 1)
        self._legal: Sequence[int] | None = None

    def action_masks(self) -> np.ndarray:
        return legal_mask(self._legal, int(self.action_space.n))

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self.episodes.returns[0], self.episodes.lengths[0] = 0.0, 0
        self.episodes.last = time.perf_counter()
        self._legal = info.get("legal_moves")
        return obs, info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._legal = info.get("legal_moves")
        self.episodes.step(0, float(reward))
        if terminated or truncated:
            self.episodes.finish(0, bool(info.get("is_success", False)))
        return obs, reward, terminated, truncated, info


class RecordedCopies(VecEnv):
    """The copies of ``envs`` (a gymnasium ``VectorEnv``, autoreset ``SAME_STEP``) as an SB3
    ``VecEnv``: copy ``i`` first resets with ``seed + i`` (SB3's ``seed()``), a finished
    copy's final observation is SB3's ``terminal_observation``."""

    def __init__(self, envs: VectorEnv, run: TrainingRun) -> None:
        mode = envs.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"the vector env's autoreset_mode is {mode!r}, expected "
                             "AutoresetMode.SAME_STEP")
        super().__init__(envs.num_envs, envs.single_observation_space, envs.single_action_space)
        self.envs, self.episodes = envs, _Episodes(run, envs.num_envs)
        self._legal: list[Any] = [None] * envs.num_envs
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        obs, infos = self.envs.reset(seed=seed)
        self._reset_seeds()
        self._legal = [info_at(infos, i).get("legal_moves") for i in range(self.num_envs)]
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, terminated, truncated, infos = self.envs.step(self._actions)
        dones = np.logical_or(terminated, truncated)
        out = []
        for i in range(self.num_envs):
            info = info_at(infos, i)  # a finished copy's: its next episode's first step
            self._legal[i] = info.get("legal_moves")
            self.episodes.step(i, float(rewards[i]))
            if dones[i]:
                end = info_at(infos["final_info"], i)
                self.episodes.finish(i, bool(end.get("is_success", False)))
                info = {**end, "terminal_observation": infos["final_obs"][i],
                        "TimeLimit.truncated": bool(truncated[i] and not terminated[i])}
            out.append(info)
        return obs, rewards.astype(np.float32), dones, out

    def action_masks(self) -> np.ndarray:
        n = int(self.action_space.n)
        return np.stack([legal_mask(legal, n) for legal in self._legal])

    # ------------------------------------------------- SB3's VecEnv interface
    def _indices(self, indices: Any) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        return [indices] if isinstance(indices, int) else list(indices)

    def env_method(self, method_name: str, *args: Any, indices: Any = None,
                   **kwargs: Any) -> list[Any]:
        if method_name != "action_masks":
            raise AttributeError(f"{method_name}: the copies answer only action_masks")
        masks = self.action_masks()
        return [masks[i] for i in self._indices(indices)]

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        if attr_name == "action_masks":
            return [self.action_masks] * len(self._indices(indices))
        if attr_name == "render_mode":
            return [None] * len(self._indices(indices))
        raise AttributeError(f"{attr_name}: not an attribute the copies share with SB3")

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise AttributeError(f"{attr_name}: the copies' attributes are not set through SB3")

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(self._indices(indices))

    def close(self) -> None:
        """The environments are the caller's: nothing to close here."""
