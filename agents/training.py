"""Run any agent on any gymnasium environment: :func:`train` and :func:`evaluate`.

Legal moves are read from ``info["legal_moves"]`` when the environment provides them
(otherwise every action is legal), success from the last step's ``info["is_success"]``
(False when absent). Both functions return one :class:`EpisodeRecord` per finished episode.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm.auto import tqdm

from langadapt.agents.base import Agent
from langadapt.agents.base import check_count as _check_count

#: Offset added to the training seed to seed evaluation episodes (so they differ from the
#: training episodes' initial states but are the same at every evaluation round).
EVAL_SEED_OFFSET = 100_000


@dataclass
class EpisodeRecord:
    """One finished episode.

    ``episode``: training episodes completed when the record was made (for a training
    episode, its 1-based index; evaluation episodes run after training episode ``episode``).
    ``return_``: undiscounted sum of rewards. ``length``: steps. ``success``: the last step's
    ``info["is_success"]``. ``wall_time``: seconds this episode took (acting, environment and,
    in training, learning). ``phase``: ``"train"`` or ``"eval"``. ``total_steps``: training
    environment steps taken so far.
    """

    episode: int
    return_: float
    length: int
    success: bool
    wall_time: float
    phase: str
    total_steps: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy's global RNG and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _env_rng_state(env: gym.Env) -> Any:
    """A copy of the environment's ``np_random`` (None when it has none)."""
    rng = getattr(env.unwrapped, "_np_random", None)
    if not isinstance(rng, np.random.Generator):
        return None
    return copy.deepcopy(rng.bit_generator.state)


def _set_env_rng_state(env: gym.Env, state: Any) -> None:
    rng = getattr(env.unwrapped, "_np_random", None)
    if isinstance(rng, np.random.Generator):
        rng.bit_generator.state = state


def _check_env(agent: Agent, env: gym.Env) -> None:
    if not isinstance(env, gym.Env):
        raise ValueError(f"env is {env!r}, expected a gymnasium.Env")
    if env.action_space != agent.action_space:
        raise ValueError(
            f"env action_space is {env.action_space!r}, but the agent was built for "
            f"{agent.action_space!r}"
        )
    shape = tuple(env.observation_space.shape or ())
    if shape != agent.obs_shape:
        raise ValueError(
            f"env observation shape is {shape}, but the agent was built for {agent.obs_shape}"
        )


def evaluate(
    agent: Agent,
    env: gym.Env,
    episodes: int,
    seed: int,
    total_steps: int = 0,
    after_episode: int = 0,
) -> list[EpisodeRecord]:
    """Run ``episodes`` greedy episodes without learning.

    The first reset uses ``seed`` and later ones continue the environment's RNG, so the
    same ``seed`` gives the same sequence of initial states.
    """
    _check_count("episodes", episodes, optional=False)
    _check_count("seed", seed, minimum=0, optional=False)
    _check_count("total_steps", total_steps, minimum=0, optional=False)
    _check_count("after_episode", after_episode, minimum=0, optional=False)
    _check_env(agent, env)
    records = []
    reset_seed: int | None = seed
    for _ in range(episodes):
        t0 = time.perf_counter()
        obs, info = env.reset(seed=reset_seed)
        reset_seed = None
        legal = info.get("legal_moves")
        ret, length = 0.0, 0
        while True:
            obs, reward, terminated, truncated, info = env.step(agent.act(obs, legal, False))
            legal = info.get("legal_moves")
            ret += float(reward)
            length += 1
            if terminated or truncated:
                break
        records.append(
            EpisodeRecord(
                episode=after_episode,
                return_=ret,
                length=length,
                success=bool(info.get("is_success", False)),
                wall_time=time.perf_counter() - t0,
                phase="eval",
                total_steps=total_steps,
            )
        )
    return records


