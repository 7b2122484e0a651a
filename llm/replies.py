"""JSON replies: `parse_json_reply` (the one bounded parse), `schema_errors` (draft 2020-12)
and the replies a schema allows. See docs/llm.md, "Structured output".
"""

from __future__ import annotations

import functools
import itertools
import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from ..errors import one_line
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


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` as a JSON-serialisable dict, else ValueError."""
    if not isinstance(schema, dict):
        raise ValueError(f"schema={schema!r}: expected a JSON-schema dict")
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as error:
        raise ValueError(f"schema={schema!r} is not JSON-serialisable: {error}") from None
    try:
        _validator(schema)
    except SchemaError as error:
        raise ValueError(f"schema={one_line(repr(schema), 200)} is not a valid JSON schema: "
                         f"{error.json_path}: {one_line(error.message, 200)}") from None
    return schema


def quote_reply(text: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of at most ``limit`` characters of a reply (with its length when cut)."""
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
    """The JSON value of a reply, else `StructuredOutputError` naming ``source``; too long or
    too deep is refused before ``json.loads`` recurses (docs/llm.md)."""
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


def _validator(schema: Any) -> Draft202012Validator:
    """The validator of ``schema`` (built once per schema text)."""
    return _validator_of(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=256)
def _validator_of(text: str) -> Draft202012Validator:
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)  # SchemaError for one that is not a schema
    return Draft202012Validator(schema)


def schema_errors(value: Any, schema: Any) -> list[str]:
    """Where ``value`` breaks ``schema``, as ``<JSON path>: <what was expected>`` each."""
    return [f"{error.json_path}: {one_line(error.message, 200)}"
            for error in _validator(schema).iter_errors(value)]


# ---- schemas whose values can be listed ---------------------------------------------------
def finite_values(schema: Any, limit: int = MAX_CANDIDATES) -> list[Any] | None:
    """Every value valid against ``schema``, in schema order, when they are at most ``limit``
    (``const``, ``enum``, ``boolean``, ``null``, and closed objects of such fields, all
    required), else None."""
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
    """The canonical reply text of a JSON value, as llama.cpp's grammar makes SmolLM2 write
    it: ``{"action": 3}`` -> ``'{ "action": 3}'`` (keys sorted), scalars as `json.dumps`."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))}: {reply_text(value[k])}"
                                 for k in sorted(value)) + "}"
    return json.dumps(value)


def enumerate_replies(schema: Any, limit: int = MAX_CANDIDATES
                      ) -> list[tuple[Any, str]] | None:
    """``[(value, reply_text(value)), ...]`` of `finite_values`, else None (generate)."""
    values = finite_values(schema, limit)
    if values is None:
        return None
    return [(value, reply_text(value)) for value in values]
