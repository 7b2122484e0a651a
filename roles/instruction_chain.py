"""What the agent is told and what pays it: :func:`make_chain` (one instruction, a chain, or
a task sentence split by an LLM, :func:`decompose_task`, or by rule, :func:`split_task`) and
:class:`InstructionFollowing`, a gymnasium wrapper paying each sub-goal once per episode, in
order. See docs/instructions.md."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pydantic import Field, Strict

from ..errors import checked
from ..llm import LLMReplyError, parse_json_reply
from .backends import RoleCounters, make_llm_backend

Count = Annotated[int, Strict(), Field(ge=1)]
"""A count of at least 1 (``True`` or ``2.0`` are errors)."""
Cosine = Annotated[float, Strict(), Field(ge=-1, le=1)]
Finite = Annotated[float, Strict(), Field(allow_inf_nan=False)]

MAX_SUBGOALS = 6  # the longest chain a task sentence may become

SUBGOALS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"subgoals": {"type": "array", "minItems": 1, "maxItems": MAX_SUBGOALS,
                                "items": {"type": "string", "minLength": 3, "maxLength": 120}}},
    "required": ["subgoals"],
    "additionalProperties": False,
}
# No example place in the prompts: SmolLM2 copies an example instead of reading the task
# (measured: 0 of the 5 shipped task sentences with an example, docs/instructions.md).
DECOMPOSE_SYSTEM = (
    "You split a task into the places an agent must reach, in the order the task gives them. "
    "Copy each place's words from the task."
)
DECOMPOSE_USER = (
    "Task: {task}\n"
    'Reply with JSON {{"subgoals": [...]}}: one entry per place, in order.'
)
CORRECTION_USER = (
    "Your reply {reply} has no usable sub-goal. Each sub-goal must be a short phrase of two "
    "or more words, copied from the task, naming one place to reach. Task: {task}\n"
    'Reply with JSON {{"subgoals": [...]}}.'
)
_PLACEHOLDERS = {"<first place>", "<second place>", "first place", "second place", "..."}
_SPLIT = re.compile(
    r"\s*(?:;|,?\s*\band then\b|,?\s*\bthen\b|,?\s*\bbefore (?:you )?(?:go(?:ing)? )?(?:to )?|"
    r",?\s*\band finally\b|,?\s*\band finish (?:at|in|on)\b|,?\s*\bfinally\b|"
    r",\s*(?=(?:walk|go|move|head|run|reach|visit|get)\b))\s*",
    re.IGNORECASE)
_LEAD = re.compile(
    r"^(?:(?:first|next|and|finally|please|now)\s*,?\s+)*(?:(?:go|walk|move|get|head|run|come)"
    r"(?:\s+(?:back|down|up|over))?\s+(?:to|into|towards?)\s+|(?:reach|visit|find|start in|"
    r"start at|finish at|end at|stop at)\s+)?(?:to\s+)?", re.IGNORECASE)


def check_instruction(text: Any, what: str = "instruction") -> str:
    """``text`` with whitespace collapsed; ValueError naming it when it is not a non-empty
    string."""
    if not isinstance(text, str):
        raise ValueError(f"{what} {text!r} is a {type(text).__name__}; expected a non-empty "
                         "string such as 'the top left corner'")
    clean = " ".join(text.split())
    if not clean:
        raise ValueError(f"{what} {text!r} is empty; expected a non-empty string such as "
                         "'the top left corner'")
    return clean


def usable_subgoals(items: Any, task: str = "") -> list[str]:
    """The usable sub-goals of an LLM's list (docs/instructions.md), in order."""
    if not isinstance(items, list):
        return []
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            continue
        text = _LEAD.sub("", " ".join(item.split()).strip(" .")).strip(" .")
        words = [w for w in text.split() if re.search(r"[A-Za-z]{2,}", w)]
        if (len(words) < 2 or text.lower() in _PLACEHOLDERS or "<" in text
                or text.lower() == task.strip(" .").lower() or text.lower() in
                (o.lower() for o in out)):
            continue
        out.append(text)
    return out[:MAX_SUBGOALS]