def train(
    agent: Agent,
    env: gym.Env,
    episodes: int | None = None,
    steps: int | None = None,
    eval_every: int | None = None,
    eval_episodes: int = 10,
    seed: int = 0,
    progress: bool = True,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    eval_env: gym.Env | None = None,
) -> list[EpisodeRecord]:
    """Train ``agent`` on ``env`` for ``episodes`` episodes and/or ``steps`` steps.

    Stops at whichever budget is reached first; an episode cut short by the step budget is
    not recorded. Seeds Python, numpy, torch, the environment's first reset and its action
    space with ``seed``, and tells the agent the budget (for its exploration schedule).
    Every ``eval_every`` training episodes, runs ``eval_episodes`` greedy episodes on
    ``eval_env`` (default: ``env``) seeded with ``seed + EVAL_SEED_OFFSET``.
    ``on_episode`` is called with every record as it is made. Returns all records, training
    and evaluation, in the order they were made.
    """
    if episodes is None and steps is None:
        raise ValueError("train needs episodes=... or steps=... (or both); got neither")
    _check_count("episodes", episodes)
    _check_count("steps", steps)
    _check_count("eval_every", eval_every)
    _check_count("eval_episodes", eval_episodes, optional=False)
    _check_count("seed", seed, minimum=0, optional=False)
    _check_env(agent, env)
    eval_env = env if eval_env is None else eval_env
    if eval_every is not None:
        _check_env(agent, eval_env)

    seed_everything(seed)
    env.action_space.seed(seed)
    agent.set_training_horizon(steps=steps, episodes=episodes)
    records: list[EpisodeRecord] = []
    bar = tqdm(
        total=steps if steps is not None else episodes,
        unit="step" if steps is not None else "episode",
        desc=f"train {agent.kind}",
        disable=not progress,
        dynamic_ncols=True,
    )
    act, learn, step = agent.act, agent.learn, env.step
    total, done_episodes = 0, 0
    reset_seed: int | None = seed
    try:
        while (episodes is None or done_episodes < episodes) and (steps is None or total < steps):
            t0 = time.perf_counter()
            obs, info = env.reset(seed=reset_seed)
            reset_seed = None
            legal = info.get("legal_moves")
            ret, length = 0.0, 0
            finished = False
            while True:
                action = act(obs, legal, True)
                next_obs, reward, terminated, truncated, info = step(action)
                next_legal = info.get("legal_moves")
                learn(obs, action, reward, next_obs, terminated, truncated, next_legal)
                ret += float(reward)
                length += 1
                total += 1
                obs, legal = next_obs, next_legal
                if terminated or truncated:
                    finished = True
                    break
                if steps is not None and total >= steps:
                    break
            if steps is not None:
                bar.update(length)
            if not finished:
                break
            done_episodes += 1
            if steps is None:
                bar.update(1)
            record = EpisodeRecord(
                episode=done_episodes,
                return_=ret,
                length=length,
                success=bool(info.get("is_success", False)),
                wall_time=time.perf_counter() - t0,
                phase="train",
                total_steps=total,
            )
            records.append(record)
            if on_episode is not None:
                on_episode(record)
            postfix = {"return": f"{ret:.3g}"}
            if eval_every is not None and done_episodes % eval_every == 0:
                # Evaluating on the training env reseeds it; keep the training episodes'
                # RNG stream untouched so later start states do not repeat.
                saved = _env_rng_state(env) if eval_env is env else None
                evals = evaluate(
                    agent,
                    eval_env,
                    eval_episodes,
                    seed + EVAL_SEED_OFFSET,
                    total_steps=total,
                    after_episode=done_episodes,
                )
                if saved is not None:
                    _set_env_rng_state(env, saved)
                for rec in evals:
                    records.append(rec)
                    if on_episode is not None:
                        on_episode(rec)
                postfix["eval"] = f"{np.mean([r.return_ for r in evals]):.3g}"
            bar.set_postfix(postfix, refresh=False)
    finally:
        bar.close()
    return records
