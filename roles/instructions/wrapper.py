""":class:`InstructionFollowing`: a gymnasium wrapper that pays each sub-goal once per episode,
in order (``form`` potential or instruction), and shows the agent the current sub-goal (a
one-hot appended to the observation, a sentence to the description). ``info`` gains
``subgoal_index``, ``subgoals_reached_now``, ``instruction_done``, ``unshaped_reward`` and
``env_success``. See docs/instructions.md."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pydantic import Field, Strict

from .spec import Finite, check_instruction, checked_arguments

__all__ = ["InstructionFollowing", "SubGoal"]


@dataclass(frozen=True)
class SubGoal:
    """One sub-goal: its text and what reaches it — descriptions (from a match), and/or a
    ``check`` of the unwrapped environment (ground truth, e.g. a maze cell set or a mission's
    success test)."""

    text: str
    descriptions: frozenset[str] = field(default_factory=frozenset)
    check: Callable[[Any], bool] | None = None

    def reached(self, description: str | None, base: Any) -> bool:
        if description is not None and description in self.descriptions:
            return True
        return self.check is not None and bool(self.check(base))

    @classmethod
    def of(cls, item: Any) -> SubGoal:
        """A SubGoal from a SubGoal, a :class:`~.search.Match` or ``(text, descriptions)``."""
        if isinstance(item, SubGoal):
            return item
        texts = getattr(item, "texts", None)
        if texts is not None and hasattr(item, "instruction"):
            return cls(item.instruction, frozenset(texts))
        if isinstance(item, tuple) and len(item) == 2:
            text, found = item
            return cls(check_instruction(text, "sub-goal"), frozenset(found))
        raise ValueError(f"sub-goal {item!r}: expected a SubGoal, a Match or (text, "
                         "descriptions)")


def cell_check(cells: Iterable[Sequence[int]]) -> Callable[[Any], bool]:
    """A ``check`` that is true when a maze's agent stands in one of ``cells``."""
    wanted = {(int(r), int(c)) for r, c in cells}
    return lambda base: tuple(base.cell) in wanted


class InstructionFollowing(gym.Wrapper):
    """Reward a chain of sub-goals reached in order (docs/instructions.md)."""

    @checked_arguments
    def __init__(self, env: gym.Env, chain: Sequence[Any],
                 form: Literal["potential", "instruction"] = "potential", bonus: Finite = 1.0,
                 gamma: Annotated[float, Strict(), Field(ge=0, le=1)] = 0.99,
                 step_reward: Finite = 0.0, observe_index: bool = True,
                 describe_subgoal: bool = True, pay: bool = True) -> None:
        super().__init__(env)
        if isinstance(chain, (str, bytes)) or not isinstance(chain, Sequence) or not chain:
            raise ValueError(f"chain {chain!r}: expected a non-empty list of sub-goals")
        self.chain = [SubGoal.of(item) for item in chain]
        for n, goal in enumerate(self.chain):
            if not goal.descriptions and goal.check is None:
                raise ValueError(f"sub-goal {n + 1} ({goal.text!r}) has no description and no "
                                 "check that reaches it")
        self.form, self.bonus, self.gamma = form, float(bonus), float(gamma)
        self.step_reward, self.pay = float(step_reward), bool(pay)
        self.observe_index, self.describe_subgoal = bool(observe_index), bool(describe_subgoal)
        self.base = env.unwrapped
        slots = len(self.chain) + 1
        if self.observe_index:
            space = env.observation_space
            if not isinstance(space, spaces.Box) or len(space.shape) != 1:
                raise ValueError(f"observe_index needs a 1-D Box observation space, got {space!r}"
                                 "; set observe_index=False (and describe the sub-goal instead)")
            self.observation_space = spaces.Box(
                np.concatenate([space.low, np.zeros(slots, dtype=space.dtype)]),
                np.concatenate([space.high, np.ones(slots, dtype=space.dtype)]),
                dtype=space.dtype)
        self._eye = np.eye(slots, dtype=getattr(self.observation_space, "dtype", np.float32))
        self.index = 0
        self._phi = 0.0
        self._steps = 0
        self._finished_at_reset = False
        self.episode_log: list[dict[str, Any]] = []

    # ----------------------------------------------------------------- helpers
    @property
    def done(self) -> bool:
        """Whether the whole chain has been reached this episode."""
        return self.index >= len(self.chain)

    def _advance(self, info: dict[str, Any]) -> int:
        description = info.get("description")
        reached = 0
        while self.index < len(self.chain) and self.chain[self.index].reached(description,
                                                                              self.base):
            self.index += 1
            reached += 1
        return reached

    def _observe(self, obs: Any, info: dict[str, Any]) -> Any:
        if self.describe_subgoal and isinstance(info.get("description"), str):
            tail = (" All sub-goals reached." if self.done else
                    f" Current sub-goal: {self.chain[self.index].text}.")
            info["description"] = info["description"] + tail
        info["subgoal_index"] = self.index
        info["instruction_done"] = self.done
        if not self.observe_index:
            return obs
        return np.concatenate([np.asarray(obs, dtype=self._eye.dtype).ravel(),
                               self._eye[self.index]])

    def potential(self) -> float:
        """Phi of the current augmented state: ``bonus`` times the sub-goals reached."""
        return self.bonus * self.index

    @property
    def first_success_episode(self) -> int | None:
        """1-based index of the first episode that completed the chain (None: none yet)."""
        return next((n for n, entry in enumerate(self.episode_log, 1) if entry["done"]), None)

    # ----------------------------------------------------------------- gymnasium
    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.index = 0
        self._steps = 0
        self._advance(info)
        self._phi = self.potential()
        self._finished_at_reset = self.done
        return self._observe(obs, info), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        reached = 0 if self._finished_at_reset else self._advance(info)
        info["unshaped_reward"] = reward
        info["subgoals_reached_now"] = reached
        info["env_success"] = bool(info.get("is_success", False))
        if self.form == "potential":
            phi = 0.0 if terminated else self.potential()
            shaped = float(reward) + self.gamma * phi - self._phi
            self._phi = phi
        else:
            shaped = self.bonus * reached + self.step_reward
            terminated = bool(terminated or self.done)
            info["is_success"] = self.done
        if self.pay:
            reward = shaped
        if terminated or truncated:
            self.episode_log.append({"reached": self.index, "done": self.done,
                                     "steps": self._steps})
        return self._observe(obs, info), reward, terminated, truncated, info
