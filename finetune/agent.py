"""GRPO as an agent of an experiment file (``type: grpo``): :class:`GRPOAgent` trains through
its learner (:class:`GRPOLearner`, :meth:`GRPOAgent.fit`) and is evaluated like every agent;
its files live in ``runs/<run>/grpo/``. See docs/finetune.md."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..agents import Agent
from ..agents.base import parse_config
from ..agents.loop import Budget, Callback, TrainingResult, end_run, start_run
from ..agents.training import EpisodeRecord
from ..environments import language_for
from ..environments.frozenlake import FrozenLakeEnv
from ..environments.maze import MazeEnv
from .grpo import GRPOSettings, GRPOTrainer, read_checkpoint
from .policy import LoRAPolicy, LoRASettings
from .tasks import MazeTask, SnapshotTask

__all__ = ["TRAIN_SEED", "FinetuneError", "GRPOAgent", "GRPOAgentConfig", "GRPOLearner",
           "HeldOutSettings", "check_grpo"]

#: The first reset seed of the training episodes of a MiniGrid level or FrozenLake (held-out
#: seeds lie below).
TRAIN_SEED = 1_000_000


class FinetuneError(ValueError):
    """A GRPO run that cannot start as set up (a refused, damaged or mismatched checkpoint,
    LoRA targets the model lacks): the user's to fix, one line naming the file or key."""


