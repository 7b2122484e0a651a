"""Argument checks shared by the environments (clear `ValueError`s for bad input)."""

from __future__ import annotations

import math
import operator
from typing import Any

from pydantic import ConfigDict, validate_call

RENDER_MODES: tuple[str, ...] = ("rgb_array", "ansi")

#: Checks a constructor's arguments against their annotations (a ValidationError naming them).
checked_arguments = validate_call(config=ConfigDict(arbitrary_types_allowed=True))


def check_action(action: Any, n_actions: int) -> int:
    """`action` (an int, numpy integer or 0-d integer array) as an int in ``[0, n_actions)``,
    else ValueError: floats and bools are refused, never truncated."""
    if type(action) is int:
        value = action
    elif isinstance(action, bool):
        raise ValueError(
            f"action {action!r} is a bool; expected an integer in [0, {n_actions - 1}]"
        )
    else:
        try:
            value = operator.index(action)
        except TypeError:
            raise ValueError(
                f"action {action!r} (type {type(action).__name__}) is not an integer; "
                f"expected an integer in [0, {n_actions - 1}]"
            ) from None
    if not 0 <= value < n_actions:
        raise ValueError(f"action {action!r} is outside the action space; expected an integer "
                         f"in [0, {n_actions - 1}]")
    return value


def check_render_mode(render_mode: str | None) -> str | None:
    """Return `render_mode` if it is None or one of `RENDER_MODES`, else raise `ValueError`."""
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(
            f"render_mode {render_mode!r} is not supported; expected None or one of {RENDER_MODES}"
        )
    return render_mode


MAX_STEP_LIMIT = 1_000_000  # the longest episode a step limit allows (shipped: 500 at most)

#: Offset added to the training seed to seed evaluation episodes during training (so they
#: differ from the training episodes' initial states but are the same at every evaluation
#: round); the experiment files' held-out seeds are checked against it.
EVAL_SEED_OFFSET = 100_000


def check_step_limit(name: str, value: Any) -> int:
    """`value` as a step limit, an int from 1 to `MAX_STEP_LIMIT`, else ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is a bool; expected a positive integer")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(
            f"{name}={value!r} is not an integer; expected a positive integer"
        ) from None
    if not 1 <= number <= MAX_STEP_LIMIT:
        raise ValueError(f"{name}={value!r} is not allowed; expected a positive integer "
                         f"(1 to {MAX_STEP_LIMIT:,})")
    return number


def check_finite(name: str, value: Any) -> float:
    """Return `value` as a finite float or raise `ValueError`."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a number; expected a finite float") from None
    if not math.isfinite(number):
        raise ValueError(f"{name}={value!r} is not finite; expected a finite float")
    return number


def episode_over_error(env_name: str) -> RuntimeError:
    """The error of `step()` before `reset()` or after the episode ended."""
    return RuntimeError(
        f"{env_name}.step() called outside an episode: call reset() first "
        "(the previous episode terminated or was truncated, or reset() was never called)"
    )


def check_reset_options(options: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    """``options`` as a dict (empty for None); ValueError for a non-mapping or unknown keys."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ValueError(
            f"reset options is {options!r}, expected a dict with any of {list(allowed)} or None"
        )
    unknown = set(options) - set(allowed)
    if unknown:
        raise ValueError(
            f"unknown reset options {sorted(unknown)}; expected any of {list(allowed)}"
        )
    return options
