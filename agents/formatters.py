"""Prompts for an LLM that acts: observation formatters and action parsers.

An :class:`ObservationFormatter` turns a raw state into the user message of a prompt::

    formatter = formatter_for(env)              # Maze, CartPole, Sailing (or your own)
    formatter.system_prompt                     # the task: goal, what each action does
    formatter.format(state, legal_moves, history)   # description + legal actions (+ history)

An :class:`ActionParser` reads the action back from the reply: in text mode from a line
``Action: N`` (:meth:`ActionParser.parse`, with :meth:`ActionParser.action_format` the
instruction appended to the prompt), in structured mode from the JSON object that
:meth:`ActionParser.schema` describes (the backend constrains the reply to it, so the
action is always legal).

Your own environment: subclass :class:`ObservationFormatter` (set ``task`` and
``action_names``, implement :meth:`ObservationFormatter.describe` and
:meth:`ObservationFormatter.state_of`) and register it::

    class MyFormatter(ObservationFormatter):
        task: str = "You steer a lift. Reach the floor written on the call button."
        action_names: tuple[str, ...] = ("down", "up")

        def describe(self, state, legal_moves):
            return f"The lift is at floor {int(state[0])}; the call is from floor {int(state[1])}."

        def state_of(self, env):
            return np.array([env.floor, env.call], dtype=np.float32)

    register_formatter(MyLiftEnv, lambda env, **options: MyFormatter(**options))
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ActionParseError",
    "ActionParser",
    "CartPoleFormatter",
    "DiscreteActionParser",
    "MazeFormatter",
    "ObservationFormatter",
    "SailingFormatter",
    "formatter_for",
    "register_formatter",
]


# --------------------------------------------------------------------------- formatters
class ObservationFormatter(BaseModel):
    """State -> prompt for one environment (subclasses fill in the environment's part).

    ``task`` is the system prompt: the goal and what each action does. ``action_names``
    names action ``i`` (shown next to its number). :meth:`format` builds the user message
    from :meth:`describe` (the environment's describer sentence), the legal actions and
    the actions taken so far in the episode.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    task: str = Field(min_length=1, description="system prompt: the task and the actions")
    action_names: tuple[str, ...] = Field(min_length=1, description="name of each action")
    state_shape: tuple[int, ...] = Field(description="shape of the raw state")

    @property
    def system_prompt(self) -> str:
        return self.task

    @property
    def n_actions(self) -> int:
        return len(self.action_names)

    def describe(self, state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        """The state in words (subclasses implement it)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement describe()")

    def state_of(self, env: Any) -> np.ndarray:
        """The current raw state of the (unwrapped) environment ``env``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement state_of()")

    def action_label(self, action: int) -> str:
        return f"{action} ({self.action_names[action]})"

    def check_legal(self, legal_moves: Sequence[int] | None) -> tuple[int, ...]:
        """``legal_moves`` as a non-empty tuple of distinct actions (None = all actions)."""
        if legal_moves is None:
            return tuple(range(self.n_actions))
        moves = tuple(int(m) for m in np.asarray(legal_moves).ravel())
        if not moves or len(set(moves)) != len(moves) or not all(
            0 <= m < self.n_actions for m in moves
        ):
            raise ValueError(
                f"legal_moves is {list(legal_moves)!r}, expected distinct actions in "
                f"[0, {self.n_actions}), at least one"
            )
        return moves

    def format(
        self,
        state: Any,
        legal_moves: Sequence[int] | None = None,
        history: Sequence[tuple[Any, int]] = (),
    ) -> str:
        """The user message for ``state``: its description, the legal actions and the
        actions of ``history`` (``(previous_state, action)`` pairs, oldest first)."""
        array = np.asarray(state, dtype=np.float64)
        if array.shape != self.state_shape or not np.isfinite(array).all():
            raise ValueError(
                f"state is {state!r}, expected finite numbers of shape {self.state_shape}"
            )
        moves = self.check_legal(legal_moves)
        lines = [self.describe(array, moves)]
        lines.append("Legal actions: " + ", ".join(self.action_label(m) for m in moves) + ".")
        if history:
            taken = [self.action_names[int(action)] for _, action in history]
            lines.append("Your previous actions, oldest first: " + ", ".join(taken) + ".")
        return "\n".join(lines)


class MazeFormatter(ObservationFormatter):
    """Grid maze: the maze describer's sentences (goal offset, walls, moves)."""

    task: str = (
        "You are an agent in a grid maze. Reach the goal cell in as few moves as possible. "
        "Each action moves you one cell: 0 left, 1 right, 2 up, 3 down, 4 up-left, "
        "5 down-left, 6 up-right, 7 down-right. You cannot move into a wall; only the legal "
        "actions listed are possible."
    )
    action_names: tuple[str, ...] = (
        "left", "right", "up", "down", "up-left", "down-left", "up-right", "down-right",
    )
    state_shape: tuple[int, ...] = (2,)
    describer: Any = Field(exclude=True, description="a MazeDescriber of this maze")

    def describe(self, state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        return self.describer(state, legal_moves)

    def state_of(self, env: Any) -> np.ndarray:
        return np.array(env.cell, dtype=np.float32)


class CartPoleFormatter(ObservationFormatter):
    """CartPole: the four numbers (cart position, velocity, pole angle, angular velocity),
    then the describer's sentence."""

    task: str = (
        "You balance a pole on a cart that moves along a track. Keep the pole upright and the "
        "cart within 2.4 m of the center for as long as possible; the episode ends when the "
        "pole leans more than 0.21 rad (12 degrees) or the cart leaves the track. Action 0 "
        "pushes the cart to the left, action 1 pushes it to the right. Positive numbers mean "
        "right: a positive pole angle leans right. Pushing the cart toward the side the pole "
        "is falling to brings it back upright."
    )
    action_names: tuple[str, ...] = ("push left", "push right")
    state_shape: tuple[int, ...] = (4,)
    decimals: int = Field(2, ge=0, le=6, description="decimals of the four numbers")
    describer: Any = Field(exclude=True, description="a CartPoleDescriber")

    def describe(self, state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        d = self.decimals
        x, x_dot, angle, omega = (float(v) + 0.0 for v in np.round(state, d))
        return (
            f"Cart position: {x:.{d}f} m\nCart velocity: {x_dot:.{d}f} m/s\n"
            f"Pole angle: {angle:.{d}f} rad\nPole angular velocity: {omega:.{d}f} rad/s\n"
            + self.describer(state, legal_moves)
        )

    def state_of(self, env: Any) -> np.ndarray:
        return np.array(env.state, dtype=np.float32)


class SailingFormatter(ObservationFormatter):
    """Sailing: the sailing describer's sentence (position across the river, heading)."""

    task: str = (
        "You steer a sailing boat up a river against the wind, which blows from straight "
        "ahead. Make progress upstream to the finish line without touching either bank. "
        "Heading straight into the wind makes no progress; sailing across it is fast. "
        "Action 0 turns the bow toward the harbor bank (left), action 1 toward the beach "
        "bank (right)."
    )
    action_names: tuple[str, ...] = ("turn toward the harbor", "turn toward the beach")
    state_shape: tuple[int, ...] = (2,)
    describer: Any = Field(exclude=True, description="a SailingDescriber")

    def describe(self, state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        return self.describer(state, legal_moves)

    def state_of(self, env: Any) -> np.ndarray:
        return np.array([env.x, env.theta], dtype=np.float32)


FormatterFactory = Callable[..., ObservationFormatter]
_FACTORIES: list[tuple[type, FormatterFactory]] = []


def register_formatter(env_type: type, factory: FormatterFactory) -> None:
    """Use ``factory(env, **options) -> ObservationFormatter`` for ``env_type`` (and its
    subclasses); ``env`` is the unwrapped environment. A later registration replaces one
    for the same class."""
    if not isinstance(env_type, type):
        raise ValueError(f"env_type is {env_type!r}, expected an environment class")
    if not callable(factory):
        raise ValueError(f"factory is {factory!r}, expected a callable (env, **options)")
    _FACTORIES[:] = [(t, f) for t, f in _FACTORIES if t is not env_type]
    _FACTORIES.append((env_type, factory))


def _builtin_factories() -> list[tuple[type, FormatterFactory]]:
    from langadapt.adapters.describers import CartPoleDescriber, MazeDescriber, SailingDescriber
    from langadapt.environments import CartPoleEnv, MazeEnv, SailingEnv
    from langadapt.environments.sailing import X_LIMIT

    def maze(env: Any, **options: Any) -> ObservationFormatter:
        return MazeFormatter(describer=MazeDescriber(env.grid, env.goal), **options)

    def cartpole(env: Any, **options: Any) -> ObservationFormatter:
        return CartPoleFormatter(describer=CartPoleDescriber(), **options)

    def sailing(env: Any, **options: Any) -> ObservationFormatter:
        return SailingFormatter(describer=SailingDescriber(half_width=float(X_LIMIT)), **options)

    return [(MazeEnv, maze), (CartPoleEnv, cartpole), (SailingEnv, sailing)]


def formatter_for(env: Any, **options: Any) -> ObservationFormatter:
    """The formatter for ``env`` (an environment, possibly wrapped, or a gymnasium id);
    ``options`` are fields of the formatter (e.g. ``task=...``, ``decimals=3``)."""
    if isinstance(env, str):
        import gymnasium

        import langadapt.environments  # noqa: F401 - registers the langadapt ids

        env = gymnasium.make(env)
    base = getattr(env, "unwrapped", env)
    factories = _builtin_factories() + _FACTORIES
    for env_type, factory in reversed(factories):
        if isinstance(base, env_type):
            return factory(base, **options)
    known = ", ".join(sorted({t.__name__ for t, _ in factories}))
    raise ValueError(
        f"no observation formatter for environment {type(base).__name__!r}; expected one of "
        f"{known} (write one with agents.formatters.register_formatter)"
    )


# --------------------------------------------------------------------------- parsers
class ActionParseError(ValueError):
    """A reply that holds no legal action; the message says what was wrong."""


class ActionParser(BaseModel):
    """Reads an action from an LLM reply (text or structured JSON); subclasses implement."""

    model_config = ConfigDict(extra="forbid")

    def action_format(self, legal_moves: Sequence[int]) -> str:
        """The instruction appended to a text-mode prompt."""
        raise NotImplementedError

    def parse(self, text: str, legal_moves: Sequence[int]) -> int:
        """The action in a text reply; :class:`ActionParseError` saying why when none."""
        raise NotImplementedError

    def schema(self, legal_moves: Sequence[int]) -> dict[str, Any]:
        """JSON schema of a structured reply holding only legal actions."""
        raise NotImplementedError

    def parse_json(self, text: str, legal_moves: Sequence[int]) -> int:
        """The action in a structured reply; :class:`ActionParseError` when none."""
        raise NotImplementedError


_ACTION_LINE = re.compile(
    r"^[\s*_`>#-]*action[\s*_`]*[:=][\s*_`\"']*([+-]?\d+)(?!\d|\.\d)", re.IGNORECASE | re.MULTILINE
)


class DiscreteActionParser(ActionParser):
    """``Action: N`` (text) or ``{"action": N}`` (structured) for a ``Discrete(n)`` space.

    Text replies: the last line that starts with ``Action:`` (any case, spaces and
    markdown emphasis around it allowed) gives ``N``; it must be one of the legal moves.
    """

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
        return {
            "type": "object",
            "properties": {"action": {"type": "integer", "enum": [int(m) for m in legal_moves]}},
            "required": ["action"],
            "additionalProperties": False,
        }

    def parse_json(self, text: str, legal_moves: Sequence[int]) -> int:
        try:
            value = json.loads(text)["action"]
        except (TypeError, ValueError, KeyError):
            raise ActionParseError(
                f"the reply {_clip(text)!r} is not a JSON object with an integer 'action'"
            ) from None
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
