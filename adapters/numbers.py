"""``numbers: W``: the numbers of a description carried beside the vector of its number-free
text (docs/adapters.md, "Numbers kept"). A frozen sentence encoder blurs numbers ("1 step
right" and "3 steps left" are nearly one vector); here each unit of text (a sentence, or the
whole description) becomes its text with every number replaced by ``#`` (encoded once, shared
by every state that differs only in its numbers) and up to ``W`` values, in order, zero-padded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["PLACEHOLDER", "numbered_vectors", "split_numbers"]

#: What stands for a number in the text that is encoded.
PLACEHOLDER = "#"

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_WORD_VALUES = {word: float(value) for value, word in enumerate(_ONES)}
_WORD_VALUES |= {word: 20.0 + 10 * index for index, word in enumerate(_TENS)}
_TENS_PATTERN = "|".join(_TENS)
_ONES_PATTERN = "|".join(sorted(_ONES, key=len, reverse=True))
#: A number in digits (sign, decimals, exponent) or in words from zero to ninety-nine.
NUMBER = re.compile(
    r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w]|\.\d)"
    rf"|\b(?:(?:{_TENS_PATTERN})(?:-(?:{_ONES_PATTERN}))?|{_ONES_PATTERN})\b",
    re.IGNORECASE)


def _value(token: str) -> float:
    word = token.lower()
    if word in _WORD_VALUES:
        return _WORD_VALUES[word]
    if "-" in word and word[0].isalpha():  # "forty-two"
        tens, ones = word.split("-")
        return _WORD_VALUES[tens] + _WORD_VALUES[ones]
    return float(token)


def split_numbers(text: str) -> tuple[str, list[float]]:
    """``(text with each number replaced by '#', the numbers in order)``."""
    values: list[float] = []

    def take(match: re.Match[str]) -> str:
        values.append(_value(match.group(0)))
        return PLACEHOLDER

    return NUMBER.sub(take, text), values


def numbered_vectors(units: Sequence[str], lookup: Callable[[list[str]], list[np.ndarray]],
                     width: int, source: str) -> list[np.ndarray]:
    """Each unit as ``[vector of its number-free text, its numbers (width, zero-padded)]``
    (one ``lookup`` of the distinct number-free texts); ValueError naming the unit when it
    holds more than ``width`` numbers (never a silent cut)."""
    split = [split_numbers(unit) for unit in units]
    for unit, (_, values) in zip(units, split, strict=True):
        if len(values) > width:
            raise ValueError(f"numbers: {width} keeps {width} numbers per unit; the describer "
                             f"{source} wrote {len(values)} in {unit[:120]!r}: raise numbers")
    distinct = list(dict.fromkeys(template for template, _ in split))
    found = dict(zip(distinct, lookup(distinct), strict=True))
    out = []
    for template, values in split:
        dimension = len(found[template])
        vector = np.zeros(dimension + width, dtype=np.float32)
        vector[:dimension] = found[template]
        vector[dimension: dimension + len(values)] = values
        out.append(vector)
    return out
