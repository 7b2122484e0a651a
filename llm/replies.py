"""The checks of what goes to an LLM and what comes back: messages, candidate replies,
a reply's text (size, non-empty, JSON that fits the schema) and a scoring call's numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import LLMReplyError, StructuredOutputError
from .schema import MAX_JSON_DEPTH, parse_json_reply, quote_reply, schema_errors

__all__ = ["check_messages", "check_replies", "check_reply", "check_scores"]

_ROLES = ("system", "user", "assistant")


def check_messages(messages: Any) -> list[dict[str, str]]:
    """``messages`` as a list of ``{"role", "content"}`` dicts, else ValueError."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages={messages!r}: expected a list of {{'role', 'content'}} dicts")
    out = []
    for message in messages:
        if (not isinstance(message, Mapping) or message.get("role") not in _ROLES
                or not isinstance(message.get("content"), str)):
            raise ValueError(
                f"message {message!r}: expected {{'role': one of {_ROLES}, 'content': str}}"
            )
        out.append({"role": message["role"], "content": message["content"]})
    if not out:
        raise ValueError("messages=[]: expected at least one message")
    return out


def check_replies(replies: Any) -> list[str]:
    """``replies`` as a non-empty list of non-empty strings, else ValueError."""
    if isinstance(replies, (str, bytes, Mapping)) or not isinstance(replies, Sequence):
        raise ValueError(f"replies={replies!r}: expected a list of candidate reply strings")
    out = list(replies)
    if not out or any(not isinstance(r, str) or not r for r in out):
        raise ValueError(f"replies={replies!r}: expected a non-empty list of non-empty strings")
    return out


def check_reply(text: Any, schema: dict | None, n: int, where: str, max_reply_chars: int,
                hint: str) -> str:
    """``text`` as a reply: a string of at most ``max_reply_chars``, not empty, and with
    ``schema`` JSON valid against it (``n``: the call's max_tokens, ``hint``: how to get
    schema-true replies from the backend), else `LLMReplyError` / `StructuredOutputError`."""
    if not isinstance(text, str):
        raise LLMReplyError(f"{where} returned {type(text).__name__} "
                            f"{quote_reply(text)}; expected text")
    if len(text) > max_reply_chars:
        raise LLMReplyError(
            f"{where} returned {len(text):,} characters, more than "
            f"max_reply_chars={max_reply_chars:,}: {quote_reply(text)}")
    if not text.strip():
        raise LLMReplyError(f"{where} returned an empty answer")
    if schema is None:
        return text.strip()
    try:
        value = parse_json_reply(text, max_chars=max_reply_chars,
                                 max_depth=MAX_JSON_DEPTH, source=where)
    except StructuredOutputError as error:
        cause = error.__cause__
        if not isinstance(cause, ValueError) or not hasattr(cause, "pos"):
            raise
        cut = cause.pos >= len(text.rstrip()) - 1
        fix = (f"the reply was cut at max_tokens={n}; raise max_tokens or bound the schema "
               "(maxLength, maxItems)") if cut else hint
        raise StructuredOutputError(
            f"{where} did not return JSON for the schema ({cause.msg} at "
            f"character {cause.pos} of {quote_reply(text)}); {fix}"
        ) from None
    problems = schema_errors(value, schema)
    if problems:
        raise StructuredOutputError(
            f"{where} returned JSON that breaks the schema: {'; '.join(problems[:3])}"
            f"; {hint}"
        )
    return text


def check_scores(result: Any, replies: list[str], where: str) -> list[float]:
    """``result`` as one finite-or--inf float per reply, else `LLMReplyError`."""
    try:
        scores = [float(v) for v in result]
    except (TypeError, ValueError):
        scores = None
    if scores is None or len(scores) != len(replies):
        raise LLMReplyError(f"{where} returned {quote_reply(result)} as the scores "
                            f"of {len(replies)} replies; expected {len(replies)} numbers")
    bad = [r for r, v in zip(replies, scores, strict=True) if math.isnan(v) or v == math.inf]
    if bad:
        raise LLMReplyError(f"{where} returned NaN or +inf log-probabilities for "
                            f"{quote_reply(bad)}: the model's output is broken")
    if all(v == -math.inf for v in scores):
        raise LLMReplyError(f"{where} gave every one of the {len(replies)} replies "
                            "log-probability -inf: no choice can be made from them")
    return scores
