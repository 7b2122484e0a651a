"""An SB3 algorithm's constructor keywords checked by type when an experiment file is read:
YAML values only (a string is never resolved to a class), integers bounded, numbers finite.
See docs/configuration.md."""

from __future__ import annotations

import functools
import inspect
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import ConfigDict, Field, PydanticUserError, Strict, TypeAdapter, ValidationError

MAX_INT = 1_000_000_000
"""Largest integer keyword (the largest training budget)."""
MAX_SIZE = 10_000_000
"""Largest buffer, rollout or batch size: 10 million transitions of a 384-float state are
already 30 GB."""
SIZES = frozenset({"buffer_size", "n_steps", "batch_size", "n_epochs", "gradient_steps",
                   "stats_window_size"})
POLICY_SET_HERE = ("observation_space", "action_space", "lr_schedule")
"""Policy constructor arguments the algorithm passes itself."""
MAX_WIDTH = 65_536
"""Widest layer of ``policy_kwargs.net_arch`` (the bound of DQN's ``hidden_sizes``)."""
MAX_WEIGHTS = 100_000_000
"""Most weights between the layers of one network of ``net_arch`` (400 MB of float32): layers
each within bounds can still make a network no machine holds."""
_STRICT = ConfigDict(strict=True, allow_inf_nan=False, arbitrary_types_allowed=True)


def check_keyword_values(algorithm: type, policy: str, keywords: dict[str, Any]) -> None:
    """ValueError naming the first keyword (or ``policy_kwargs`` key) whose value the
    constructor of ``algorithm`` (or of its ``policy``) cannot take from a file."""
    _check(inspect.signature(algorithm).parameters, keywords, "")
    policy_class = getattr(algorithm, "policy_aliases", {}).get(policy)
    if policy_class is None:
        raise ValueError(f"policy={policy!r}: expected one of SB3's "
                         f"{', '.join(getattr(algorithm, 'policy_aliases', {}))} for "
                         f"{algorithm.__name__}")
    policy_kwargs = keywords.get("policy_kwargs") or {}
    parameters = {name: p for name, p in inspect.signature(policy_class).parameters.items()
                  if name not in POLICY_SET_HERE}
    unknown = sorted(set(policy_kwargs) - set(parameters))
    if unknown:
        raise ValueError(f"policy_kwargs.{unknown[0]}: not a parameter of {policy_class.__name__} "
                         f"(expected one of {', '.join(parameters)})")
    _check(parameters, policy_kwargs, "policy_kwargs.")
    _check_net_arch(policy_kwargs.get("net_arch"))


def _check_net_arch(value: list[int] | dict[str, list[int]] | None) -> None:
    """ValueError naming a network of ``net_arch`` (checked by type) past the bounds."""
    networks = value.items() if isinstance(value, dict) else [("", value or [])]
    for key, widths in networks:
        where = f"policy_kwargs.net_arch{'.' if key else ''}{key}={widths!r}"
        if any(not 1 <= width <= MAX_WIDTH for width in widths):
            raise ValueError(f"{where}: expected layer widths from 1 to {MAX_WIDTH:,}")
        weights = sum(a * b for a, b in zip(widths, widths[1:], strict=False))
        if weights > MAX_WEIGHTS:
            raise ValueError(f"{where}: {weights:,} weights between its layers; expected at "
                             f"most {MAX_WEIGHTS:,}")


def _check(parameters: Any, values: dict[str, Any], prefix: str) -> None:
    for name, value in values.items():
        annotation = parameters[name].annotation
        if annotation is inspect.Parameter.empty or _fits(value, annotation, name):
            continue
        expected = _describe(annotation, name)
        unwritable = [a for a in get_args(annotation) or [annotation] if not _describe(a, name)]
        hint = ("expected " + expected if expected else "") + (
            f"{' (' if expected else ''}a class, module or function cannot be written in an "
            f"experiment file{')' if expected else '; leave it out (SB3 default)'}"
            if unwritable else "")
        raise ValueError(f"{prefix}{name}={value!r}: {hint}")


def _fits(value: Any, annotation: Any, name: str) -> bool:
    """Whether ``value`` (as YAML loads it) is a value of ``annotation``, by pydantic in strict
    mode (a string is never an int, a float or a class); a type no file can hold (a callable,
    a class, a torch device) takes nothing, as does a type pydantic cannot check."""
    try:
        _adapter(annotation, MAX_SIZE if name in SIZES else MAX_INT).validate_python(value)
    except (ValidationError, PydanticUserError):
        return False
    return True


@functools.cache
def _adapter(annotation: Any, most: int) -> TypeAdapter[Any]:
    return TypeAdapter(_from_file(annotation, most), config=_STRICT)


def _from_file(annotation: Any, most: int) -> Any:
    """``annotation`` with its ints bounded and its tuples taking YAML lists."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is int:
        return Annotated[int, Field(ge=-1, le=most)]
    if origin in (Union, types.UnionType):
        return Union[tuple(_from_file(arg, most) for arg in args)]  # noqa: UP007
    if origin in (list, tuple, dict):
        items = tuple(arg if arg is ... else _from_file(arg, most) for arg in args)
        return Annotated[origin[items], Strict(False)] if origin is tuple else origin[items]
    return annotation


def _describe(annotation: Any, name: str) -> str:
    """What a file may give for ``annotation`` ("" when nothing)."""
    origin, args = get_origin(annotation), get_args(annotation)
    most = MAX_SIZE if name in SIZES else MAX_INT
    plain = {bool: "true or false", int: f"an integer from -1 to {most:,}",
             float: "a finite number", str: "a string", type(None): "null", Any: "any value"}
    if annotation in plain:
        return plain[annotation]
    if origin in (Union, types.UnionType):
        return " or ".join(part for part in (_describe(a, name) for a in args) if part)
    if origin is Literal:
        return " or ".join(map(repr, args))
    if origin in (list, tuple, dict) and all(_describe(a, name) for a in args if a is not ...):
        return f"a {'mapping' if origin is dict else 'list'} " + str(annotation).replace(
            "typing.", "")
    return ""
