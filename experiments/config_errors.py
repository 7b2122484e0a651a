"""The errors of an experiment file: :class:`ConfigError` and the message that names the
file, the key path, what was expected and the value found."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .env_ids import suggest


class ConfigError(ValueError):
    """An experiment file that cannot be used; the message names the file and the key."""


_STRICT_TYPES = {
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
}

_BOUNDS = ("less_than_equal", "less_than", "greater_than_equal", "greater_than")


def shown(value: Any) -> str:
    """A value as the YAML file spells it (``true``, ``"3"``, ``2.5``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the model at ``loc`` inside ``model`` accepts ([] where none is a model)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = _model_in(fields[part].annotation)
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields else []


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside ``annotation`` (``list[M]``, ``M | None``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def format_validation_error(
    path: Path | str, error: ValidationError, model: type[BaseModel], loc_prefix: str = ""
) -> str:
    lines = [f"{path}: invalid experiment file"]
    for item in error.errors():
        where = (loc_prefix + ".".join(str(part) for part in item["loc"])).rstrip(".") \
            or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            known = _keys_at(model, tuple(item["loc"][:-1]))
            message = "unknown key" + suggest(str(item["loc"][-1]), known)
        elif item["type"] == "value_error":
            message = str(item.get("ctx", {}).get("error", message))
        elif item["type"] == "literal_error":
            message = f"got {item.get('input')!r}; {message.lower()}"
        elif item["type"] in _STRICT_TYPES:
            message = f"{_STRICT_TYPES[item['type']]}, got {shown(item.get('input'))}"
        elif item["type"] in _BOUNDS:
            message = f"{message}, got {shown(item.get('input'))}"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


