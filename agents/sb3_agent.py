"""Stable-Baselines3's PPO, A2C, DQN, SAC, TD3 and sb3-contrib's MaskablePPO as agents (the
``sb3`` extra, imported when first used), trained by SB3's ``learn()`` with langadapt's
callbacks; global random state put back. See docs/agents.md (type: sb3)."""

from __future__ import annotations

import copy
import difflib
import inspect
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import VectorEnv
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from .base import Agent
from .loop import Budget, Callback, TrainingResult, end_run, start_run
from .sb3_keywords import check_keyword_values

INSTALL = "pip install 'langadapt[sb3]'"

SET_HERE = ("policy", "env", "seed", "verbose", "tensorboard_log", "_init_setup_model")
"""Constructor keywords the agent sets itself (the TensorBoard log is langadapt's callback)."""


CONTRIB = ("MaskablePPO",)
"""sb3-contrib's algorithms (the ``sb3`` extra installs it too)."""

MASKED = ("MaskablePPO",)
"""Algorithms that take legal moves as action masks (when training and acting)."""

BOX_ONLY, DISCRETE_ONLY = ("SAC", "TD3"), ("DQN", "MaskablePPO")
"""Algorithms for Box actions only, and for Discrete actions only (PPO and A2C take both)."""


def sb3_algorithm(name: str) -> type:
    """The SB3 (or sb3-contrib) class ``name``; one line naming the extra without it."""
    try:  # optional: the sb3 extra
        if name in CONTRIB:
            import sb3_contrib as package
        else:
            import stable_baselines3 as package
    except ImportError:
        raise ImportError(f"sb3 agents ({name}) need Stable-Baselines3 and sb3-contrib: "
                          f"{INSTALL}") from None
    return getattr(package, name)


class SB3Config(BaseModel):
    """``algorithm``, ``policy`` (SB3's policy name) and any keyword of the algorithm's
    constructor, checked against its signature and, value by value, its annotations
    (:mod:`.sb3_keywords`)."""

    model_config = ConfigDict(extra="allow")

    algorithm: Literal["PPO", "A2C", "DQN", "MaskablePPO", "SAC", "TD3"] = Field(
        "PPO", validate_default=True)
    policy: str = "MlpPolicy"
    deterministic: StrictBool = True
    """Evaluation actions: the policy's most probable legal action (True, SB3's
    ``deterministic=True``) or an action sampled from it (False; PPO, A2C, MaskablePPO, SAC)."""
    extractor: Literal["sentence_attention", "sentence_grounded", "babyai11"] | None = None
    """A features extractor of :mod:`.sb3_extractors` by name (None: SB3's default)."""
    extractor_kwargs: dict[str, StrictInt] = Field(default_factory=dict)
    """Its keyword arguments (e.g. ``max_sentences``, ``channels``)."""

    @field_validator("algorithm")
    @classmethod
    def _installed(cls, value: str) -> str:
        try:
            sb3_algorithm(value)
        except ImportError as error:
            raise ValueError(str(error)) from None
        return value

    @model_validator(mode="after")
    def _constructor_keywords(self) -> SB3Config:
        if not self.deterministic and self.algorithm in ("DQN", "TD3"):
            raise ValueError(f"deterministic: false samples a stochastic policy's actions; "
                             f"SB3's {self.algorithm} has none (PPO, A2C, MaskablePPO or SAC)")
        accepted = [name for name in inspect.signature(sb3_algorithm(self.algorithm)).parameters
                    if name not in SET_HERE]
        unknown = sorted(set(self.keywords) - set(accepted))
        if unknown:
            close = difflib.get_close_matches(unknown[0], accepted, n=1)
            expected = (f"did you mean {close[0]}?" if close else
                        f"expected algorithm, policy or one of {', '.join(accepted)}")
            raise ValueError(f"{unknown[0]}: not a parameter of SB3's {self.algorithm} "
                             f"({expected})")
        check_keyword_values(sb3_algorithm(self.algorithm), self.policy, self.keywords)
        if self.extractor_kwargs and self.extractor is None:
            raise ValueError("extractor_kwargs: given without an extractor (sentence_attention, "
                             "sentence_grounded or babyai11)")
        if self.extractor is not None:
            from .sb3_extractors import EXTRACTORS  # imports SB3 (the optional extra)

            cls = EXTRACTORS[self.extractor]
            accepted = [name for name in inspect.signature(cls).parameters
                        if name != "observation_space"]
            for name, value in self.extractor_kwargs.items():
                if name not in accepted or not 1 <= value <= 100_000:
                    raise ValueError(f"extractor_kwargs.{name}={value!r}: expected one of "
                                     f"{', '.join(accepted)} of {self.extractor}, from 1 to "
                                     "100,000")
        return self

    @property
    def keywords(self) -> dict[str, Any]:
        """The algorithm's constructor keywords (everything but algorithm and policy)."""
        return dict(self.model_extra or {})


@contextmanager
def own_random_state() -> Iterator[None]:
    """Python's, numpy's and torch's global generators as they were, after the block."""
    python, legacy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(legacy)


