"""The value types and the base model of the experiment file's blocks (:mod:`.schema`):
numbers and booleans that must be written as such, labels that name run folders, unknown
keys refused."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

Int = Annotated[int, Strict()]
"""An integer that must be written as one: ``true``, ``2.5`` or ``"3"`` are errors, not 1, 2
or 3 (pydantic's lax mode would coerce them silently)."""
Float = Annotated[float, Strict()]
"""A number (an integer is fine); ``true`` or ``"0.5"`` are errors."""
Bool = Annotated[bool, Strict()]
"""``true`` or ``false``; ``1``, ``"yes"`` are errors."""

Label = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.+-]*(_[A-Za-z0-9.+-]+)*$",
        description="letters, digits and _ . + - (no '__'): it names the run folders",
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
