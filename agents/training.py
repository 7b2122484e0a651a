""":func:`train` and the callbacks it builds (episode hook, evaluation and keep-best,
progress); the evaluation itself is :func:`.loop.evaluate`. No global random generator is
touched. See
docs/agents.md (Policy, learner, callbacks)."""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv
from tqdm.auto import tqdm

from ..environments._checks import EVAL_SEED_OFFSET
from .base import Agent, check_count
from .loop import (
    ActionOverride,
    Budget,
    Callback,
    EpisodeRecord,
    Evaluation,
    TrainingResult,
    TrainingRun,
    check_env,
    info_at,
    play,
)


class EpisodeHook(Callback):
    """Calls ``function(record)`` with every record as it is made."""

    def __init__(self, function: Callable[[EpisodeRecord], None]) -> None:
        self.function = function

    def on_record(self, run: TrainingRun, record: EpisodeRecord) -> None:
        self.function(record)


class Evaluations(Callback):
    """Greedy evaluation every ``every`` episodes and / or ``every_steps`` steps on ``env`` from
    ``seed`` (its random stream put back), and keep-best (the highest mean return, later on
    ties; restored at the end)."""

    def __init__(self, env: gym.Env, episodes: int, seed: int, every: int | None = None,
                 every_steps: int | None = None, keep_best: bool = False) -> None:
        self.env, self.episodes, self.seed = env, episodes, seed
        self.every, self.every_steps, self.keep_best = every, every_steps, keep_best
        self.next_step = every_steps
        self.best_policy: Any = None

    def on_record(self, run: TrainingRun, record: EpisodeRecord) -> None:
        if record.phase != "train":
            return
        due = self.every is not None and run.episodes % self.every == 0
        if self.next_step is not None and run.steps >= self.next_step:
            due = True
            self.next_step = (run.steps // self.every_steps + 1) * self.every_steps
        if due:
            self.evaluate(run)

    def on_end(self, run: TrainingRun) -> None:
        if not self.keep_best:
            return
        last = run.result.last
        if last is None or last.total_steps != run.steps:
            self.evaluate(run)  # the final policy is a candidate too
        run.result.last_policy = run.policy.snapshot()
        run.policy.restore(self.best_policy)

    def evaluate(self, run: TrainingRun) -> None:
        saved = _rng_state(run.env) if self.env is run.env else None
        records = play(run.policy, self.env, self.episodes, self.seed,
                       total_steps=run.steps, after_episode=run.episodes)
        if saved is not None:  # the training episodes' random stream goes on untouched
            _rng(run.env).bit_generator.state = saved
        elif self.env is not run.env:
            run.policy.bind(run.env)  # back to the training environment
        for record in records:
            run.record(record)
        mean = float(np.mean([r.return_ for r in records]))
        result = run.result
        result.last = Evaluation(run.episodes, run.steps, mean)
        if self.keep_best and (result.best is None or mean >= result.best.mean_return):
            result.best = result.last
            self.best_policy = run.policy.snapshot()


def _rng(env: gym.Env) -> Any:
    """The environment's ``np_random`` (a reset with a seed replaces it; None without)."""
    rng = getattr(env.unwrapped, "_np_random", None)
    return rng if isinstance(rng, np.random.Generator) else None


def _rng_state(env: gym.Env) -> Any:
    rng = _rng(env)
    return None if rng is None else copy.deepcopy(rng.bit_generator.state)


class ProgressBar(Callback):
    """A tqdm bar over the budget (steps when there is a step budget, else episodes)."""

    def __init__(self, description: str) -> None:
        self.description = description
        self.bar: Any = None

    def on_start(self, run: TrainingRun) -> None:
        by_steps = run.budget.steps is not None
        self.bar = tqdm(total=run.budget.steps if by_steps else run.budget.episodes,
                        unit="step" if by_steps else "episode", desc=self.description,
                        dynamic_ncols=True)

    def on_record(self, run: TrainingRun, record: EpisodeRecord) -> None:
        if record.phase != "train":
            return
        self.bar.update((run.steps if run.budget.steps is not None else run.episodes)
                        - self.bar.n)
        postfix = {"return": f"{record.return_:.3g}"}
        if run.result.last is not None and run.result.last.episode == run.episodes:
            postfix["eval"] = f"{run.result.last.mean_return:.3g}"
        self.bar.set_postfix(postfix, refresh=False)

    def on_end(self, run: TrainingRun) -> None:
        self.bar.close()


class TensorBoardLog(Callback):
    """TensorBoard scalars of one run in ``folder`` by environment steps, with SB3's names
    (rollout/, eval/, train/, llm/; the ``tensorboard`` extra). See docs/agents.md (TensorBoard)."""

    def __init__(self, folder: str | Path, counters: Callable[[], dict[str, float]] | None = None,
                 window: int = 100, probes: int = 10, purge_step: int | None = None) -> None:
        check_count("window", window, optional=False)
        check_count("probes", probes, minimum=0, optional=False)
        self.folder, self.counters, self.probes = Path(folder), counters, probes
        self.purge_step = purge_step  # resumed from this step: TensorBoard hides later events
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.successes: deque[bool] = deque(maxlen=window)
        self.evaluation: list[EpisodeRecord] = []
        self.states: list[tuple[Any, Any]] = []
        self.writer: Any = None

    def on_start(self, run: TrainingRun) -> None:
        self.writer = summary_writer(self.folder, self.purge_step)
        if self.probes and hasattr(run.policy, "q_values"):
            self.states = _start_states(run.policy, run.env, self.probes,
                                        run.budget.seed + EVAL_SEED_OFFSET)

    def on_record(self, run: TrainingRun, record: EpisodeRecord) -> None:
        if record.phase != "train":
            self.evaluation.append(record)
            return
        self._write_evaluation()
        self.returns.append(record.return_)
        self.lengths.append(record.length)
        self.successes.append(record.success)
        scalars = {"rollout/ep_rew_mean": np.mean(self.returns),
                   "rollout/ep_len_mean": np.mean(self.lengths),
                   "rollout/success_rate": np.mean(self.successes)}
        for name, attribute in (("train/loss", "last_loss"),
                                ("rollout/exploration_rate", "epsilon")):
            value = getattr(run.policy, attribute, None)
            if value is not None:
                scalars[name] = value
        scalars.update(getattr(run.policy, "train_scalars", None) or {})  # SB3's own train/*
        if self.states:
            scalars["train/q_mean"] = np.mean([
                np.max(np.asarray(run.policy.q_values(obs))[legal]) for obs, legal in self.states])
        if self.counters is not None:
            counters = self.counters()
            scalars["llm/calls"] = counters.get("llm_calls", 0)
            scalars["llm/seconds"] = counters.get("llm_seconds", 0.0)
        for name, value in scalars.items():
            self.writer.add_scalar(name, float(value), record.total_steps)

    def on_end(self, run: TrainingRun) -> None:
        self._write_evaluation()
        self.writer.close()

    def _write_evaluation(self) -> None:
        """The evaluation round recorded since the last training episode, if any."""
        records, self.evaluation = self.evaluation, []
        if not records:
            return
        step = records[0].total_steps
        self.writer.add_scalar("eval/mean_reward", np.mean([r.return_ for r in records]), step)
        self.writer.add_scalar("eval/mean_ep_length", np.mean([r.length for r in records]), step)
        self.writer.add_scalar("eval/success_rate", np.mean([r.success for r in records]), step)


def summary_writer(folder: Path, purge_step: int | None = None) -> Any:
    """torch's TensorBoard ``SummaryWriter`` on ``folder`` (``purge_step``: the events of
    earlier files at or past that step are purged, as a resumed run's are); one line naming
    the extra when tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard extra
    except ImportError:
        raise ImportError("TensorBoard logging needs tensorboard: "
                          "pip install 'langadapt[tensorboard]'") from None
    return SummaryWriter(log_dir=str(folder), purge_step=purge_step)


def _start_states(policy: Any, env: gym.Env | VectorEnv, count: int,
                  seed: int) -> list[tuple[Any, Any]]:
    """(what the policy acts on, legal-move index) of ``count`` starts of ``env`` (the first
    reset seeded with ``seed``, as evaluations start; a vector env's copies in turn), its
    random stream put back."""
    saved = _rng_state(env) if isinstance(env, gym.Env) else None
    starts: list[tuple[Any, dict[str, Any]]] = []
    while len(starts) < count:
        obs, info = env.reset(seed=None if starts else seed)
        if isinstance(env, VectorEnv):
            starts += [(obs[i], info_at(info, i)) for i in range(env.num_envs)]
        else:
            starts.append((obs, info))
    states = []
    for obs, info in starts[:count]:
        legal = info.get("legal_moves")
        states.append((policy.observe(obs, info), slice(None) if legal is None else list(legal)))
    if saved is not None:
        _rng(env).bit_generator.state = saved
    return states


def train(
    agent: Agent,
    env: gym.Env | VectorEnv,
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
    advisor: ActionOverride | None = None,
    callbacks: Sequence[Callback] = (),
) -> TrainingResult:
    """Train ``agent`` on ``env`` (or a ``SAME_STEP`` vector env) with ``agent.learner(advisor)``
    until ``episodes`` or ``steps`` is reached, with evaluation, keep-best, ``on_episode`` and
    ``callbacks`` in that order. See docs/agents.md (Policy, learner, callbacks)."""
    budget = Budget(episodes, steps, seed)
    check_count("eval_every", eval_every)
    check_count("eval_every_steps", eval_every_steps)
    check_count("eval_episodes", eval_episodes, optional=False)
    if not isinstance(keep_best, bool):
        raise ValueError(f"keep_best is {keep_best!r}, expected a bool")
    scheduled = eval_every is not None or eval_every_steps is not None
    if keep_best and not scheduled:
        raise ValueError(
            "keep_best needs an evaluation schedule: set eval_every (training episodes) or "
            "eval_every_steps (environment steps)"
        )
    copies = isinstance(env, VectorEnv)
    if copies and scheduled and eval_env is None:
        raise ValueError("env is a vector env: evaluation needs eval_env= (one environment)")
    eval_env = env if eval_env is None else eval_env
    if scheduled:
        check_env(agent, eval_env)
    learner = agent.learner(advisor)
    if copies and not getattr(learner, "takes_copies", False):
        raise ValueError(f"env is a vector env, but the {agent.kind} agent's learner trains "
                         "on one environment; give it one environment")
    own: list[Callback] = [] if on_episode is None else [EpisodeHook(on_episode)]
    if scheduled:
        own.append(Evaluations(eval_env, eval_episodes, seed + EVAL_SEED_OFFSET,
                                     eval_every, eval_every_steps, keep_best))
    if progress:
        own.append(ProgressBar(f"train {agent.kind}"))
    return learner.learn(env, budget, [*own, *callbacks])