class SB3Agent(Agent):
    """An SB3 algorithm built from the spaces (as SB3's own ``load`` does); ``model`` is it."""

    kind = "sb3"
    optional_tensors = (r"optimizer\.\w+\.\d+\.\w+",)
    config_model = SB3Config
    box_actions = True  # PPO, A2C, SAC, TD3

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: BaseModel | dict[str, Any] | None = None, seed: int = 0) -> None:
        super().__init__(observation_space, action_space, config, seed)
        cfg: SB3Config = self.config
        self.algorithm = cfg.algorithm
        box = isinstance(action_space, gym.spaces.Box)
        if (box and cfg.algorithm in DISCRETE_ONLY) or (not box and cfg.algorithm in BOX_ONLY):
            raise ValueError(f"SB3's {cfg.algorithm} does not take action space {action_space} "
                             f"(it takes {'Box' if cfg.algorithm in BOX_ONLY else 'Discrete'} "
                             "actions; PPO and A2C take both)")
        keywords = cfg.keywords
        if cfg.extractor is not None:
            from .sb3_extractors import EXTRACTORS  # imports SB3 (the optional extra)

            keywords["policy_kwargs"] = {
                **(keywords.get("policy_kwargs") or {}),
                "features_extractor_class": EXTRACTORS[cfg.extractor],
                "features_extractor_kwargs": dict(cfg.extractor_kwargs)}
        with own_random_state():
            model = sb3_algorithm(cfg.algorithm)(cfg.policy, env=None, seed=self.seed, verbose=0,
                                                 _init_setup_model=False, **keywords)
            model.observation_space, model.action_space, model.n_envs = (
                observation_space, action_space, 1)
            if getattr(model, "target_entropy", None) == "auto":  # SAC's "auto" reads env
                model.target_entropy = -float(np.prod(action_space.shape))  # SB3's formula
            model._setup_model()
        self.model = model

    # ----------------------------------------------------------------- acting
    def action_scores(self, obs: np.ndarray) -> np.ndarray:
        """Q-values (DQN) or action logits (PPO, A2C) of one observation."""
        tensor, _ = self.model.policy.obs_to_tensor(obs)
        with torch.no_grad():
            if self.algorithm == "DQN":
                scores = self.model.policy.q_net(tensor)
            else:
                scores = self.model.policy.get_distribution(tensor).distribution.logits
        return scores[0].cpu().numpy()

    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> Any:
        """``explore`` (or ``deterministic: false``): SB3's stochastic action if it is legal;
        else the best legal action (on a Box: SB3's action, deterministic unless sampled)."""
        arr = np.asarray(obs, dtype=np.float32)
        explore = explore or not self.config.deterministic
        if not self.n_actions:  # a Box: no legal moves
            return self.model.predict(arr, deterministic=not explore)[0]
        mask = self.mask(legal_moves)
        if explore:  # SB3 samples with torch's global generator, as in its own loop
            masks = {"action_masks": mask} if self.algorithm in MASKED else {}
            action, _ = self.model.predict(arr, deterministic=False, **masks)
            if mask[int(action)]:
                return int(action)
        scores = np.where(mask, self.action_scores(arr), -np.inf)
        return int(np.argmax(scores))

    def learn(self, obs: Any, action: int, reward: float, next_obs: Any, terminated: bool,
              truncated: bool, next_legal_moves: Sequence[int] | None = None) -> None:
        raise ValueError("an sb3 agent learns in SB3's own loop: train it with agents.train "
                         "(or agent.learner().learn), not transition by transition")

    def learner(self, override: Any = None) -> SB3Learner:
        if override is not None:
            raise ValueError("an advisor replaces actions in langadapt's step loop; an sb3 "
                             "agent trains in SB3's own loop (advisors suit qlearning and dqn)")
        return SB3Learner(self)

    # ------------------------------------------------------- what callbacks read
    @property
    def last_loss(self) -> float | None:
        """SB3's ``train/loss`` of the last update (PPO, DQN; A2C logs no total loss)."""
        logger = getattr(self.model, "_logger", None)  # set by SB3 when learn() starts
        value = None if logger is None else logger.name_to_value.get("train/loss")
        return None if value is None else float(value)

    @property
    def train_scalars(self) -> dict[str, float]:
        """SB3's own ``train/*`` values of the last update as its logger recorded them
        (PPO: approx_kl, clip_fraction, entropy_loss, explained_variance, value_loss, ...)."""
        logger = getattr(self.model, "_logger", None)
        values = {} if logger is None else logger.name_to_value
        return {name: float(value) for name, value in values.items()
                if name.startswith("train/") and isinstance(value, int | float | np.number)}

    @property
    def epsilon(self) -> float | None:
        """DQN's exploration rate (SB3's ``rollout/exploration_rate``); None for PPO, A2C."""
        return float(self.model.exploration_rate) if self.algorithm == "DQN" else None

    # ---------------------------------------------------------- copies, files
    def snapshot(self) -> dict[str, torch.Tensor]:
        return copy.deepcopy(self.model.policy.state_dict())

    def restore(self, snapshot: dict[str, torch.Tensor]) -> None:
        self.model.policy.load_state_dict(snapshot)

    def header(self) -> dict[str, Any]:
        return {**super().header(), "settings": self.config.model_dump(mode="json")}

    def get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The policy's weights, its optimisers' moments (SAC's entropy coefficient too) and
        SB3's counters (a checkpoint resumes training from them)."""
        state, _ = super().get_state()
        model = self.model
        tensors = {f"policy.{k}": v.detach().cpu() for k, v in model.policy.state_dict().items()}
        for name, optimizer in optimizers(model).items():
            for index, moments in optimizer.state_dict()["state"].items():
                tensors |= {f"optimizer.{name}.{index}.{k}": v.detach().cpu()
                            for k, v in moments.items() if isinstance(v, torch.Tensor)}
        if isinstance(getattr(model, "log_ent_coef", None), torch.Tensor):
            tensors["log_ent_coef"] = model.log_ent_coef.detach().cpu()
        state |= {"num_timesteps": int(model.num_timesteps),
                  "n_updates": int(getattr(model, "_n_updates", 0))}
        return state, tensors

    def set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        super().set_state(state, tensors)
        model = self.model
        model.policy.load_state_dict(
            {k.removeprefix("policy."): v for k, v in tensors.items() if k.startswith("policy.")})
        for name, optimizer in optimizers(model).items():
            moments: dict[int, dict[str, torch.Tensor]] = {}
            for key, tensor in tensors.items():
                if key.startswith(f"optimizer.{name}."):
                    _, _, index, part = key.split(".", 3)
                    moments.setdefault(int(index), {})[part] = tensor
            if moments:
                saved = optimizer.state_dict()
                optimizer.load_state_dict({**saved, "state": moments})
        if "log_ent_coef" in tensors and isinstance(getattr(model, "log_ent_coef", None),
                                                     torch.Tensor):
            with torch.no_grad():
                model.log_ent_coef.copy_(tensors["log_ent_coef"])
        model.num_timesteps = int(state.get("num_timesteps", 0))
        model._n_updates = int(state.get("n_updates", 0))


def optimizers(model: Any) -> dict[str, torch.optim.Optimizer]:
    """An SB3 model's optimisers by name: the policy's (PPO, A2C, DQN), the actor's and the
    critic's and the entropy coefficient's (SAC, TD3)."""
    owners = (("policy", model.policy, "optimizer"), ("actor", model, "actor"),
              ("critic", model, "critic"), ("ent_coef", model, "ent_coef_optimizer"))
    found = {}
    for name, owner, attribute in owners:
        value = getattr(owner, attribute, None)
        if name in ("actor", "critic"):
            value = getattr(value, "optimizer", None)
        if isinstance(value, torch.optim.Optimizer):
            found[name] = value
    return found


class SB3Learner:
    """Trains an :class:`SB3Agent` with SB3's ``learn()`` for the budget, reporting each
    finished training episode to the callbacks (docs/agents.md)."""

    takes_copies = True  # trains on a vector env's N copies too (agents.sb3_vec)

    def __init__(self, agent: SB3Agent) -> None:
        self.agent = agent

    def learn(self, env: gym.Env | VectorEnv, budget: Budget,
              callbacks: Sequence[Callback] = ()) -> TrainingResult:
        if budget.steps is None:
            raise ValueError(
                f"an sb3 agent trains for a number of environment steps (SB3's total_timesteps, "
                f"which its schedules read), got episodes={budget.episodes}: give it "
                "steps=... (in an experiment file, training: {steps: N})")
        from .sb3_vec import RecordedCopies, RecordedEpisodes  # imports SB3 (optional extra)

        run = start_run(self.agent, env, budget, callbacks)
        model = self.agent.model
        with own_random_state():
            copies = env.num_envs if isinstance(env, VectorEnv) else 1
            if copies != model.n_envs:  # buffers sized for N copies; policy and optimisers kept
                weights = model.policy.state_dict()
                moments = {name: o.state_dict() for name, o in optimizers(model).items()}
                model.n_envs = copies
                model._setup_model()
                model.policy.load_state_dict(weights)
                for name, optimizer in optimizers(model).items():
                    optimizer.load_state_dict(moments[name])
            recorded = (RecordedCopies(env, run) if isinstance(env, VectorEnv)
                        else RecordedEpisodes(env, run))
            model.set_env(recorded)
            model.set_random_seed(budget.seed)  # the first reset and the action space
            # a resumed run (agents.checkpoints) goes on from its counters to the same budget
            model.learn(total_timesteps=budget.steps - run.steps,
                        reset_num_timesteps=run.steps == 0,
                        callback=lambda _locals, _globals: not budget.spent(run.episodes,
                                                                            run.steps),
                        log_interval=None)  # type: ignore[arg-type]  # SB3: None = no dumps
        model.env = None  # the environment is the caller's: no reference kept
        return end_run(run)
