"""The shipped instruction set with ground truth (``roles/data/maze_instructions.yaml``):
:func:`load_instruction_set`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ...environments.maze import MAZE_LAYOUTS
from .spec import check_instruction
from .truth import truth_cells

__all__ = ["InstructionItem", "SubGoalTruth", "load_instruction_set", "shipped_set_path"]

Cell = tuple[int, int]


@dataclass(frozen=True)
class SubGoalTruth:
    """One sub-goal: its text, its ground-truth rule and the cells written by hand."""

    text: str
    rule: dict[str, Any]
    cells: tuple[Cell, ...]

    def derived(self, maze: str) -> list[Cell]:
        """The cells the rule gives on the named layout."""
        layout = MAZE_LAYOUTS[maze]
        return truth_cells(self.rule, layout.grid(), layout.start, layout.goal)


@dataclass(frozen=True)
class InstructionItem:
    """One entry of an instruction set (docs/instructions.md)."""

    id: str
    maze: str
    style: str
    steps: tuple[SubGoalTruth, ...]
    task: str | None = None

    @property
    def chain(self) -> tuple[str, ...]:
        return tuple(step.text for step in self.steps)

    @property
    def truth(self) -> list[set[Cell]]:
        """The cells of each step (the hand-written ones)."""
        return [set(step.cells) for step in self.steps]


def shipped_set_path() -> Path:
    """The path of the shipped maze instruction set."""
    return Path(str(resources.files("langadapt.roles") / "data" / "maze_instructions.yaml"))


def _cells(value: Any, where: str) -> tuple[Cell, ...]:
    try:
        cells = tuple((int(r), int(c)) for r, c in value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: cells {value!r}: expected a list of [row, col]") from None
    if not cells:
        raise ValueError(f"{where}: cells is empty; expected at least one [row, col]")
    return cells


def load_instruction_set(path: str | Path | None = None,
                         mazes: tuple[str, ...] | None = None) -> list[InstructionItem]:
    """The entries of an instruction-set YAML file (default: the shipped one, read once per
    process), optionally only those on the named ``mazes``. ValueError naming the entry for a
    malformed one."""
    items = _read_set(Path(path) if path is not None else shipped_set_path())
    return [item for item in items if mazes is None or item.maze in mazes]


@functools.lru_cache(maxsize=8)
def _read_set(source: Path) -> tuple[InstructionItem, ...]:
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{source}: expected a list of instruction entries")
    items, seen = [], set()
    for n, entry in enumerate(data):
        where = f"{source.name} entry {n} ({entry.get('id') if isinstance(entry, dict) else '?'})"
        if not isinstance(entry, dict) or not isinstance(entry.get("steps"), list):
            raise ValueError(f"{where}: expected a mapping with id, maze, steps")
        if entry.get("maze") not in MAZE_LAYOUTS:
            raise ValueError(f"{where}: maze {entry.get('maze')!r}; expected one of "
                             f"{list(MAZE_LAYOUTS)}")
        if entry.get("id") in seen:
            raise ValueError(f"{where}: the id is used twice")
        seen.add(entry.get("id"))
        steps = []
        for k, step in enumerate(entry["steps"]):
            if not isinstance(step, dict):
                raise ValueError(f"{where}: step {k} is not a mapping of text, truth, cells")
            steps.append(SubGoalTruth(check_instruction(step.get("text"), f"{where} step {k}"),
                                      dict(step.get("truth") or {"rule": "cells",
                                                                 "cells": step.get("cells")}),
                                      _cells(step.get("cells"), f"{where} step {k}")))
        if not steps:
            raise ValueError(f"{where}: steps is empty")
        items.append(InstructionItem(str(entry["id"]), entry["maze"],
                                     str(entry.get("style", "place")), tuple(steps),
                                     entry.get("task")))
    return tuple(items)
