"""The learner loop: :class:`StepLearner` trains step-by-step learners over one environment or
N ``SAME_STEP`` copies, with an optional action override (an advisor); callbacks do the rest.
See docs/agents.md (Policy, learner, callbacks; Many environments per learner)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv


class Policy(Protocol):
    """What a learner and :func:`evaluate` need of an agent (:class:`agents.base.Agent`):
    ``trusted("act")`` and a step learner's ``trusted("learn")`` are its ``act`` and ``learn``
    without the input checks (the environment checked its values)."""

    action_space: gym.spaces.Space
    obs_shape: tuple[int, ...]
    kind: str
    learns_from_demonstrations: bool

    def trusted(self, name: str) -> Callable[..., Any]: ...
    def observe(self, obs: Any, info: dict[str, Any]) -> Any: ...
    def bind(self, env: Any) -> None: ...
    def set_training_horizon(self, steps: int | None, episodes: int | None) -> None: ...
    def snapshot(self) -> Any: ...
    def restore(self, snapshot: Any) -> None: ...


def check_count(name: str, value: Any, minimum: int = 1, optional: bool = True) -> None:
    """ValueError unless ``value`` is an int >= ``minimum`` (or None when ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} is {value!r}, expected {what}" + (" or None" if optional else ""))


@dataclass
class EpisodeRecord:
    """One finished episode: ``episode`` (training episodes completed), undiscounted ``return_``,
    ``length``, ``success`` (the last ``info["is_success"]``), ``wall_time``, ``phase``
    ("train" / "eval") and ``total_steps`` (training steps so far)."""

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
    """What a learner returns: the records (iterating over the result yields them), and with
    keep-best the evaluation that chose the retained policy (``best``), the last evaluation
    (``last``, of the final policy) and a snapshot of the final policy (``last_policy``, for
    ``agent.restore``)."""

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


@dataclass(frozen=True)
class Budget:
    """How long a learner trains: ``episodes`` and / or ``steps`` (whichever is reached
    first; ``None`` = no limit) and the ``seed`` of the first reset and the action space."""

    episodes: int | None = None
    steps: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        check_count("episodes", self.episodes)
        check_count("steps", self.steps)
        check_count("seed", self.seed, minimum=0, optional=False)

    def spent(self, episodes: int, steps: int) -> bool:
        return (self.episodes is not None and episodes >= self.episodes) or (
            self.steps is not None and steps >= self.steps)

    def progress(self, episodes: int, steps: int) -> float:
        """Fraction spent: by steps when there is a step budget, else by episodes (0 when
        there is neither)."""
        if self.steps:
            return steps / self.steps
        return episodes / self.episodes if self.episodes else 0.0


class Callback:
    """A hook into a learner's loop (SB3's ``BaseCallback``, reduced); callbacks run in the
    order given: ``on_start`` before the first episode, ``on_record`` after every record
    (each finished training episode, each evaluation episode a callback records),
    ``on_end`` after the last episode (not when the loop raised)."""

    def on_start(self, run: TrainingRun) -> None: ...
    def on_record(self, run: TrainingRun, record: EpisodeRecord) -> None: ...
    def on_end(self, run: TrainingRun) -> None: ...


@dataclass
class TrainingRun:
    """The state of one ``learn`` call that callbacks see: the policy, the training
    environment, the budget, the counters and the result being built."""

    policy: Policy
    env: gym.Env
    budget: Budget
    callbacks: Sequence[Callback] = ()
    result: TrainingResult = field(default_factory=TrainingResult)
    episodes: int = 0
    steps: int = 0

    def record(self, record: EpisodeRecord) -> None:
        """Add ``record`` to the result and show it to every callback."""
        self.result.records.append(record)
        for callback in self.callbacks:
            callback.on_record(self, record)


class ActionOverride(Protocol):
    """Replaces some of the actions a policy chooses while it learns (an advisor).

    ``advised``: whether the action the last call returned is the override's own (advice);
    ``marks_demonstrations``: whether advised transitions are learnt as demonstrations
    (None: when the policy learns from demonstrations)."""

    advised: bool
    marks_demonstrations: bool | None

    def bind(self, env: Any) -> None: ...
    def __call__(self, policy: Policy, obs: Any, legal_moves: Sequence[int] | None,
                 action: int, progress: float) -> int: ...


def check_env(agent: Policy, env: gym.Env | VectorEnv) -> None:
    """ValueError unless ``env`` is a gymnasium env (or vector env: its copies') with the
    agent's spaces."""
    if isinstance(env, VectorEnv):
        action_space, observation_space = env.single_action_space, env.single_observation_space
    elif isinstance(env, gym.Env):
        action_space, observation_space = env.action_space, env.observation_space
    else:
        raise ValueError(f"env is {env!r}, expected a gymnasium.Env or a gymnasium VectorEnv")
    if action_space != agent.action_space:
        raise ValueError(
            f"env action_space is {action_space!r}, but the agent was built for "
            f"{agent.action_space!r}"
        )
    shape = tuple(observation_space.shape or ())
    if shape != agent.obs_shape:
        raise ValueError(
            f"env observation shape is {shape}, but the agent was built for {agent.obs_shape}"
        )


