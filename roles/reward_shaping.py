""":class:`RewardShaping`: a gymnasium wrapper adding a potential-based term (``potential`` llm
or oracle) or an LLM judge's verdict (``form: judge``); ``info`` gains ``unshaped_reward``
and ``shaping``. See docs/llm-in-the-loop.md."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.stats import spearmanr

from ..agents.base import parse_config
from ..environments import language_for
from ..llm import LLMReplyError, decide
from .backends import RoleCounters, check_structured_output, make_llm_backend
from .oracles import MazeOracle, Oracle, oracle_for
from .prompts import choice_schema, format_state

__all__ = ["JUDGE_SCHEMA", "POTENTIAL_SCHEMA", "RewardShaping", "RewardShapingConfig",
           "spearman_with_distance"]

POTENTIAL_SCHEMA = choice_schema("score", range(11))
JUDGE_SCHEMA = choice_schema("judgement", [-1, 0, 1])
POTENTIAL_QUESTION = (
    'How close is the agent to completing the task? Reply with JSON {"score": N}, N an '
    "integer from 0 (far from it) to 10 (about to complete it)."
)
JUDGE_QUESTION = (
    'Did the action bring the agent closer to completing the task? Reply with JSON '
    '{"judgement": N}: 1 closer, 0 no change, -1 further away.'
)


class RewardShapingConfig(BaseModel):
    """Settings of :class:`RewardShaping` (the ``reward_shaping:`` block of an experiment),
    explained in docs/llm-in-the-loop.md (Reward shaping)."""

    model_config = ConfigDict(extra="forbid")

    potential: Literal["llm", "oracle"] = "llm"
    form: Literal["potential", "judge"] = "potential"
    gamma: float = Field(0.99, ge=0, le=1)  # the agent's discount
    scale: float = Field(1.0, gt=0, allow_inf_nan=False)
    backend: str | dict[str, Any] = "llamacpp"
    language: dict[str, Any] = Field(default_factory=dict)  # options of the language spec
    prompt_style: Literal["verbose", "compact"] = "verbose"


class RewardShaping(gym.Wrapper):
    """Add a shaping term to every reward (docs/llm-in-the-loop.md)."""

    def __init__(
        self, env: gym.Env, config: RewardShapingConfig | dict[str, Any] | None = None, *,
        backend: Any = None,
    ) -> None:
        super().__init__(env)
        self.config = parse_config(config, RewardShapingConfig)
        self.language = language_for(env, **self.config.language)
        self.base = env.unwrapped
        if backend is not None:
            self.backend = make_llm_backend(backend)
        self.potentials: dict[str, float] = {}
        self.judgements: dict[str, float] = {}
        self.counters = RoleCounters("potentials", "judgements")
        self.oracle: Oracle | None = None
        if self.config.potential == "oracle":
            if self.config.form == "judge":
                raise ValueError("reward_shaping form 'judge' needs potential 'llm', got oracle")
            self.oracle = oracle_for(self.base, "reward_shaping potential 'oracle'")
        self._phi = 0.0
        self._state: np.ndarray | None = None
        self._legal: list[int] | None = None

    # ------------------------------------------------------------------ LLM
    @cached_property
    def backend(self) -> Any:
        return make_llm_backend(self.config.backend)

    def check_backend(self) -> None:
        """Build the backend and check it honours the schema (ValueError otherwise)."""
        if self.config.potential != "llm":
            return
        check_structured_output(self.backend, POTENTIAL_SCHEMA if self.config.form == "potential"
                     else JUDGE_SCHEMA, "reward shaping needs the schema")

    def _ask(self, user: str, schema: dict[str, Any], field: str, allowed: list[int]) -> float:
        """The LLM's answer on the scale ``allowed``: on a backend that scores known replies,
        the expectation over the scale (the probability of every value, from one evaluation
        of the prompt); otherwise the one generated value."""
        messages = [{"role": "system", "content": self.language.task_for(self.config.prompt_style)},
                    {"role": "user", "content": user}]
        reply = ""
        try:
            with self.counters.llm_call(self.backend):
                decision = decide(self.backend, messages, schema, max_tokens=16)
            reply = decision.reply
            if decision.probabilities is not None:
                return float(sum(decision.probability({field: v}) * v for v in allowed))
            value = decision.value[field]
        except (TypeError, KeyError, LLMReplyError):
            value = None
        if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
            raise ValueError(
                f"the LLM's {field} reply {reply!r} is out of range; expected JSON "
                f"{{{field!r}: N}} with N in {allowed[0]}..{allowed[-1]}"
            )
        return value

    def potential(self, state: Any, legal_moves: Any = None) -> float:
        """Phi of a non-terminal ``state`` (one LLM call per distinct state, then memoised;
        with the oracle: of the environment's current state, or of ``state`` where the oracle
        can plan from a given state, like the maze's)."""
        if self.config.potential == "oracle":
            at = getattr(self.oracle, "potential_at", None)
            value = at(state) if at is not None else self.oracle.potential(self.base)
            return self.config.scale * value
        user = (format_state(self.language, state, legal_moves, style=self.config.prompt_style)
                + "\n" + POTENTIAL_QUESTION)
        if user not in self.potentials:
            score = self._ask(user, POTENTIAL_SCHEMA, "score", list(range(11)))
            self.counters["potentials"] += 1
            self.potentials[user] = self.config.scale * score / 10.0
        return self.potentials[user]

    def judge(self, state: Any, legal: Any, action: int, next_state: Any, next_legal: Any
              ) -> float:
        """The LLM's judgement of one transition in [-1, 1]: the expectation over -1, 0, 1
        where the backend scores replies, else the generated value (memoised per prompt)."""
        user = (
            "Before:\n" + format_state(self.language, state, legal)
            + f"\nThe agent chose {self.language.action_label(action)}.\nAfter:\n"
            + format_state(self.language, next_state, next_legal or legal) + "\n" + JUDGE_QUESTION
        )
        if user not in self.judgements:
            self.judgements[user] = self._ask(user, JUDGE_SCHEMA, "judgement", [-1, 0, 1])
            self.counters["judgements"] += 1
        return self.judgements[user]

    def prepare(self) -> None:
        """Check the backend and, when the states can be enumerated (mazes), score them all
        now: a bad backend or an out-of-range reply fails before training starts."""
        self.check_backend()
        if self.config.form != "potential" or not hasattr(self.base, "free_cells"):
            return
        for cell in self.base.free_cells():
            if tuple(cell) != tuple(getattr(self.base, "goal", ())):
                state = self.base.observation_of(cell)
                self.potential(state, self.base.legal_moves_at(cell))

    # ------------------------------------------------------------------ gymnasium
    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._state = self.language.state_of(self.base)
        self._legal = info.get("legal_moves")
        if self.config.form == "potential":
            self._phi = self.potential(self._state, self._legal)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        state = self.language.state_of(self.base)
        legal = info.get("legal_moves")
        if self.config.form == "potential":
            phi = 0.0 if terminated else self.potential(state, legal)
            shaping = self.config.gamma * phi - self._phi
            self._phi = phi
        else:
            verdict = self.judge(self._state, self._legal, int(action), state, legal)
            shaping = self.config.scale * verdict
        self._state, self._legal = state, legal
        info["unshaped_reward"] = reward
        info["shaping"] = shaping
        return obs, float(reward) + shaping, terminated, truncated, info

    def stats(self) -> dict[str, float]:
        """``potentials`` / ``judgements`` asked and the LLM counters (``llm_calls``, ...)."""
        return self.counters.as_stats()


def spearman_with_distance(shaper: RewardShaping) -> float:
    """Spearman correlation of ``Phi`` with ``-(BFS distance to the goal)`` over every free
    cell of a maze but the goal (1.0: Phi orders the cells exactly as the distance does)."""
    base = shaper.base
    distance = MazeOracle(base.grid, base.goal).distance
    cells = [c for c in base.free_cells() if c in distance and tuple(c) != tuple(base.goal)]
    phi = [shaper.potential(base.observation_of(c), base.legal_moves_at(c)) for c in cells]
    if len(set(phi)) < 2:
        return float("nan")
    return float(spearmanr(phi, [-distance[c] for c in cells]).statistic)
