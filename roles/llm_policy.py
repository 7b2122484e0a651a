""":class:`LLMPolicy`: an agent that acts by asking a language model (``decoding`` structured
or text; a fallback is a random legal move, never an exception mid-run; ``few_shot`` puts
the best episode into prompts). See docs/llm-in-the-loop.md."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..agents.base import Agent
from ..environments import LanguageSpec, language_for, unwrap_env
from ..llm import Decision, LLMReplyError, decide
from .backends import BackendSpec, RoleCounters, check_structured_output, make_llm_backend
from .prompts import (
    ActionParseError,
    DiscreteActionParser,
    check_legal,
    format_state,
    state_message,
)
from .reward_shaping import POTENTIAL_QUESTION, POTENTIAL_SCHEMA

__all__ = ["LLMPolicy", "LLMPolicyConfig", "adapter_info", "decision_messages", "show_prompt",
           "trained_prompt_style"]


class LLMPolicyConfig(BaseModel):
    """Settings of :class:`LLMPolicy`, explained in docs/llm-in-the-loop.md (LLM policy)."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendSpec = "llamacpp"  # a spec for langadapt.llm.make_backend
    decoding: Literal["structured", "text"] = "structured"
    history_length: int = Field(0, ge=0)
    few_shot: int = Field(0, ge=0)
    max_tokens: int | None = Field(None, gt=0)  # None: 16 structured, 48 text
    language: dict[str, Any] = Field(default_factory=dict)  # options of the language spec
    prompt_style: Literal["verbose", "compact"] = "verbose"

    @model_validator(mode="after")
    def _prompts_of_the_adapter(self) -> LLMPolicyConfig:
        """A GRPO adapter acts as trained only on the prompts it was trained on."""
        adapter = self.backend.get("adapter") if isinstance(self.backend, dict) else None
        trained = None if adapter is None else trained_prompt_style(adapter)
        if trained is not None and trained != self.prompt_style:
            raise ValueError(
                f"prompt_style is {self.prompt_style!r}, but the adapter {str(adapter)!r} "
                f"was trained on {trained!r} prompts; expected prompt_style: {trained}")
        return self


