"""Ground truth for maze instructions: the cells that satisfy a place, by rule (corner,
dead_end, junction, next_to_goal, offset_from_goal, goal, start) or listed by hand
(:func:`truth_cells`). See docs/instructions.md."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

Cell = tuple[int, int]

__all__ = ["CORNERS", "RULES", "dead_ends", "junctions", "truth_cells"]

#: Corner names -> which end of (rows, cols) they are at (0: first, 1: last).
CORNERS: dict[str, tuple[int, int]] = {
    "top_left": (0, 0), "top_right": (0, 1), "bottom_left": (1, 0), "bottom_right": (1, 1),
}
RULES = ("corner", "dead_end", "junction", "next_to_goal", "offset_from_goal", "goal", "start",
         "cells")


def _free(grid: np.ndarray) -> list[Cell]:
    height, width = grid.shape
    return [(r, c) for r in range(height) for c in range(width) if grid[r, c] == 0]


def _orthogonal_free(grid: np.ndarray, cell: Cell) -> int:
    height, width = grid.shape
    r, c = cell
    return sum(1 for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0))
               if 0 <= r + dr < height and 0 <= c + dc < width and grid[r + dr, c + dc] == 0)


def dead_ends(grid: np.ndarray) -> list[Cell]:
    """Free cells with exactly one free orthogonal neighbour, row-major."""
    return [cell for cell in _free(grid) if _orthogonal_free(grid, cell) == 1]


def junctions(grid: np.ndarray) -> list[Cell]:
    """Free cells with three or more free orthogonal neighbours, row-major."""
    return [cell for cell in _free(grid) if _orthogonal_free(grid, cell) >= 3]


def _nearest(grid: np.ndarray, cells: Iterable[Cell], which: str) -> list[Cell]:
    if which not in CORNERS:
        raise ValueError(f"corner {which!r}: expected one of {sorted(CORNERS)}")
    height, width = grid.shape
    end_r, end_c = CORNERS[which]
    point = (0 if end_r == 0 else height - 1, 0 if end_c == 0 else width - 1)
    cells = list(cells)
    if not cells:
        return []
    dist = [(r - point[0]) ** 2 + (c - point[1]) ** 2 for r, c in cells]
    best = min(dist)
    return [cell for cell, d in zip(cells, dist, strict=True) if d - best < 1e-9]


def truth_cells(rule: Mapping[str, Any], grid: Any, start: Cell, goal: Cell) -> list[Cell]:
    """The cells of ``rule`` (docs/instructions.md) on a layout, row-major; ValueError for
    an unknown rule or a rule that selects no cell."""
    grid = np.asarray(grid)
    if not isinstance(rule, Mapping) or rule.get("rule") not in RULES:
        raise ValueError(f"ground-truth rule {rule!r}: expected a mapping with rule one of "
                         f"{list(RULES)}")
    kind = rule["rule"]
    goal, start = (int(goal[0]), int(goal[1])), (int(start[0]), int(start[1]))
    free = set(_free(grid))
    if kind == "corner":
        cells = _nearest(grid, sorted(free), str(rule.get("which")))
    elif kind in ("dead_end", "junction"):
        cells = dead_ends(grid) if kind == "dead_end" else junctions(grid)
        if not rule.get("include_goal", False):
            cells = [cell for cell in cells if cell != goal]
        if rule.get("near") is not None:
            cells = _nearest(grid, cells, str(rule["near"]))
    elif kind == "next_to_goal":
        cells = [(goal[0] + dr, goal[1] + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)
                 if (dr, dc) != (0, 0) and (goal[0] + dr, goal[1] + dc) in free]
    elif kind == "offset_from_goal":
        drow, dcol = (int(v) for v in rule["offset"])
        cells = [(goal[0] + drow, goal[1] + dcol)]
    elif kind == "goal":
        cells = [goal]
    elif kind == "start":
        cells = [start]
    else:
        cells = [(int(r), int(c)) for r, c in rule.get("cells", ())]
    bad = [cell for cell in cells if cell not in free]
    if not cells or bad:
        raise ValueError(f"ground-truth rule {dict(rule)!r} selects {cells} on this layout; "
                         f"expected one or more free cells (not free: {bad})")
    return sorted(set(cells))