def check_demonstrations(policy: Any, marks_demonstrations: bool) -> None:
    """ValueError naming the agent and the setting when advice is to be learnt as
    demonstrations by a policy (an agent or its class) that cannot learn from them."""
    if marks_demonstrations and not policy.learns_from_demonstrations:
        raise ValueError(
            f"advisor learn_as: demonstrations needs an agent that learns from "
            f"demonstrations (dqn), but this agent is {policy.kind}; use learn_as: actions "
            "(the advice replaces the action and is learnt as an ordinary transition)")


def start_run(policy: Policy, env: gym.Env, budget: Budget,
              callbacks: Sequence[Callback]) -> TrainingRun:
    """The common start of every learner: check and bind, seed the action space, tell the
    policy the budget, start the callbacks."""
    check_env(policy, env)
    env.action_space.seed(budget.seed)
    policy.bind(env)
    policy.set_training_horizon(steps=budget.steps, episodes=budget.episodes)
    run = TrainingRun(policy, env, budget, list(callbacks))
    for callback in run.callbacks:
        callback.on_start(run)
    return run


def end_run(run: TrainingRun) -> TrainingResult:
    for callback in run.callbacks:
        callback.on_end(run)
    return run.result


def run_episode(run: TrainingRun, seed: int | None, act: Callable[[Any, dict[str, Any]], Any],
                on_step: Callable[[Any, Any, float], None]) -> EpisodeRecord | None:
    """One training episode of ``act(obs, info) -> action`` for a learner of whole episodes,
    ``on_step(obs, action, reward)`` after each step; None when the step budget cuts it short."""
    env, steps = run.env, run.budget.steps
    started = time.perf_counter()
    obs, info = env.reset(seed=seed)
    ret, length, done = 0.0, 0, False
    while not done:
        action = act(obs, info)
        next_obs, reward, terminated, truncated, info = env.step(action)
        reward = float(reward)
        on_step(obs, action, reward)
        obs = next_obs
        ret += reward
        length += 1
        run.steps += 1
        done = terminated or truncated
        if not done and steps is not None and run.steps >= steps:
            return None
    run.episodes += 1
    return EpisodeRecord(run.episodes, ret, length, bool(info.get("is_success", False)),
                         time.perf_counter() - started, "train", run.steps)


class StepLearner:
    """Trains a policy that learns from every transition (its ``learn(obs, action, ...)``),
    with an optional action override (an advisor) choosing some of the actions."""

    takes_copies = True  # trains on a vector env's N copies too

    def __init__(self, policy: Any, override: ActionOverride | None = None) -> None:
        self.policy = policy
        self.override = override

    def learn(self, env: gym.Env, budget: Budget,
              callbacks: Sequence[Callback] = ()) -> TrainingResult:
        """Train until the budget is spent; an episode cut short by the step budget is not
        recorded."""
        if budget.episodes is None and budget.steps is None:
            raise ValueError("train needs episodes=... or steps=... (or both); got neither")
        if isinstance(env, VectorEnv):
            return self._learn_copies(env, budget, callbacks)
        policy, override = self.policy, self.override
        marking = override is not None and (policy.learns_from_demonstrations
                                            if override.marks_demonstrations is None
                                            else override.marks_demonstrations)
        check_demonstrations(policy, marking)
        run = start_run(policy, env, budget, callbacks)
        if override is not None:
            override.bind(env)
        act, learn = policy.trusted("act"), policy.trusted("learn")
        observe, step = policy.observe, env.step
        reset_seed: int | None = budget.seed
        while not budget.spent(run.episodes, run.steps):
            started = time.perf_counter()
            obs, info = env.reset(seed=reset_seed)
            reset_seed = None
            obs, legal = observe(obs, info), info.get("legal_moves")
            ret, length, done = 0.0, 0, False
            while not done:
                action = act(obs, legal, True)
                if override is not None:
                    progress = budget.progress(run.episodes, run.steps)
                    action = override(policy, obs, legal, action, progress)
                next_obs, reward, terminated, truncated, info = step(action)
                next_obs, next_legal = observe(next_obs, info), info.get("legal_moves")
                reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
                if marking and override.advised:
                    learn(obs, action, reward, next_obs, terminated, truncated, next_legal,
                          demonstration=True)
                else:
                    learn(obs, action, reward, next_obs, terminated, truncated, next_legal)
                obs, legal = next_obs, next_legal
                ret += reward
                length += 1
                run.steps += 1
                done = terminated or truncated
                if not done and budget.steps is not None and run.steps >= budget.steps:
                    return end_run(run)  # cut short: not an episode
            run.episodes += 1
            run.record(EpisodeRecord(run.episodes, ret, length, bool(info.get("is_success", False)),
                                     time.perf_counter() - started, "train", run.steps))
        return end_run(run)

    def _learn_copies(self, envs: VectorEnv, budget: Budget,
                      callbacks: Sequence[Callback]) -> TrainingResult:
        """``learn`` on the N copies of a vector environment (docs/agents.md)."""
        if self.override is not None:
            raise ValueError("an advisor (action override) advises one environment; train on "
                             "one environment (n_envs 1), not a vector env")
        mode = envs.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"the vector env's autoreset_mode is {mode!r}, expected "
                             "AutoresetMode.SAME_STEP (a finished copy's final observation "
                             "in infos['final_obs'])")
        policy = self.policy
        run = start_run(policy, envs, budget, callbacks)
        act, learn = policy.trusted("act"), policy.trusted("learn")
        observe, n = policy.observe, envs.num_envs
        obs, infos = envs.reset(seed=budget.seed)
        first_infos = [info_at(infos, i) for i in range(n)]
        current = [observe(obs[i], info) for i, info in enumerate(first_infos)]
        legal = [info.get("legal_moves") for info in first_infos]
        returns, lengths, last = [0.0] * n, [0] * n, time.perf_counter()
        while True:
            actions = [act(current[i], legal[i], True) for i in range(n)]
            next_obs, rewards, terminated, truncated, infos = envs.step(np.asarray(actions))
            for i in range(n):
                info = info_at(infos, i)
                done = bool(terminated[i] or truncated[i])
                end_info = info_at(infos["final_info"], i) if done else info
                end_obs = observe(infos["final_obs"][i] if done else next_obs[i], end_info)
                end_legal = end_info.get("legal_moves")
                reward = float(rewards[i])
                learn(current[i], actions[i], reward, end_obs, bool(terminated[i]),
                      bool(truncated[i]), end_legal)
                returns[i] += reward
                lengths[i] += 1
                run.steps += 1
                if done:
                    run.episodes += 1
                    run.record(EpisodeRecord(run.episodes, returns[i], lengths[i],
                                             bool(end_info.get("is_success", False)),
                                             time.perf_counter() - last, "train", run.steps))
                    returns[i], lengths[i], last = 0.0, 0, time.perf_counter()
                    current[i], legal[i] = observe(next_obs[i], info), info.get("legal_moves")
                else:
                    current[i], legal[i] = end_obs, end_legal
                if budget.spent(run.episodes, run.steps):
                    return end_run(run)  # the copies' episodes under way are not recorded