def split_task(task: str) -> tuple[str, ...]:
    """A task sentence split into sub-goals by its joining words, without an LLM:
    ``"Go to the top left corner, then the goal."`` -> ``("the top left corner", "the
    goal")``. ValueError naming the task when nothing is left."""
    task = check_instruction(task, "task sentence")
    parts = []
    for piece in _SPLIT.split(task.strip().rstrip(".!")):
        piece = _LEAD.sub("", piece.strip(" ,.")).strip(" ,.")
        if piece:
            parts.append(piece)
    if not parts:
        raise ValueError(f"task sentence {task!r} has no sub-goal to split")
    return tuple(parts)


def decompose_task(task: str, backend: Any = "llamacpp", counters: RoleCounters | None = None,
                   max_tokens: int = 160) -> tuple[str, ...]:
    """The sub-goals an LLM reads in ``task`` (docs/instructions.md). ``backend``: a spec
    for :func:`langadapt.llm.make_backend` (``"llamacpp"``, the embedded model, by default;
    ``{"backend": "ollama", "model": "llama3.2"}`` for Ollama) or an object with ``chat``.
    ``counters`` (a :class:`RoleCounters`) counts the calls."""
    task = check_instruction(task, "task sentence")
    llm = make_llm_backend(backend)
    counters = counters if counters is not None else RoleCounters("decompositions")
    messages = [{"role": "system", "content": DECOMPOSE_SYSTEM},
                {"role": "user", "content": DECOMPOSE_USER.format(task=task)}]
    replies = []
    for attempt in range(2):
        with counters.llm_call(llm):
            reply = llm.chat(messages, schema=SUBGOALS_SCHEMA, max_tokens=max_tokens)
        replies.append(reply)
        try:
            items = parse_json_reply(reply).get("subgoals")
        except (AttributeError, LLMReplyError):
            items = None
        subgoals = usable_subgoals(items, task)
        if subgoals:
            if "decompositions" in counters:
                counters["decompositions"] += 1
            return tuple(subgoals)
        if attempt == 0:
            shown = reply if len(str(reply)) <= 300 else str(reply)[:300] + "..."
            messages = [*messages, {"role": "assistant", "content": str(reply)},
                        {"role": "user", "content": CORRECTION_USER.format(reply=shown,
                                                                           task=task)}]
    raise ValueError(
        f"the LLM gave no usable sub-goals for the task sentence {task!r} (replies: "
        f"{[str(r)[:200] for r in replies]}); write the chain yourself (chain: [...]) or use a "
        "larger model")


def make_chain(instruction: str | Sequence[str] | None = None, *, task: str | None = None,
               backend: Any = "llamacpp", decompose: str = "llm",
               counters: RoleCounters | None = None) -> tuple[str, ...]:
    """The chain of sub-goal sentences for one instruction (a string), a chain (a list of
    strings) or a task sentence (``task=``; ``decompose="llm"`` asks ``backend``,
    ``"rules"`` uses :func:`split_task`). Exactly one of ``instruction`` and ``task``."""
    if (instruction is None) == (task is None):
        raise ValueError("give exactly one of an instruction (a string or a list of strings) "
                         f"and task=; got instruction={instruction!r}, task={task!r}")
    if task is not None:
        if decompose not in ("llm", "rules"):
            raise ValueError(f"decompose={decompose!r}: expected 'llm' or 'rules'")
        return (decompose_task(task, backend, counters) if decompose == "llm"
                else split_task(task))
    if isinstance(instruction, str):
        return (check_instruction(instruction),)
    if not isinstance(instruction, Sequence) or isinstance(instruction, bytes) or not instruction:
        raise ValueError(f"instruction {instruction!r}: expected a non-empty string or a "
                         "non-empty list of strings (a chain)")
    return tuple(check_instruction(item, f"sub-goal {i + 1} of the chain")
                 for i, item in enumerate(instruction))


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
        """A SubGoal from a SubGoal, a :class:`~.instruction_search.Match` or ``(text,
        descriptions)``."""
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

    @checked
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
