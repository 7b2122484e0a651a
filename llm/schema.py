"""Parsing a JSON reply within bounds, and checking it against a JSON schema (the subset
structured output uses).

`parse_json_reply(text)` is the one way the LLM layer (and the roles) turn a reply into a
JSON value: a reply longer than `MAX_REPLY_CHARS` characters or nested deeper than
`MAX_JSON_DEPTH` arrays/objects is refused (`StructuredOutputError`) before ``json.loads``
sees it, so a reply of 5,000 nested ``[`` is one error, not a RecursionError. Error
messages quote at most `QUOTE_CHARS` characters of a reply (`quote_reply`).

Supported keywords: ``type`` (one or a list), ``enum``, ``const``, ``properties``,
``required``, ``additionalProperties`` (bool or schema), ``items``, ``minItems``,
``maxItems``, ``minLength``, ``maxLength``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``, ``anyOf``, ``oneOf``, ``allOf``, local ``$ref`` (``#/$defs/...``,
``#/definitions/...``). Other keywords are not checked.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from .errors import StructuredOutputError

__all__ = ["MAX_CANDIDATES", "MAX_JSON_DEPTH", "MAX_REPLY_CHARS", "QUOTE_CHARS", "check_schema",
           "enumerate_replies", "finite_values", "json_depth", "parse_json_reply",
           "quote_reply", "reply_text", "schema_errors"]

#: Longest reply (characters) the LLM layer accepts; the backends' default ``max_reply_chars``.
MAX_REPLY_CHARS = 1_000_000
#: Deepest nesting of arrays and objects `parse_json_reply` accepts.
MAX_JSON_DEPTH = 64
#: Most characters of a reply an error message quotes.
QUOTE_CHARS = 200
#: Most candidate values `enumerate_replies` lists (more: None, generate instead).
MAX_CANDIDATES = 256

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


def quote_reply(text: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of (the start of) a reply for messages: at most ``limit`` characters of it,
    with the total length when it was cut."""
    if not isinstance(text, str):
        text = repr(text)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def json_depth(text: str, stop: int | None = None) -> int:
    """How deeply arrays and objects nest in the JSON text ``text`` (brackets inside strings
    do not count); stops counting once ``stop`` is passed. No recursion: any length is safe."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop is not None and deepest > stop:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def parse_json_reply(text: Any, *, max_chars: int = MAX_REPLY_CHARS,
                     max_depth: int = MAX_JSON_DEPTH, source: str = "the LLM") -> Any:
    """The JSON value of a reply, else `StructuredOutputError` (an `LLMReplyError`) naming
    ``source`` and quoting at most `QUOTE_CHARS` characters of it (for text that is not JSON
    its ``__cause__`` is the `json.JSONDecodeError`).

    Refused before parsing: a non-string, a reply over ``max_chars`` characters, arrays or
    objects nested deeper than ``max_depth`` (``json.loads`` would recurse once per level).
    Numbers too long for Python's int conversion are refused too.
    """
    if not isinstance(text, str):
        raise StructuredOutputError(
            f"{source} returned {type(text).__name__} {quote_reply(text)}; expected JSON text")
    if len(text) > max_chars:
        raise StructuredOutputError(
            f"{source} returned {len(text):,} characters, more than the limit of "
            f"{max_chars:,} for a JSON reply: {quote_reply(text)}")
    brackets = text.count("[") + text.count("{")  # fewer than max_depth: no need to scan
    if brackets > max_depth and json_depth(text, stop=max_depth) > max_depth:
        raise StructuredOutputError(
            f"{source} returned JSON nested more than {max_depth} levels deep (arrays/objects "
            f"in arrays/objects); refused unparsed: {quote_reply(text)}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:  # the cause tells where the text stopped being JSON
        raise StructuredOutputError(
            f"{source} did not return JSON ({error.msg} at character {error.pos} of "
            f"{quote_reply(text)})") from error
    except (ValueError, RecursionError) as error:  # e.g. an integer of 5,000 digits
        raise StructuredOutputError(
            f"{source} returned JSON that cannot be read ({str(error)[:QUOTE_CHARS]}): "
            f"{quote_reply(text)}") from None


def _brief(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


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
            return [f"{where}: {_brief(value)} is not of type {'/'.join(kinds)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {_brief(value)} is not one of {_brief(schema['enum'])}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {_brief(value)} is not {_brief(schema['const'])}")
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
                errors.append(f"{where}: unexpected property {_brief(name)}")
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
                errors.append(f"{where}: {_brief(value)} breaks {word}={schema[word]!r}")
    for sub in schema.get("allOf", []):
        errors += schema_errors(value, sub, root, where)
    for word in ("anyOf", "oneOf"):
        if word in schema and not any(not schema_errors(value, s, root, where)
                                      for s in schema[word]):
            errors.append(f"{where}: {_brief(value)} matches none of {word}")
    return errors


# ---- schemas whose values can be listed ---------------------------------------------------
def finite_values(schema: Any, limit: int = MAX_CANDIDATES) -> list[Any] | None:
    """Every value valid against ``schema`` when they form a finite set of at most ``limit``,
    in schema order, else None: ``const``, ``enum``, ``boolean`` (false, true), ``null``, and
    objects whose properties are all such fields, all required, with no other properties
    (``additionalProperties`` absent or false)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values or len(values) > limit:
            return None
        return [v for v in values if not schema_errors(v, {k: w for k, w in schema.items()
                                                           if k != "enum"})] or None
    kind = schema.get("type")
    if kind == "boolean":
        return [False, True]
    if kind == "null":
        return [None]
    properties = schema.get("properties")
    if kind != "object" or not isinstance(properties, dict) or not properties:
        return None
    if set(schema.get("required", ())) != set(properties):
        return None
    if schema.get("additionalProperties", False) is not False:
        return None
    choices = []
    total = 1
    for name, sub in properties.items():
        values = finite_values(sub, limit)
        if values is None:
            return None
        total *= len(values)
        if total > limit:
            return None
        choices.append([(name, v) for v in values])
    return [dict(combo) for combo in itertools.product(*choices)]


def reply_text(value: Any) -> str:
    """The canonical text of a JSON value as a reply: what llama.cpp's grammar-constrained
    generation of SmolLM2 writes for it — objects as ``{ "a": value, "b": value}`` (keys
    sorted, as `langadapt.llm.llamacpp.grammar_for` orders them; a space after ``{``, ``:``
    and ``,``, none before ``}``), scalars and arrays as `json.dumps` writes them. E.g.
    ``{"action": 3}`` -> ``'{ "action": 3}'``."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))}: {reply_text(value[k])}"
                                 for k in sorted(value)) + "}"
    return json.dumps(value)


def enumerate_replies(schema: Any, limit: int = MAX_CANDIDATES
                      ) -> list[tuple[Any, str]] | None:
    """``[(value, reply text), ...]`` for every value valid against ``schema`` when they can
    be listed (`finite_values`; at most ``limit``), the text being `reply_text` (the JSON a
    structured generation writes); None otherwise (free-form values: generate instead)."""
    values = finite_values(schema, limit)
    if values is None:
        return None
    return [(value, reply_text(value)) for value in values]
