""":class:`LLMPolicySearch`: a proposer (``llm`` or ``random``) writes whole policies round by
round; a candidate is kept only if it scores higher. Trained by its own
:class:`PolicySearchLearner`, a loop over rounds. Its settings, :class:`PolicySearchConfig`;
a family that does not fit the action space is refused in one line. See
docs/policy-search.md."""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..agents import (
    Agent,
    Budget,
    Callback,
    Discretisation,
    LinearBoxPolicy,
    ObservationStats,
    TrainingResult,
    clip_range,
)
from ..agents.base import parse_config
from ..agents.loop import end_run, run_episode, start_run
from ..llm import LLMBackend, LLMReplyError, make_backend
from .backends import check_backend_spec
from .policy_families import (
    ActionGrid,
    LinearPolicy,
    Policy,
    TabularPolicy,
    Trajectory,
    load_templates,
    parse_proposal,
    prompt_variables,
    proposal_schema,
    random_policy,
)

MAX_TABLE_STATES = 100_000
"""Most states a table may have (the product of ``bins``): the LLM writes one entry each."""
MAX_TABLE_ACTIONS = 10_000
"""Most discretised actions of a table on a Box (the product of ``action_bins``)."""


class PolicySearchConfig(BaseModel):
    """Settings of :class:`LLMPolicySearch`, explained in docs/policy-search.md (Settings)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    family: Literal["tabular", "linear"] = "tabular"
    proposer: Literal["llm", "random"] = "llm"
    rounds: int = Field(100, gt=0)
    evaluation_episodes: int = Field(5, gt=0)
    replay_buffer: bool = True
    replay_buffer_size: int = Field(2, gt=0)
    max_trajectory_length: int = Field(20, gt=0)
    reset_conversation: bool = True
    conversation_chars: int = Field(12_000, gt=0)
    history_size: int = Field(10, ge=0)
    task_hints: str = ""
    structured_output: bool = True
    vary_seed: bool = True
    bins: list[int] | None = None
    bounds: list[tuple[float, float]] | None = None
    observation_names: list[str] | None = None
    action_names: list[str] | None = None
    action_bounds: list[tuple[float, float]] | None = None
    action_bins: int | list[int] | None = None
    normalise: bool | None = None  # None: true for linear on a Box action space
    initial: Literal["random", "zeros"] = "random"
    random_scale: float = Field(1.0, gt=0)
    llm: Any = "llamacpp"
    templates: str | None = None
    max_tokens: int | None = Field(None, gt=0)  # None: enough for the proposal's schema

    @field_validator("llm")
    @classmethod
    def _backend_spec(cls, value: Any) -> Any:
        if isinstance(value, LLMBackend):
            return value
        if not isinstance(value, (str, dict)):
            raise ValueError(f"llm is {value!r}, expected a backend name or a dict spec")
        return check_backend_spec(value)  # a bad field fails now, not mid-run

    @field_validator("action_bins")
    @classmethod
    def _action_bins(cls, value: int | list[int] | None) -> int | list[int] | None:
        if value is not None and min([value] if isinstance(value, int) else value or [0]) < 2:
            raise ValueError(f"action_bins is {value!r}, expected ints of at least 2 (the "
                             "values of an action dimension include its low and high)")
        if value is not None and math.prod([value] if isinstance(value, int) else value
                                           ) > MAX_TABLE_ACTIONS:
            raise ValueError(f"action_bins is {value!r}: expected at most "
                             f"{MAX_TABLE_ACTIONS:,} actions in all (their product)")
        return value

    @field_validator("bins")
    @classmethod
    def _bins(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (min(value or [0]) < 1 or math.prod(value) > MAX_TABLE_STATES):
            raise ValueError(f"bins is {value!r}: expected ints of at least 1 making at most "
                             f"{MAX_TABLE_STATES:,} states in all (their product)")
        return value

    @field_validator("action_bounds", "bounds")
    @classmethod
    def _finite_ranges(cls, value: list[tuple[float, float]] | None, info: Any
                       ) -> list[tuple[float, float]] | None:
        for low, high in value or []:
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(f"{info.field_name} has ({low}, {high}): expected finite "
                                 "(low, high) pairs with low < high")
        return value

    @model_validator(mode="after")
    def _templates_exist(self) -> PolicySearchConfig:
        if self.proposer == "llm":
            load_templates(self.templates)
        return self


def box_settings(cfg: PolicySearchConfig, action_space: spaces.Space) -> bool:
    """Whether actions are discretised (tabular on a Box); one line for a setting that does
    not apply or a missing ``action_bins``."""
    if not isinstance(action_space, spaces.Box):
        if any(v is not None for v in (cfg.action_bounds, cfg.action_bins, cfg.normalise)):
            raise ValueError(f"action_bounds, action_bins and normalise apply to a Box action "
                             f"space, not to {action_space}")
        return False
    if cfg.family == "linear":
        if cfg.action_bins is not None:
            raise ValueError("action_bins applies to family: tabular, not to linear policies")
        return False
    if cfg.action_bins is None:
        raise ValueError(f"family tabular does not fit action space {action_space} without "
                         "action_bins: add action_bins (values per action dimension, e.g. 3) "
                         "to discretise the actions, or use family: linear")
    if cfg.normalise is not None:
        raise ValueError("normalise applies to linear policies, not to family: tabular")
    return True


class LLMPolicySearch(Agent):
    """Best-policy search over tables or linear policies, written by an LLM or at random."""

    kind = "llm_policy_search"
    optional_tensors = ("best", "best_mean", "best_std")
    config_model = PolicySearchConfig
    config: PolicySearchConfig
    box_actions = True  # clip(W @ [obs, 1]), or a table over discretised actions

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: PolicySearchConfig | dict[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        cfg = parse_config(config, PolicySearchConfig)
        if not (isinstance(action_space, spaces.Discrete) or (
                isinstance(action_space, spaces.Box) and len(action_space.shape) == 1)):
            raise ValueError(f"family {cfg.family} does not fit action space {action_space}: "
                             "policy search writes tables or linear policies for Discrete "
                             "actions or a one-dimensional Box")
        super().__init__(observation_space, action_space, cfg, seed)
        if not isinstance(observation_space, spaces.Box) or len(self.obs_shape) != 1:
            raise ValueError(
                f"observation_space is {observation_space!r}, expected a one-dimensional Box"
            )
        self.obs_dim = int(self.obs_shape[0])
        self.box = isinstance(action_space, spaces.Box)
        self.n_outputs = int(action_space.shape[0]) if self.box else self.n_actions
        discretise = box_settings(cfg, action_space)
        if self.box:
            self.low, self.high = clip_range(action_space, cfg.action_bounds)
        self.grid = (ActionGrid(action_space, cfg.action_bins, self.low, self.high)
                     if discretise else None)  # a table over discretised actions
        #: the proposal's outputs: table actions (tabular) or weight rows (linear)
        self.n_choices = self.grid.n_actions if self.grid is not None else self.n_outputs
        self.obs_stats = (ObservationStats(self.obs_dim) if self.box and cfg.family == "linear"
                          and cfg.normalise is not False else None)
        self.discretisation: Discretisation | None = None
        self.n_states = 0
        if cfg.family == "tabular":
            self.discretisation = Discretisation(observation_space, cfg.bins, cfg.bounds)
            states = math.prod(int(n) for n in self.discretisation.sizes)
            if states > MAX_TABLE_STATES:
                count = f"{states:,}" if states < 10**12 else f"about 10^{len(str(states)) - 1}"
                raise ValueError(
                    f"a table over these {self.obs_dim} observation dimensions has {count} "
                    f"states; expected at most {MAX_TABLE_STATES:,} (fewer bins, or family: "
                    "linear)")
            self.n_states = self.discretisation.n_states
        elif cfg.bins is not None or cfg.bounds is not None:
            raise ValueError("bins and bounds apply to family: tabular, not to linear policies")
        self.observation_names = _names(cfg.observation_names, self.obs_dim, "observation_names",
                                        "x")
        self.action_names = _names(cfg.action_names, self.n_outputs, "action_names", "action ")
        self.schema = proposal_schema(cfg.family, self.n_choices, self.n_states, self.obs_dim)
        self.max_tokens = cfg.max_tokens or self._reply_tokens()
        self.templates = load_templates(cfg.templates) if cfg.proposer == "llm" else {}
        self.backend = None
        if cfg.proposer == "llm":
            spec = cfg.llm
            if isinstance(spec, str):
                spec = {"backend": spec}
            if isinstance(spec, dict) and "seed" not in spec and "seed" not in spec.get(
                    "options", {}):
                spec = {**spec, "seed": self.seed}  # seeds differ when temperature > 0
            self.backend = make_backend(spec)
        self.log_path: Path | None = None
        self.reset_search()

    # ------------------------------------------------------------------ state
    def reset_search(self) -> None:
        """Start afresh: round 0 with the initial policy, empty buffers and counters."""
        cfg = self.config
        self.round = 0
        self.finished = False
        if cfg.initial == "random":
            self.candidate: Policy = self._random_policy()
        elif cfg.family == "tabular":
            self.candidate = TabularPolicy(np.zeros(self.n_states, dtype=np.int64),
                                           self.n_choices)
        else:
            self.candidate = self._own(LinearPolicy(
                np.zeros((self.n_outputs, self.obs_dim + 1)), self.obs_dim, self.n_outputs))
        self.best: Policy | None = None
        self.best_return = -math.inf
        self.last_proposal: Policy | None = None
        self.last_return: float | None = None
        self.last_kept = False
        self.scores: list[tuple[int, float, bool]] = []
        self.best_trajectories: list[Trajectory] = []
        self.worst_trajectories: list[Trajectory] = []
        self.latest_trajectory: Trajectory | None = None
        self.conversation: list[dict[str, str]] = []
        self.round_log: list[dict[str, Any]] = []
        self._pending: dict[str, Any] = _entry(0, "initial")
        self._steps: deque[tuple[Any, Any, float]] = deque(maxlen=cfg.max_trajectory_length)
        self._seen: list[np.ndarray] = []  # the episode's observations (normalise)
        if self.obs_stats is not None:
            self.obs_stats = ObservationStats(self.obs_dim)
        self.counters = dict.fromkeys(
            ("env_steps", "episodes", "rounds", "evaluated", "kept", "requests", "corrections",
             "skipped_rounds", "illegal_table_actions"), 0)

    def _random_policy(self) -> Policy:
        cfg = self.config
        return self._own(random_policy(self.rng, cfg.family, self.n_choices, self.n_states,
                                       self.obs_dim, cfg.random_scale))

    def _own(self, policy: Policy) -> Policy:
        """On a Box action space, linear weights as a clipped policy with the observation
        statistics seen so far (frozen with it); else ``policy`` itself."""
        if not (self.box and isinstance(policy, LinearPolicy)):
            return policy
        mean, std = self.obs_stats.snapshot() if self.obs_stats is not None else (None, None)
        return LinearBoxPolicy(policy.weights, self.low, self.high, mean, std,
                               self.action_space.dtype.type)

    def _reply_tokens(self) -> int:
        if self.config.family == "tabular":  # digits, a comma and a space per entry
            return (2 + len(str(self.n_choices - 1))) * self.n_states + 32
        return 24 * self.n_outputs * (self.obs_dim + 1) + 32

    # ---------------------------------------------------------------- protocol
    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool
             ) -> int | np.ndarray:
        """The candidate's action (``explore``) or the kept policy's (greedy); an array on a
        Box action space."""
        x = np.asarray(obs, dtype=np.float32)
        policy = self.candidate if explore or self.best is None else self.best
        if isinstance(policy, LinearBoxPolicy):
            return policy.action(x)
        if self.grid is not None:
            return self.grid.vector(int(policy.table[self.discretisation.index(x)]))
        mask = self.mask(legal_moves)
        if isinstance(policy, TabularPolicy):
            action, own = policy.action(self.discretisation.index(x), mask)
            if not own:
                self.counters["illegal_table_actions"] += 1
            return action
        return policy.action(x, mask)[0]

    def record_step(self, obs: Any, action: int | np.ndarray, reward: float) -> None:
        """Remember one step of the candidate's episode for the trajectories shown."""
        x = np.asarray(obs, dtype=np.float32)
        self.counters["env_steps"] += 1
        if self.obs_stats is not None:
            self._seen.append(x)
        if self.grid is not None:
            action = self.grid.index(action)  # the table's own index
        elif self.box:
            action = [round(float(v), 3) for v in action]
        state: Any = (self.discretisation.index(x) if self.discretisation is not None
                      else [round(float(v), 2) for v in x])
        self._steps.append((state, action, reward))

    def end_episode(self, return_: float, length: int) -> None:
        """Keep the finished episode as a trajectory (the best, worst and latest)."""
        trajectory = Trajectory(return_, self.round, length, list(self._steps))
        self.counters["episodes"] += 1
        self.latest_trajectory = trajectory
        self._remember(trajectory)
        self._steps.clear()
        if self._seen:
            self.obs_stats.update(np.asarray(self._seen))
            self._seen.clear()

    def _remember(self, trajectory: Trajectory) -> None:
        size = self.config.replay_buffer_size
        self.best_trajectories = sorted(
            [*self.best_trajectories, trajectory], key=lambda t: -t.return_)[:size]
        self.worst_trajectories = sorted(
            [*self.worst_trajectories, trajectory], key=lambda t: t.return_)[:size]

    def end_round(self, returns: list[float]) -> None:
        """Score the candidate by the mean of its episodes' ``returns``, keep it when it
        beats the kept policy, log the round and ask for the next candidate."""
        score = float(np.mean(returns))
        kept = self.best is None or score > self.best_return
        if kept:
            self.best, self.best_return = self.candidate, score
            self.counters["kept"] += 1
        self.counters["evaluated"] += 1
        if self.round > 0:
            self.last_proposal, self.last_return, self.last_kept = self.candidate, score, kept
        self.scores.append((self.round, score, kept))
        self._log(self._pending | {
            "proposal": self.candidate.to_json(),
            "episode_returns": list(returns),
            "evaluated_return": score,
            "kept": kept,
            "skipped": False,
        })
        self._next_candidate()

    def _next_candidate(self) -> None:
        """Ask for proposals until one is usable or the rounds run out (then stop)."""
        while self.round < self.config.rounds:
            self.round += 1
            self.counters["rounds"] += 1
            policy, entry = self._propose()
            if policy is not None:
                self.candidate, self._pending = policy, entry
                return
            self.counters["skipped_rounds"] += 1
            self._log(entry | {"proposal": None, "episode_returns": [], "evaluated_return": None,
                               "kept": False, "skipped": True})
        self.finished = True
        self.candidate = self.best

    # ---------------------------------------------------------------- proposing
    def _propose(self) -> tuple[Policy | None, dict[str, Any]]:
        entry = _entry(self.round, self.config.proposer)
        if self.config.proposer == "random":
            entry["requests"] = 1
            self.counters["requests"] += 1
            return self._random_policy(), entry
        variables = self.prompt_variables()
        system = self.templates["system"].substitute(variables)
        user = self.templates["user"].substitute(variables)
        if self.config.reset_conversation or not self.conversation:
            self.conversation = [{"role": "system", "content": system}]
        messages = [*self.conversation, {"role": "user", "content": user}]
        started = time.perf_counter()
        entry["prompt_chars"] = sum(len(m["content"]) for m in messages)
        reply, policy, error = self._ask(messages, entry)
        if policy is None:
            entry["corrections"] = 1
            self.counters["corrections"] += 1
            correction = self.templates["correction"].substitute(
                variables | {"error": error, "reply": reply})
            messages = [*messages, {"role": "assistant", "content": reply or "(no reply)"},
                        {"role": "user", "content": correction}]
            entry["prompt_chars"] += len(correction) + len(reply or "(no reply)")
            reply, policy, error = self._ask(messages, entry)
        entry["reply"], entry["error"] = reply, error
        entry["llm_seconds"] = round(time.perf_counter() - started, 3)
        if policy is not None and not self.config.reset_conversation:
            self.conversation = self._trimmed(
                [*messages, {"role": "assistant", "content": reply}])
        return policy, entry

    def _ask(self, messages: list[dict[str, str]], entry: dict[str, Any]
             ) -> tuple[str, Policy | None, str | None]:
        """One request: (reply text, policy or None, what was wrong or None)."""
        entry["requests"] += 1
        self.counters["requests"] += 1
        schema = self.schema if self.config.structured_output else None
        backend = self.backend
        seed = (backend.seed + self.round) % 2**31 if self.config.vary_seed else None
        try:
            reply = backend.chat(messages, schema=schema, max_tokens=self.max_tokens, seed=seed)
        except LLMReplyError as error:  # includes StructuredOutputError: nothing usable
            return "", None, str(error)
        try:
            policy = parse_proposal(reply, self.config.family, self.n_choices, self.n_states,
                                    self.obs_dim)
        except ValueError as error:
            return reply, None, str(error)
        return reply, self._own(policy), None

    def _trimmed(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        """The conversation without its oldest rounds beyond ``conversation_chars``."""
        system, rest = messages[:1], messages[1:]
        while len(rest) > 2 and sum(len(m["content"]) for m in rest) > \
                self.config.conversation_chars:
            # drop the oldest user message and everything up to the next user message
            cut = next((i for i in range(1, len(rest)) if rest[i]["role"] == "user"), len(rest))
            rest = rest[cut:]
        return system + rest

    def prompt_variables(self) -> dict[str, str]:
        """The values of every :data:`TEMPLATE_VARIABLES` entry for the current round."""
        variables = prompt_variables(self)
        if self.grid is not None:  # table entries are indices of discretised action vectors
            variables |= {"actions": self.grid.layout(self.action_names),
                          "n_actions": str(self.n_choices), "output_format": (
                              f'{{"actions": [a list of exactly {self.n_states} action indices, '
                              f"one per state in state order, each 0 to {self.n_choices - 1}]}}")}
        return variables

    # ---------------------------------------------------------------- logging
    def _log(self, entry: dict[str, Any]) -> None:
        llm = self.backend.stats() if self.backend is not None else {}
        entry = entry | {
            "best_return": self.best_return if self.best is not None else None,
            "env_steps": self.counters["env_steps"],
            "episodes": self.counters["episodes"],
            "requests_total": self.counters["requests"],
            "llm_calls_total": int(llm.get("llm_calls", 0)),
            "llm_cache_hits_total": int(llm.get("llm_cache_hits", 0)),
        }
        self.round_log.append(entry)
        if self.log_path is not None:
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")

    def stats(self) -> dict[str, float]:
        """The search's counters and, with an LLM, the backend's (``llm_calls`` ...)."""
        out: dict[str, float] = dict(self.counters)
        if self.backend is not None:
            out |= self.backend.stats()
        return out

    # ---------------------------------------------------------------- the loop
    def learner(self, override: Any = None) -> PolicySearchLearner:
        """The search's own learner, a loop over rounds; it takes no advisor."""
        if override is not None:
            raise ValueError("an advisor replaces actions a step learner learns from; a "
                             "policy search scores whole episodes of its candidates")
        return PolicySearchLearner(self)

    # ------------------------------------------------------------ save / load
    def header(self) -> dict[str, Any]:
        return super().header() | {"family": self.config.family, "n_states": self.n_states,
                                   "bins": self.config.bins, "n_outputs": self.n_outputs,
                                   "action_bins": self.config.action_bins}

    def snapshot(self) -> Any:
        return (self.best, self.best_return)

    def restore(self, snapshot: Any) -> None:
        self.best, self.best_return = snapshot

    def get_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        state, tensors = super().get_state()
        state |= {"best_return": self.best_return if self.best is not None else None,
                  "round": self.round, "counters": self.counters}
        if self.best is not None:
            data = (self.best.table if isinstance(self.best, TabularPolicy)
                    else self.best.weights)
            tensors = tensors | {"best": torch.as_tensor(np.ascontiguousarray(data))}
            if isinstance(self.best, LinearBoxPolicy):
                tensors |= {"best_mean": torch.as_tensor(self.best.mean),
                            "best_std": torch.as_tensor(self.best.std)}
        return state, tensors

    def set_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:
        super().set_state(state, tensors)
        self.round = int(state["round"])
        self.counters = dict(state["counters"])
        if "best" not in tensors:
            self.best, self.best_return = None, -math.inf
            return
        data = tensors["best"].numpy()
        if self.box and self.grid is None:
            self.best = LinearBoxPolicy(data, self.low, self.high, tensors["best_mean"].numpy(),
                                        tensors["best_std"].numpy(),
                                        self.action_space.dtype.type)
        else:
            self.best = (TabularPolicy(data, self.n_choices) if self.config.family == "tabular"
                         else LinearPolicy(data, self.obs_dim, self.n_actions))
        self.best_return = float(state["best_return"])


def _entry(round_: int, proposer: str) -> dict[str, Any]:
    """The start of one round's log entry."""
    return {"round": round_, "proposer": proposer, "requests": 0, "corrections": 0,
            "prompt_chars": 0, "reply": None, "error": None, "llm_seconds": 0.0}


def _names(given: list[str] | None, count: int, what: str, prefix: str) -> list[str]:
    if given is None:
        return [f"{prefix}{i}" for i in range(count)]
    if len(given) != count:
        raise ValueError(f"{what} has {len(given)} names, expected {count}")
    return list(given)


class PolicySearchLearner:
    """The loop of :class:`LLMPolicySearch`: each round runs the candidate for
    ``evaluation_episodes`` episodes, scores it and asks for the next one, until the
    rounds are done or the budget (``episodes`` / ``steps``, both optional) is spent."""

    def __init__(self, search: LLMPolicySearch) -> None:
        self.search = search

    def learn(self, env: gym.Env, budget: Budget,
              callbacks: Sequence[Callback] = ()) -> TrainingResult:
        search = self.search
        run = start_run(search, env, budget, callbacks)
        search.reset_search()
        if search.log_path is not None:
            search.log_path.write_text("")
        seed: int | None = budget.seed
        while not search.finished:  # one round: the candidate's episodes
            returns: list[float] = []
            while len(returns) < search.config.evaluation_episodes:
                if budget.spent(run.episodes, run.steps):
                    return end_run(run)
                record = run_episode(run, seed, lambda obs, info: search._act(
                    obs, info.get("legal_moves"), True), search.record_step)
                seed = None
                if record is None:  # cut short by the step budget
                    return end_run(run)
                search.end_episode(record.return_, record.length)
                returns.append(record.return_)
                if len(returns) == search.config.evaluation_episodes:
                    started = time.perf_counter()
                    search.end_round(returns)  # before the record: evaluations see the best
                    # the round's last row carries the proposal's time, as a step learner's
                    # row carries its updates (progress and the summary read wall times)
                    record.wall_time += time.perf_counter() - started
                run.record(record)
        return end_run(run)