class HeldOutSettings(BaseModel):
    """The held-out episodes of GRPO's own evaluation on MiniGrid/BabyAI or FrozenLake: reset
    seeds ``seed .. seed + episodes - 1``, below ``TRAIN_SEED`` (docs/finetune.md)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, ge=0)
    episodes: int = Field(100, ge=1, le=TRAIN_SEED)
    max_steps: int | None = Field(32, ge=1)
    temperature: float | None = Field(None, gt=0)


class GRPOAgentConfig(GRPOSettings):
    """``params`` of a ``grpo`` agent: GRPO's settings, the model, LoRA and held-out set
    (docs/finetune.md)."""

    model: str | None = None
    lora: LoRASettings = Field(default_factory=LoRASettings)
    held_out: HeldOutSettings = Field(default_factory=HeldOutSettings)

    def grpo(self) -> GRPOSettings:
        """The GRPO settings alone (what a checkpoint records)."""
        return GRPOSettings(**self.model_dump(include=set(GRPOSettings.model_fields)))


def _is_minigrid(env: Any) -> bool:
    return type(env).__name__ == "MiniGridBridge"


def _is_slippery(env: Any) -> bool:
    """A FrozenLake whose moves can slip (an action with more than one outcome)."""
    return isinstance(env, FrozenLakeEnv) and any(
        len(outcomes) > 1 for moves in env.lake.P.values() for outcomes in moves.values())


def check_grpo(env: Any, params: GRPOAgentConfig | dict[str, Any]) -> None:
    """The checks of a ``grpo`` agent that need its environment (``env.unwrapped``) or its
    model's files; ValueError naming the environment or the key. ``params``: validated
    (the experiment file's, checked once) or a dict, parsed here."""
    config = parse_config(params, GRPOAgentConfig)
    name = type(env).__name__
    try:
        language_for(env)
    except ValueError as error:
        raise ValueError(f"grpo prompts with the environment's language spec: {error}"
                         ) from None
    if not isinstance(env, (MazeEnv, FrozenLakeEnv)) and not _is_minigrid(env):
        raise ValueError(f"grpo restarts rollouts from saved states, which a maze "
                         f"(langadapt/Maze-v0), FrozenLake (langadapt/FrozenLake-v0) or a "
                         f"MiniGrid/BabyAI level allows; {name} is none of them")
    if config.model is not None:
        from .hf_model import check_causal_lm

        try:
            check_causal_lm(config.model)
        except ValueError as error:
            raise ValueError(f"params.model: {error}") from None
    if isinstance(env, MazeEnv):
        if config.shaping == "none" and env.goal_reward == 0 and (
                config.reward == "step" or env.step_reward == 0):
            cause = ("params.reward is step" if config.reward == "step"
                     else "environment.params.step_reward is 0")
            raise ValueError(
                f"the run has no reward source: environment.params.goal_reward is 0 and {cause} "
                "with params.shaping none; expected a goal reward (or shaping: oracle)")
        return
    if config.states == "all":
        why = (" (every episode of a lake starts at S; the cells rollouts reach become "
               "starts with states: N)" if isinstance(env, FrozenLakeEnv) else "")
        raise ValueError(f"params.states is 'all', which only a maze has{why}; expected a "
                         f"number of start states per step for {name}")
    if config.shaping == "oracle":
        raise ValueError(f"params.shaping is 'oracle', but {name} has no oracle potential; "
                         "expected none")
    if _is_slippery(env) and "held_out" not in config.model_fields_set:
        raise ValueError(
            "params.held_out is missing: on a slippery lake the reset seed is all that tells "
            "one episode from another, so a run names its held-out seeds; expected e.g. "
            "held_out: {seed: 0, episodes: 256, max_steps: null} (RAGEN's protocol)")


def grpo_task(make_env: Callable[[], Any], config: GRPOAgentConfig, seed: int = 0
              ) -> MazeTask | SnapshotTask:
    """The GRPO task of the environment ``make_env`` builds (each call a new copy); ``seed``
    seeds a slippery lake's training slips."""
    env = make_env().unwrapped
    if isinstance(env, MazeEnv):
        return MazeTask(env)
    held = config.held_out
    return SnapshotTask(lambda: make_env().unwrapped, train_seed=TRAIN_SEED,
                        eval_seed=held.seed, eval_episodes=held.episodes,
                        eval_max_steps=held.max_steps, seed=seed)


def step_records(history: Sequence[dict[str, float]], final: dict[str, float],
                 judged: bool) -> list[EpisodeRecord]:
    """One ``train`` record per GRPO step: the mean rollout return, the step's environment steps,
    and (``judged``: a maze) whether the greedy policy after it reached the goal."""
    after = [row["greedy_success"] for row in history[1:]] + [final.get("greedy_success")]
    records, total = [], 0
    for row, success in zip(history, after, strict=True):
        total += int(row["env_steps"])
        records.append(EpisodeRecord(
            episode=int(row["step"]) + 1, return_=float(row["reward_mean"]),
            length=int(row["env_steps"]), success=judged and success == 1,
            wall_time=float(row["step_seconds"]), phase="train", total_steps=total))
    return records


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class GRPOAgent(Agent):
    """An LLM policy trained by GRPO (:meth:`fit`); it acts greedily, as ``llm_policy`` at
    temperature 0 with the trained adapter would (each state scored once, then memorised:
    the policy no longer changes)."""

    kind: ClassVar[str] = "grpo"
    config_model = GRPOAgentConfig

    def __init__(self, observation_space: Any, action_space: Any,
                 config: GRPOAgentConfig | dict[str, Any] | None = None, seed: int = 0) -> None:
        super().__init__(observation_space, action_space, config, seed)
        self.trainer: GRPOTrainer | None = None
        self.make_env: Callable[[], Any] | None = None  # the learner's copies; None: env.spec's
        self.folder: Path | None = None  # the learner's files (checkpoint, log, adapter)
        self.final: dict[str, Any] = {}
        self._greedy: dict[tuple[bytes, tuple[int, ...]], int] = {}

    def learner(self, override: Any = None) -> GRPOLearner:
        if override is not None:
            raise ValueError("the grpo agent learns without an advisor")
        return GRPOLearner(self)

    def fit(self, make_env: Callable[[], Any], folder: Path | None = None,
            on_episode: Callable[[EpisodeRecord], None] | None = None,
            progress: bool = False) -> list[EpisodeRecord]:
        """GRPO on the environment ``make_env`` builds, its files in ``folder`` (resuming a
        checkpoint there); one ``train`` record per step, each handed to ``on_episode``."""
        checkpoint = None if folder is None else folder / "checkpoint" / "trainer.pt"
        config: GRPOAgentConfig = self.config
        try:
            if checkpoint is not None and checkpoint.is_file():
                read_checkpoint(checkpoint)  # refused or damaged: say so before loading a model
            elif folder is not None:
                (folder / "log.csv").unlink(missing_ok=True)  # stopped before a checkpoint
            _seed_everything(self.seed)
            task = grpo_task(make_env, config, self.seed)
            started = time.perf_counter()
            env = make_env()
            policy = LoRAPolicy(language_for(env.unwrapped), model=config.model,
                                lora=config.lora, temperature=config.temperature,
                                seed=self.seed, prompt_style=config.prompt_style,
                                progress=progress)
            load_seconds = time.perf_counter() - started
            self.trainer = GRPOTrainer(policy, task, config.grpo(), out=folder, seed=self.seed)
        except ValueError as error:
            raise FinetuneError(str(error)) from None
        history = self.trainer.train(progress=progress)
        if folder is not None:
            spec = env.spec
            policy.save_adapter(folder / "adapter", extra={
                "environment": {"id": spec.id if spec else type(env.unwrapped).__name__,
                                "params": dict(spec.kwargs) if spec else {}},
                "seed": self.seed, "steps": self.trainer.step_index})
        self.final = {**self.trainer.final, "load_seconds": load_seconds}
        held = config.held_out
        if held.temperature is not None and isinstance(task, SnapshotTask):
            sampled = task.evaluate(self.trainer.sampled_actions(held.temperature), fixed=False)
            self.final.update({f"sampled_{k.removeprefix('greedy_')}": v
                               for k, v in sampled.items()}, sampled_temperature=held.temperature)
        records = step_records(history, self.final, judged=isinstance(task, MazeTask))
        if on_episode is not None:
            for record in records:
                on_episode(record)
        return records

    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> int:
        if self.trainer is None:
            raise ValueError("the grpo agent acts after fit(); it has not been trained")
        state = np.asarray(obs, dtype=np.float32)
        legal = tuple(int(a) for a in (range(self.n_actions) if legal_moves is None
                                       else legal_moves))
        key = (state.tobytes(), legal)
        if key not in self._greedy:
            self._greedy[key] = int(self.trainer.greedy_actions([(state, legal)])[0])
        return self._greedy[key]

    def stats(self) -> dict[str, Any]:
        """GRPO's own evaluation of the trained policy (``final`` row of the step log)."""
        return {f"grpo_{k}": float(v) for k, v in self.final.items()
                if np.isfinite(float(v))}


class GRPOLearner:
    """GRPO as a learner: ``learn`` runs :meth:`GRPOAgent.fit` on the copies the agent's
    ``make_env`` builds (GRPO restarts rollouts from saved states; never ``env`` itself), its
    files in the agent's ``folder``, then hands each step's ``train`` record to the callbacks.
    GRPO's own settings (``steps``, ``max_minutes``, ...) are its budget; ``budget`` seeds
    ``env``'s action space only."""

    takes_copies = False

    def __init__(self, agent: GRPOAgent) -> None:
        self.agent = agent

    def learn(self, env: Any, budget: Budget,
              callbacks: Sequence[Callback] = ()) -> TrainingResult:
        run = start_run(self.agent, env, budget, callbacks)
        make_env = self.agent.make_env
        if make_env is None:
            if env.spec is None:
                raise ValueError("the grpo agent builds its own copies of the environment: "
                                 "set agent.make_env (env has no gymnasium spec)")
            spec = env.spec
            make_env = lambda: gymnasium.make(spec)  # noqa: E731

        def record(episode_record: EpisodeRecord) -> None:
            run.episodes, run.steps = run.episodes + 1, episode_record.total_steps
            run.record(episode_record)

        self.agent.fit(make_env, self.agent.folder, on_episode=record)
        return end_run(run)
