"""Checking a reply against a JSON schema (the subset structured output uses).

Supported keywords: ``type`` (one or a list), ``enum``, ``const``, ``properties``,
``required``, ``additionalProperties`` (bool or schema), ``items``, ``minItems``,
``maxItems``, ``minLength``, ``maxLength``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``, ``anyOf``, ``oneOf``, ``allOf``, local ``$ref`` (``#/$defs/...``,
``#/definitions/...``). Other keywords are not checked.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["schema_errors", "check_schema"]

_TYPES: dict[str, Any] = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
}


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` as a JSON-serialisable dict, else ValueError."""
    if not isinstance(schema, dict):
        raise ValueError(f"schema={schema!r}: expected a JSON-schema dict")
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as error:
        raise ValueError(f"schema={schema!r} is not JSON-serialisable: {error}") from None
    return schema


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is not None and isinstance(value, expected) and not (
        expected is not bool and isinstance(value, bool))


def schema_errors(value: Any, schema: Any, root: Any = None, where: str = "$") -> list[str]:
    """Where ``value`` breaks ``schema`` (an empty list when it fits)."""
    root = schema if root is None else root
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{where}: no value is allowed here"]
    if "$ref" in schema:
        target: Any = root
        for part in str(schema["$ref"]).lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return schema_errors(value, target, root, where)
    errors: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is(value, k) for k in kinds):
            return [f"{where}: {value!r} is not of type {'/'.join(kinds)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{where}: missing property {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                errors += schema_errors(item, props[name], root, f"{where}.{name}")
            elif extra is False:
                errors.append(f"{where}: unexpected property {name!r}")
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, root, f"{where}.{name}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: more than {schema['maxItems']} items")
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                errors += schema_errors(item, schema["items"], root, f"{where}[{i}]")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: longer than {schema['maxLength']} characters")
    if _is(value, "number"):
        for word, bad in (("minimum", value < schema.get("minimum", value)),
                          ("maximum", value > schema.get("maximum", value)),
                          ("exclusiveMinimum", "exclusiveMinimum" in schema
                           and value <= schema["exclusiveMinimum"]),
                          ("exclusiveMaximum", "exclusiveMaximum" in schema
                           and value >= schema["exclusiveMaximum"])):
            if bad:
                errors.append(f"{where}: {value!r} breaks {word}={schema[word]!r}")
    for sub in schema.get("allOf", []):
        errors += schema_errors(value, sub, root, where)
    for word in ("anyOf", "oneOf"):
        if word in schema and not any(not schema_errors(value, s, root, where)
                                      for s in schema[word]):
            errors.append(f"{where}: {value!r} matches none of {word}")
    return errors
