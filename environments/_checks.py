"""Argument checks shared by the environments (clear `ValueError`s for bad input)."""

from __future__ import annotations

import math
import operator
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from ..errors import checked  # noqa: F401  (the environments' one decorator)

RENDER_MODES: tuple[str, ...] = ("rgb_array", "ansi")
RenderMode = Literal["rgb_array", "ansi"] | None


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


MAX_STEP_LIMIT = 1_000_000  # the longest episode a step limit allows (shipped: 500 at most)

#: Offset added to the training seed to seed evaluation episodes during training (so they
#: differ from the training episodes' initial states but are the same at every evaluation
#: round); the experiment files' held-out seeds are checked against it.
EVAL_SEED_OFFSET = 100_000


def _number(value: Any) -> Any:
    """``value`` unless it is a bool or text (which pydantic's lax mode would turn into one)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise PydanticCustomError("number_type", "expected a number, got {kind}",
                                  {"kind": type(value).__name__})
    return value


def _flag(value: Any) -> bool:
    """``value`` as a bool when it is one (Python's or numpy's), else ValueError."""
    if not isinstance(value, (bool, np.bool_)):
        raise PydanticCustomError("flag_type", "expected true or false, got {kind}",
                                  {"kind": type(value).__name__})
    return bool(value)


#: True or false (a numpy bool too; no 1, 0 or text).
Flag = Annotated[bool, BeforeValidator(_flag)]
#: A number given as one (not a bool or text), for `Annotated` arguments.
NUMBER = BeforeValidator(_number)
#: A step limit: an int from 1 to `MAX_STEP_LIMIT`.
StepLimit = Annotated[int, NUMBER, Field(ge=1, le=MAX_STEP_LIMIT)]
#: A finite number (not a bool).
Finite = Annotated[float, NUMBER, Field(allow_inf_nan=False)]


def check_finite(name: str, value: Any) -> float:
    """Return `value` as a finite float or raise `ValueError` (a reset option's check)."""
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