def adapter_info(adapter: str | Path) -> dict[str, Any] | None:
    """What a GRPO adapter folder's ``policy.json`` records; None when the folder has no
    readable ``policy.json`` object (a bare peft adapter: nothing recorded)."""
    try:
        info = json.loads((Path(adapter) / "policy.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return info if isinstance(info, dict) else None


def trained_prompt_style(adapter: str | Path) -> str | None:
    """The prompt style :func:`adapter_info` records (``verbose`` for adapters saved before
    the setting existed); None when nothing is recorded."""
    info = adapter_info(adapter)
    style = None if info is None else info.get("prompt_style", "verbose")
    return style if isinstance(style, str) else None


#: The reply instruction ending a structured decision prompt, per prompt style. The compact
#: style leaves it out: the backend scores the known replies, or enforces their schema.
STRUCTURED_INSTRUCTION = {
    "verbose": '\nReply with JSON {"action": N}, N one of the legal actions.',
    "compact": "",
}


def decision_messages(
    spec: LanguageSpec,
    state: Any,
    moves: Sequence[int],
    history: Sequence[Any] = (),
    decoding: str = "structured",
    examples: Sequence[tuple[Any, Sequence[int], int]] = (),
    style: str = "verbose",
) -> list[dict[str, str]]:
    """The chat messages ``llm_policy`` sends for one decision: the spec's task as system prompt,
    few-shot ``(state, moves, action)`` turns, and the state (``moves`` checked by
    :func:`check_legal`) with the reply instruction of
    ``decoding``, in prompt ``style`` (GRPO fine-tuning trains on exactly these messages)."""
    parser = DiscreteActionParser(n_actions=spec.n_actions)

    def user(s: Any, m: Sequence[int], h: Sequence[Any]) -> str:
        text = state_message(spec, s, m, h, style)
        if decoding == "structured":
            return text + STRUCTURED_INSTRUCTION[style]
        return text + "\n" + parser.action_format(m)

    def answer(action: int) -> str:
        if decoding == "structured":
            return json.dumps({"action": int(action)})
        return f"Action: {int(action)}"

    messages = [{"role": "system", "content": spec.task_for(style)}]
    for ex_state, ex_moves, ex_action in examples:
        messages.append({"role": "user", "content": user(ex_state, ex_moves, ())})
        messages.append({"role": "assistant", "content": answer(ex_action)})
    messages.append({"role": "user", "content": user(state, moves, history)})
    return messages


class LLMPolicy(Agent):
    """Acts by asking an LLM (``backend``: an object with ``chat`` instead of ``config.backend``;
    ``spec``: a language spec, else the bound environment's); observations are raw states."""

    kind: ClassVar[str] = "llm_policy"
    config_model = LLMPolicyConfig
    config: LLMPolicyConfig

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: LLMPolicyConfig | dict[str, Any] | None = None,
        seed: int = 0,
        *,
        backend: Any = None,
        spec: LanguageSpec | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, config, seed)
        self.parser = DiscreteActionParser(n_actions=self.n_actions)
        if backend is not None:
            self.backend = make_llm_backend(backend)
        self.spec: LanguageSpec | None = None
        if spec is not None:
            self.set_spec(spec)
        self._history: Any = None
        self._env_space: spaces.Space | None = None  # a Dict/Tuple space, set by bind()
        self._checked = False
        #: The last decision's raw replies, why each unusable one failed, and the scored
        #: decision (every candidate's probability) when the backend scored: for `show_prompt`.
        self.last_replies: list[str] = []
        self.last_failures: list[str] = []
        self.last_decision: Decision | None = None
        self._last_moves: list[int] = list(range(self.n_actions))
        self.counters = RoleCounters("decisions", "parse_failures", "corrections")
        self._episode: list[tuple[list[float], list[int], int]] = []
        self._episode_return = 0.0
        self.best_return: float | None = None
        self.best_episode: list[tuple[list[float], list[int], int]] = []

    # ------------------------------------------------------------------ setup
    @property
    def learns(self) -> bool:  # only the few-shot examples can change
        return self.config.few_shot > 0

    @cached_property
    def backend(self) -> Any:
        """The LLM backend (made from ``config.backend`` on first use)."""
        return make_llm_backend(self.config.backend)

    def set_spec(self, spec: LanguageSpec) -> None:
        if spec.n_actions != self.n_actions:
            raise ValueError(
                f"the language spec names {spec.n_actions} actions, "
                f"but this agent has {self.n_actions}"
            )
        if spec.state_shape is not None and tuple(spec.state_shape) != self.obs_shape:
            raise ValueError(
                f"llm_policy reads raw states of shape {tuple(spec.state_shape)} "
                f"({spec.describer.env_name}), but its observations have shape "
                f"{self.obs_shape}; give it the raw adapter's observations"
            )
        self.spec = spec

    def bind(self, env: Any) -> None:
        """Take the language spec (unless given) and the episode history from ``env``; ValueError
        when the environment has no spec or its observations are not raw states."""
        if self.spec is None:
            self.set_spec(language_for(env, **self.config.language))
        space = getattr(unwrap_env(env), "observation_space", None)
        self._env_space = None if isinstance(space, spaces.Box) else space
        try:  # the episode history a LanguageObservation wrapper keeps
            self._history = env.get_wrapper_attr("history")
        except AttributeError:
            self._history = None
        if self.config.history_length and self._history is None:
            raise ValueError(
                f"history_length is {self.config.history_length}, but {env!r} keeps no "
                "episode history; wrap it in adapters.LanguageObservation or use 0"
            )
        if not self._checked:
            self.check_backend()
            self._checked = True

    def check_backend(self) -> None:
        """Build the backend and, in structured mode, check it can honour the action schema
        (ValueError naming the schema otherwise): bad settings fail before training."""
        backend = self.backend  # built now: bad settings fail before training
        if self.config.decoding == "structured":
            check_structured_output(backend, self.parser.schema(range(self.n_actions)),
                         "decoding 'structured' needs the action schema", "; use decoding: text or "
                         "another backend")

    # ------------------------------------------------------------------ acting
    def state_of(self, obs: Any) -> Any:
        """The state the spec's describer takes of an observation: its numbers, or for a
        describer of Dict/Tuple observations (``state_shape`` None) the environment's own
        observation (gymnasium's ``unflatten`` of the raw adapter's flat vector)."""
        if self.spec is None or self.spec.state_shape is not None:
            return np.asarray(obs, dtype=np.float32)
        if self._env_space is None or not isinstance(obs, (np.ndarray, list)):
            return obs
        return spaces.unflatten(self._env_space, np.asarray(obs, dtype=np.float32))

    def check_input(self, obs: Any) -> None:
        """:meth:`check_obs`, but an environment's own Dict/Tuple observation goes as it is."""
        if self.spec is None or self.spec.state_shape is not None or (
                self._env_space is not None and isinstance(obs, (np.ndarray, list))):
            self.check_obs(obs)

    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> int:
        history = ()
        if self._history is not None and self.config.history_length:
            history = list(self._history)[-self.config.history_length :]
        return self.decide(self.state_of(obs), legal_moves, history, explore)

    def decide(self, state: Any, legal_moves: Sequence[int] | None,
               history: Sequence[Any] = (), explore: bool = False) -> int:
        """One decision for the raw ``state``: :meth:`decide_with_probability`'s action."""
        return self.decide_with_probability(state, legal_moves, history, explore)[0]

    def decide_with_probability(
        self, state: Any, legal_moves: Sequence[int] | None, history: Sequence[Any] = (),
        explore: bool = False,
    ) -> tuple[int, float | None]:
        """The most probable action among ``legal_moves`` (``explore``: one sampled from the
        model's distribution) and its probability (None when the reply was generated).
        See docs/llm-in-the-loop.md."""
        if self.spec is None:
            raise ValueError(
                "llm_policy has no language spec; pass spec=language_for(env) "
                "or call bind(env) first"
            )
        moves = check_legal(self.spec, legal_moves)
        self._last_moves = list(moves)
        self.last_replies, self.last_failures, self.last_decision = [], [], None
        self.counters["decisions"] += 1
        if len(moves) == 1:
            return moves[0], 1.0
        messages = self.messages(state, moves, history)
        if self.config.decoding == "structured":
            return self._structured(messages, moves, explore)
        return self._text(messages, moves), None

    def messages(
        self, state: Any, moves: Sequence[int], history: Sequence[Any] = ()
    ) -> list[dict[str, str]]:
        """The chat messages of one decision: the task, few-shot turns, the state."""
        return decision_messages(self.spec, state, moves, history, self.config.decoding,
                                 self._examples(), self.config.prompt_style)

    def _chat(self, messages: list[dict[str, str]], schema: dict[str, Any] | None) -> str:
        default = 16 if schema is not None else 48
        with self.counters.llm_call(self.backend):
            reply = self.backend.chat(
                messages, schema=schema, max_tokens=self.config.max_tokens or default
            )
        self.last_replies.append(reply)
        return reply

    def _structured(self, messages: list[dict[str, str]], moves: tuple[int, ...],
                    explore: bool = False) -> tuple[int, float | None]:
        schema = self.parser.schema(moves)
        try:
            with self.counters.llm_call(self.backend):
                decision = decide(self.backend, messages, schema,
                                  max_tokens=self.config.max_tokens or 16,
                                  rng=self.rng if explore else None)
            self.last_decision = decision
            self.last_replies.append(decision.reply)
            action = self.parser.parse_json(json.dumps(decision.value), moves)
        except (ActionParseError, LLMReplyError) as error:
            # a reply outside the schema (the backend promised it): counted, the run goes on
            self.last_failures.append(str(error))
            self.counters["parse_failures"] += 1
            return self._fallback(moves), None
        return action, decision.probability({"action": action})

    def _fallback(self, moves: tuple[int, ...]) -> int:
        self.counters["llm_fallbacks"] += 1
        record = getattr(self.backend, "record_fallback", None)
        if callable(record):
            record()
        return int(self.rng.choice(moves))

    def _text(self, messages: list[dict[str, str]], moves: tuple[int, ...]) -> int:
        reply = self._chat(messages, None)
        try:
            return self.parser.parse(reply, moves)
        except ActionParseError as error:
            self.counters["parse_failures"] += 1
            problem = str(error)
            self.last_failures.append(problem)
        self.counters["corrections"] += 1
        retry = [
            *messages,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": f"{problem[0].upper()}{problem[1:]}. "
             + self.parser.action_format(moves)},
        ]
        reply = self._chat(retry, None)
        try:
            return self.parser.parse(reply, moves)
        except ActionParseError as error:
            self.last_failures.append(str(error))
            self.counters["parse_failures"] += 1
            return self._fallback(moves)

    # ------------------------------------------------------------------ few-shot
    def _examples(self) -> list[tuple[list[float], list[int], int]]:
        k = self.config.few_shot
        if not k or not self.best_episode:
            return []
        picks = np.unique(np.linspace(0, len(self.best_episode) - 1, k).round().astype(int))
        return [(self.state_of(np.asarray(state, dtype=np.float32)), moves, action)
                for state, moves, action in (self.best_episode[i] for i in picks)]

    def _learn(self, obs: Any, action: int, reward: float, next_obs: Any, terminated: bool,
               truncated: bool, next_legal_moves: Sequence[int] | None = None,
               **options: Any) -> None:
        """Record the step; at the episode's end keep it when its return is the best yet."""
        if not self.config.few_shot:
            return
        self._episode.append((np.asarray(obs, dtype=np.float32).tolist(), self._last_moves,
                              int(action)))
        self._episode_return += float(reward)
        if terminated or truncated:
            if self.best_return is None or self._episode_return > self.best_return:
                self.best_return = self._episode_return
                self.best_episode = self._episode
            self._episode, self._episode_return = [], 0.0

    # ------------------------------------------------------------------ counters, files
    def stats(self) -> dict[str, float]:
        """The counters (docs/llm-in-the-loop.md): ``decisions``, ``parse_failures``,
        ``corrections`` and the LLM layer's."""
        return self.counters.as_stats()

    def header(self) -> dict[str, Any]:
        return {**super().header(), "config": self.config.model_dump(mode="json")}

    def get_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        state, tensors = super().get_state()
        state.update(best_return=self.best_return, best_episode=self.best_episode)
        return state, tensors

    def set_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:
        super().set_state(state, tensors)
        self.best_return = state.get("best_return")
        self.best_episode = [tuple(step) for step in state.get("best_episode", [])]


