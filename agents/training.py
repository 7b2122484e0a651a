"""Run any agent on any gymnasium environment: :func:`train` and :func:`evaluate`.

Legal moves are read from ``info["legal_moves"]`` when the environment provides them
(otherwise every action is legal), success from the last step's ``info["is_success"]``
(False when absent). An agent with ``reads_description`` (a Q-table keyed by descriptions)
receives ``info["description"]`` instead of the observation. Both functions return one
:class:`EpisodeRecord` per finished episode; :func:`train` returns them in a
:class:`TrainingResult`, which also says which evaluation chose the retained policy when
``keep_best`` is on. Neither function touches the global random generators of Python,
numpy or torch: the agent, the environment and its action space carry their own.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from .base import Agent
from .base import check_count as _check_count

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


@dataclass
class Evaluation:
    """One greedy evaluation round during training: after ``episode`` training episodes and
    ``total_steps`` steps, the mean return over its episodes."""

    episode: int
    total_steps: int
    mean_return: float


@dataclass
class TrainingResult:
    """What :func:`train` returns: the records (iterating over the result yields them), and
    with ``keep_best`` the evaluation that chose the retained policy (``best``), the last
    evaluation (``last``, of the final policy) and a snapshot of the final policy
    (``last_policy``, for ``agent.restore``)."""

    records: list[EpisodeRecord] = field(default_factory=list)
    best: Evaluation | None = None
    last: Evaluation | None = None
    last_policy: Any = None

    def __iter__(self) -> Iterator[EpisodeRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> EpisodeRecord:
        return self.records[index]


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


def _description(info: dict[str, Any]) -> str:
    text = info.get("description")
    if not isinstance(text, str):
        raise ValueError(
            "the agent reads descriptions (a table keyed by description), but the environment "
            'gives no info["description"]: wrap it in LanguageObservation with a text adapter'
        )
    return text


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
    agent.bind(env)
    records = []
    text = agent.reads_description
    reset_seed: int | None = seed
    for _ in range(episodes):
        t0 = time.perf_counter()
        obs, info = env.reset(seed=reset_seed)
        reset_seed = None
        legal = info.get("legal_moves")
        ret, length = 0.0, 0
        while True:
            action = agent.act(_description(info) if text else obs, legal, False)
            obs, reward, terminated, truncated, info = env.step(action)
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
    eval_every_steps: int | None = None,
    keep_best: bool = False,
) -> TrainingResult:
    """Train ``agent`` on ``env`` for ``episodes`` episodes and/or ``steps`` steps.

    Stops at whichever budget is reached first, or when the agent says its own budget is
    spent (``agent.training_done``, e.g. a policy search's last round scored; such an agent,
    ``has_own_budget``, needs neither budget); an episode cut short by the step budget is not
    recorded. Calls ``agent.bind(env)``, seeds the environment's first reset and its action
    space with ``seed`` and tells the agent the budget (for its exploration schedule).

    Evaluation: after every ``eval_every`` training episodes, and/or at the end of the first
    episode that reaches each multiple of ``eval_every_steps`` steps, ``eval_episodes``
    greedy episodes run on ``eval_env`` (default: ``env``), seeded with
    ``seed + EVAL_SEED_OFFSET`` (held-out starts, the same every round).

    ``keep_best``: keep a copy of the policy of the evaluation with the highest mean return
    (the later one on ties), evaluate the final policy too if training went on after the
    last evaluation, and restore the best at the end. Needs an evaluation schedule.

    ``on_episode`` is called with every record as it is made.
    """
    if episodes is None and steps is None and not agent.has_own_budget:
        raise ValueError("train needs episodes=... or steps=... (or both); got neither")
    _check_count("episodes", episodes)
    _check_count("steps", steps)
    _check_count("eval_every", eval_every)
    _check_count("eval_every_steps", eval_every_steps)
    _check_count("eval_episodes", eval_episodes, optional=False)
    _check_count("seed", seed, minimum=0, optional=False)
    if not isinstance(keep_best, bool):
        raise ValueError(f"keep_best is {keep_best!r}, expected a bool")
    if keep_best and eval_every is None and eval_every_steps is None:
        raise ValueError(
            "keep_best needs an evaluation schedule: set eval_every (training episodes) or "
            "eval_every_steps (environment steps)"
        )
    _check_env(agent, env)
    eval_env = env if eval_env is None else eval_env
    if eval_every is not None or eval_every_steps is not None:
        _check_env(agent, eval_env)

    env.action_space.seed(seed)
    agent.bind(env)
    agent.set_training_horizon(steps=steps, episodes=episodes)
    result = TrainingResult()
    records = result.records
    best_policy: Any = None

    def emit(record: EpisodeRecord) -> None:
        records.append(record)
        if on_episode is not None:
            on_episode(record)

    def run_evaluation(done_episodes: int, total: int) -> float:
        nonlocal best_policy
        # Evaluating on the training env reseeds it; keep the training episodes' RNG
        # stream untouched so later start states do not repeat.
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
        else:
            agent.bind(env)  # back to the training environment
        for rec in evals:
            emit(rec)
        mean = float(np.mean([r.return_ for r in evals]))
        result.last = Evaluation(done_episodes, total, mean)
        if keep_best and (result.best is None or mean >= result.best.mean_return):
            result.best = result.last
            best_policy = agent.snapshot()
        return mean

    bar = tqdm(
        total=steps if steps is not None else episodes,
        unit="step" if steps is not None else "episode",
        desc=f"train {agent.kind}",
        disable=not progress,
        dynamic_ncols=True,
    )
    act, learn, step = agent.act, agent.learn, env.step
    text = agent.reads_description
    total, done_episodes = 0, 0
    next_eval_step = eval_every_steps
    reset_seed: int | None = seed
    try:
        while (episodes is None or done_episodes < episodes) and (steps is None or total < steps):
            t0 = time.perf_counter()
            obs, info = env.reset(seed=reset_seed)
            if text:
                obs = _description(info)
            reset_seed = None
            legal = info.get("legal_moves")
            ret, length = 0.0, 0
            finished = False
            while True:
                action = act(obs, legal, True)
                next_obs, reward, terminated, truncated, info = step(action)
                if text:
                    next_obs = _description(info)
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
            emit(
                EpisodeRecord(
                    episode=done_episodes,
                    return_=ret,
                    length=length,
                    success=bool(info.get("is_success", False)),
                    wall_time=time.perf_counter() - t0,
                    phase="train",
                    total_steps=total,
                )
            )
            postfix = {"return": f"{ret:.3g}"}
            due = eval_every is not None and done_episodes % eval_every == 0
            if next_eval_step is not None and total >= next_eval_step:
                due = True
                next_eval_step = (total // eval_every_steps + 1) * eval_every_steps
            if due:
                postfix["eval"] = f"{run_evaluation(done_episodes, total):.3g}"
            bar.set_postfix(postfix, refresh=False)
            if agent.training_done:
                break
        if keep_best:
            if result.last is None or result.last.total_steps != total:
                run_evaluation(done_episodes, total)  # the final policy is a candidate too
            result.last_policy = agent.snapshot()
            agent.restore(best_policy)
    finally:
        bar.close()
    return result
