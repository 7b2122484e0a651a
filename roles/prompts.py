"""Prompts for an LLM that acts: :func:`format_state` (the state as the language spec shows it,
the legal actions, the history) and :class:`DiscreteActionParser` (``Action: N`` or
``{"action": N}``). See docs/llm-in-the-loop.md."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..environments import LanguageSpec
from ..llm import LLMReplyError, parse_json_reply

__all__ = ["ActionParseError", "DiscreteActionParser", "check_legal", "format_state"]


# --------------------------------------------------------------------------- states
def check_legal(spec: LanguageSpec, legal_moves: Sequence[int] | None) -> tuple[int, ...]:
    """``legal_moves`` as a non-empty tuple of distinct actions (None = all actions)."""
    n = spec.n_actions
    if legal_moves is None:
        return tuple(range(n))
    moves = tuple(int(m) for m in np.asarray(legal_moves).ravel())
    if not moves or len(set(moves)) != len(moves) or not all(0 <= m < n for m in moves):
        raise ValueError(
            f"legal_moves is {list(legal_moves)!r}, expected distinct actions in [0, {n}), "
            "at least one"
        )
    return moves


def format_state(
    spec: LanguageSpec,
    state: Any,
    legal_moves: Sequence[int] | None = None,
    history: Sequence[tuple[Any, int]] = (),
    style: str = "verbose",
) -> str:
    """The user message for ``state``: what the spec shows of it (``style`` verbose or
    compact; ``spec.show`` checks the state), the legal actions (checked by
    :func:`check_legal`) and the actions of ``history`` (``(state, action)`` pairs, oldest
    first)."""
    return state_message(spec, state, check_legal(spec, legal_moves), history, style)


def state_message(spec: LanguageSpec, state: Any, moves: Sequence[int],
                  history: Sequence[tuple[Any, int]] = (), style: str = "verbose") -> str:
    """:func:`format_state` for ``moves`` a caller has checked."""
    taken = [spec.action_names[int(action)] for _, action in history]
    if style == "compact":
        lines = [spec.show(state, moves, style),
                 "moves: " + ", ".join(f"{m} {spec.action_names[m]}" for m in moves)]
        if taken:
            lines.append("previous: " + ", ".join(taken))
        return "\n".join(lines)
    lines = [spec.show(state, moves, style)]
    lines.append("Legal actions: " + ", ".join(spec.action_label(m) for m in moves) + ".")
    if taken:
        lines.append("Your previous actions, oldest first: " + ", ".join(taken) + ".")
    return "\n".join(lines)


# --------------------------------------------------------------------------- parsers
def choice_schema(key: str, values: Iterable[int]) -> dict[str, Any]:
    """The JSON schema of ``{key: N}``, N one of the integers ``values``."""
    enum = {"type": "integer", "enum": [int(v) for v in values]}
    return {"type": "object", "properties": {key: enum}, "required": [key],
            "additionalProperties": False}


class ActionParseError(ValueError):
    """A reply that holds no legal action; the message says what was wrong."""


_ACTION_LINE = re.compile(
    r"^[\s*_`>#-]*action[\s*_`]*[:=][\s*_`\"']*([+-]?\d+)(?!\d|\.\d)", re.IGNORECASE | re.MULTILINE
)


class DiscreteActionParser(BaseModel):
    """``Action: N`` (text: the last such line, any case or emphasis) or ``{"action": N}``
    (structured) for a ``Discrete(n)`` space; :class:`ActionParseError` when no legal action."""

    model_config = ConfigDict(extra="forbid")

    n_actions: int = Field(gt=0, description="size of the Discrete action space")

    def action_format(self, legal_moves: Sequence[int]) -> str:
        moves = ", ".join(str(m) for m in legal_moves)
        return (
            "Answer with one line of the form 'Action: N' where N is the number of your "
            f"action, one of {moves}."
        )

    def parse(self, text: str, legal_moves: Sequence[int]) -> int:
        if not isinstance(text, str):
            raise ActionParseError(f"the reply is {text!r}, expected text")
        found = _ACTION_LINE.findall(text)
        if not found:
            raise ActionParseError(
                f"the reply {_clip(text)!r} has no line 'Action: N'"
            )
        return self._legal(int(found[-1]), legal_moves, text)

    def schema(self, legal_moves: Sequence[int]) -> dict[str, Any]:
        return choice_schema("action", legal_moves)

    def parse_json(self, text: str, legal_moves: Sequence[int]) -> int:
        try:
            value = parse_json_reply(text)["action"]
        except (TypeError, ValueError, KeyError, LLMReplyError):
            raise ActionParseError(
                f"the reply {_clip(text)!r} is not a JSON object with an integer 'action'"
            ) from None
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # {"action": 3.0} fits the schema's "integer"
        if isinstance(value, bool) or not isinstance(value, int):
            raise ActionParseError(f"the reply's action is {value!r}, expected an integer")
        return self._legal(value, legal_moves, text)

    def _legal(self, action: int, legal_moves: Sequence[int], text: str) -> int:
        if not 0 <= action < self.n_actions:
            raise ActionParseError(
                f"the reply names action {action}, outside [0, {self.n_actions})"
            )
        if action not in [int(m) for m in legal_moves]:
            raise ActionParseError(
                f"the reply names action {action}, which is not legal here (legal: "
                f"{', '.join(str(m) for m in legal_moves)})"
            )
        return action


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