def show_prompt(
    env: Any, role: str, backend: Any, state: Any = None, decoding: str = "structured",
    legal_moves: Sequence[int] | None = None,
) -> str:
    """The messages an LLM role (``policy``, ``advisor`` or ``shaper``) sends for ``state``
    and its ``legal_moves`` (default: the environment's reset state and its legal moves) and
    the reply, as text (``langadapt prompt``)."""
    obs, info = env.reset(seed=0)
    if state is not None and not isinstance(state, (dict, tuple)):  # a Dict/Tuple one: as is
        state = np.asarray(state, dtype=np.float32)
    legal = info.get("legal_moves") if state is None else legal_moves
    state = obs if state is None else state
    if role == "shaper":
        spec = language_for(env)
        messages = [{"role": "system", "content": spec.task},
                    {"role": "user", "content": format_state(spec, state, legal) + "\n"
                     + POTENTIAL_QUESTION}]
        reply = make_llm_backend(backend).chat(messages, schema=POTENTIAL_SCHEMA, max_tokens=16)
    elif role in ("policy", "advisor"):
        policy = LLMPolicy(env.observation_space, env.action_space,
                           {"decoding": decoding}, backend=backend)
        policy.bind(env)
        action = policy.decide(state, legal)  # checks the legal moves
        messages = policy.messages(state, policy._last_moves)
        reply = _shown_decision(policy, action, policy.stats().get("llm_fallbacks", 0) > 0)
    else:
        raise ValueError(f"role is {role!r}, expected policy, advisor or shaper")
    shown = [f"[{m['role']}]\n{m['content']}" for m in messages]
    return "\n\n".join([*shown, f"[reply]\n{reply}"])


def _shown_decision(policy: LLMPolicy, action: int, fell_back: bool) -> str:
    """The raw replies of a decision, why each unusable one failed, every candidate's
    probability when the backend scored them, then the action taken."""
    failures = policy.last_failures
    lines = []
    for i, reply in enumerate(policy.last_replies):  # failure i is reply i's, if any
        lines.append(f"reply {i + 1}: {reply!r}")
        lines += [f"  not usable: {failures[i]}"] if i < len(failures) else []
    lines += [f"not usable: {failure}" for failure in failures[len(policy.last_replies):]]
    decision = policy.last_decision
    if decision is not None and decision.probabilities is not None:
        lines.append("scores (the model's probability of each legal action):")
        for key, probability in sorted(decision.probabilities.items(), key=lambda kv: -kv[1]):
            move = int(json.loads(key)["action"])
            lines.append(f"  {policy.spec.action_label(move)}: {probability:.3f}")
    taken = policy.spec.action_label(action)
    fallback = " (a random legal action: no usable reply)" if fell_back else ""
    lines.append(f"-> action {taken}{fallback}; counters {policy.stats()}")
    return "\n".join(lines)