def info_at(infos: dict[str, Any], index: int) -> dict[str, Any]:
    """Copy ``index``'s info out of gymnasium's vector infos (each key beside its ``_key``
    mask; nested dicts such as ``final_info`` alike)."""
    info = {}
    for key, value in infos.items():
        if key[0] != "_" and infos["_" + key][index]:
            info[key] = info_at(value, index) if isinstance(value, dict) else value[index]
    return info


def evaluate(
    agent: Policy,
    env: gym.Env,
    episodes: int,
    seed: int,
    total_steps: int = 0,
    after_episode: int = 0,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
) -> list[EpisodeRecord]:
    """Run ``episodes`` greedy episodes without learning; the first reset uses ``seed``, later
    ones continue the environment's RNG (the same ``seed``: the same initial states). Episode
    ``i`` seeds torch with ``seed + i`` (a sampled SB3 policy draws the same actions on a
    rerun; torch's global stream is put back after).
    ``on_episode(record)`` is called as each episode ends (rows written as they finish)."""
    check_count("episodes", episodes, optional=False)
    check_count("seed", seed, minimum=0, optional=False)
    check_count("total_steps", total_steps, minimum=0, optional=False)
    check_count("after_episode", after_episode, minimum=0, optional=False)
    check_env(agent, env)
    return play(agent, env, episodes, seed, total_steps, after_episode, on_episode)


def play(agent: Policy, env: gym.Env, episodes: int, seed: int, total_steps: int = 0,
         after_episode: int = 0, on_episode: Callable[[EpisodeRecord], None] | None = None,
         ) -> list[EpisodeRecord]:
    """:func:`evaluate` on arguments already checked (``train``'s evaluation rounds)."""
    agent.bind(env)
    act, observe = agent.trusted("act"), agent.observe
    records = []
    reset_seed: int | None = seed
    with torch.random.fork_rng(devices=[]):  # torch's global stream as it was, after
        for index in range(episodes):
            torch.manual_seed(seed + index)  # a sampled policy draws the same actions again
            started = time.perf_counter()
            obs, info = env.reset(seed=reset_seed)
            reset_seed = None
            ret, length, done = 0.0, 0, False
            while not done:
                action = act(observe(obs, info), info.get("legal_moves"), False)
                obs, reward, terminated, truncated, info = env.step(action)
                ret += float(reward)
                length += 1
                done = terminated or truncated
            records.append(EpisodeRecord(after_episode, ret, length,
                                         bool(info.get("is_success", False)),
                                         time.perf_counter() - started, "eval", total_steps))
            if on_episode is not None:
                on_episode(records[-1])
    return records
