"""Prompts of the LLM adapters: the system prompt, the user prompt (state, legal actions,
recent history) and the cut to ``context_length - max_tokens`` tokens, estimated as
``ceil(characters / 3)`` (pessimistic, the same for every backend): the oldest history
lines go first, then the state line is shortened. See docs/llm.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

CHARS_PER_TOKEN = 3

DEFAULT_BASE_PROMPT = (
    "You describe the situation of an agent in a reinforcement-learning environment. "
    "Given the current state, the legal actions and the recent actions, write a short, "
    "factual description in plain English, at most three sentences: where the agent is "
    "and what it observes, and what each legal action would do. "
    "Use only the facts given. Do not give advice, do not recommend an action, do not "
    "speculate, and do not repeat these instructions."
)


def estimate_tokens(text: str) -> int:
    """The pessimistic token estimate of the context cut."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def format_raw_state(state: Any) -> str:
    """A raw observation as short, stable text: numbers with 4 significant digits."""
    arr = np.asarray(state)
    if arr.dtype.kind in "biuf":
        flat = arr.reshape(-1)
        if arr.dtype.kind == "f":
            return "[" + ", ".join(f"{float(x):.4g}" for x in flat) + "]"
        return "[" + ", ".join(str(int(x)) for x in flat) + "]"
    return str(state)


@dataclass(frozen=True)
class Prompt:
    """The system and user messages and whether the cut shortened them."""

    system: str
    user: str
    cut: bool


def build_prompt(
    system: str,
    state_text: str,
    legal_text: str,
    history_lines: Sequence[str],
    budget_tokens: int,
) -> Prompt:
    """The user prompt cut to `budget_tokens` (system prompt included), else ValueError."""

    def assemble(state_line: str, lines: Sequence[str]) -> str:
        parts = [f"Current state: {state_line}", f"Legal actions: {legal_text}"]
        if lines:
            parts.append("Recent history (oldest first):")
            parts.extend(f"- {line}" for line in lines)
        return "\n".join(parts)

    def fits(user: str) -> bool:
        return estimate_tokens(system) + estimate_tokens(user) <= budget_tokens

    lines = list(history_lines)
    user = assemble(state_text, lines)
    if fits(user):
        return Prompt(system, user, cut=False)
    while lines:
        lines.pop(0)
        user = assemble(state_text, lines)
        if fits(user):
            return Prompt(system, user, cut=True)
    skeleton = assemble("", [])
    room = (budget_tokens - estimate_tokens(system)) * CHARS_PER_TOKEN - len(skeleton)
    if room <= 0:
        raise ValueError(
            f"context budget of {budget_tokens} tokens cannot hold the system prompt "
            f"({estimate_tokens(system)} tokens) and the prompt skeleton; raise context_length "
            "or lower max_tokens"
        )
    return Prompt(system, assemble(state_text[:room], []), cut=True)
