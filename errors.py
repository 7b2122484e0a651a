"""One-line error messages, for every layer (it imports nothing of langadapt's):
`one_line` turns a pydantic ValidationError (or any exception, or text) into
``name=value: what was expected``; `checked` validates a public entry's arguments against
their annotations (pydantic's ``validate_call``) and raises that one line as a ValueError.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ConfigDict, ValidationError, validate_call

__all__ = ["checked", "error_lines", "one_line", "shown"]

F = TypeVar("F", bound=Callable[..., Any])

_SECRET = re.compile(r"key|token|secret|password", re.IGNORECASE)
"""Names whose values are never shown (an API key must not reach a message)."""

_UNKNOWN = ("extra_forbidden",)
_OWN_MESSAGE = ("value_error", "assertion_error", "missing", "missing_argument",
                "missing_keyword_only_argument", *_UNKNOWN)
"""Errors whose line shows no value: a validator's own message (it names the value), a
missing or unknown key (the key is the news)."""


def shown(value: Any, limit: int = 80) -> str:
    """A value as a file spells it (``true``, ``"3"``, ``2.5``; else its repr), cut past
    ``limit`` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def _expected(item: dict[str, Any]) -> str:
    if item["type"] == "value_error" and "error" in item.get("ctx", {}):
        return str(item["ctx"]["error"])
    if item["type"] in _UNKNOWN:
        return "unknown key"
    message = str(item["msg"]).removeprefix("Value error, ")
    return message[:1].lower() + message[1:]


def error_lines(error: ValidationError, prefix: str = "", names: Sequence[str] = (),
                values: bool = True, unknown: Callable[[tuple[Any, ...]], str] | None = None
                ) -> list[str]:
    """One ``name=value: what was expected`` per error of ``error``: ``name`` its key path
    after ``prefix`` (a position ``i`` named ``names[i]``: a function's parameters), the
    value left out with ``values=False``, for a secret's name and where `_OWN_MESSAGE` says
    (``name: message``; the message alone when it starts with ``name=``); ``unknown(loc)``
    adds a hint to an unknown key's line (e.g. the closest known key)."""
    lines = []
    for item in error.errors():
        loc = tuple(names[part] if isinstance(part, int) and 0 <= part < len(names)
                    and index == 0 else part for index, part in enumerate(item["loc"]))
        name = (prefix + ".".join(str(part) for part in loc)).rstrip(".")
        expected = _expected(item)
        if item["type"] in _UNKNOWN and unknown is not None:
            expected += unknown(tuple(item["loc"]))
        if not name or expected.startswith(f"{name}="):
            lines.append(expected)
        elif item["type"] in _OWN_MESSAGE:  # the validator's own message names the value
            lines.append(f"{name}: {expected}")
        elif values and not _SECRET.search(name):
            lines.append(f"{name}={shown(item.get('input'))}: {expected}")
        else:
            lines.append(f"{name}: {expected}")
    return lines


def one_line(error: BaseException | str, limit: int = 600, **how: Any) -> str:
    """``error`` on one line: a ValidationError as its `error_lines` joined by ``; `` (``how``:
    their options), another exception as its message (its type's name when it has none),
    white space folded and the middle cut past ``limit`` characters."""
    if isinstance(error, ValidationError):
        text = "; ".join(error_lines(error, **how))
    elif isinstance(error, BaseException):
        text = str(error) or type(error).__name__
    else:
        text = str(error)
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    half = limit // 2
    return f"{flat[:half]} ... {flat[-half:]} ({len(flat):,} characters)"


def checked(function: F) -> F:
    """``function`` with its arguments validated against their annotations (pydantic's
    ``validate_call``, arbitrary types allowed); a bad one is a ValueError on one line
    naming the parameter and its value."""
    validated = validate_call(config=ConfigDict(arbitrary_types_allowed=True))(function)
    names = list(inspect.signature(function).parameters)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return validated(*args, **kwargs)
        except ValidationError as error:
            raise ValueError(one_line(error, names=names)) from None

    return wrapper  # type: ignore[return-value]
