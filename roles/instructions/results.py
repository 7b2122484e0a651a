"""How well a trained agent follows the instruction (:func:`follow_rate`) and a picture of the
matches (:func:`match_picture`). See docs/instructions.md."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...environments.rendering import canvas, fill_disk, fill_rect, write_png
from .search import wrapper_of
from .spec import Count, checked_arguments
from .wrapper import InstructionFollowing

__all__ = ["SUBGOAL_COLOURS", "follow_rate", "match_picture", "match_scores"]

#: Fill colour of sub-goal 1, 2, ... (cycled).
SUBGOAL_COLOURS = ((66, 133, 244), (244, 160, 0), (171, 71, 188), (0, 172, 193),
                   (124, 179, 66), (239, 83, 80))


def match_scores(matched_cells: set[tuple[int, int]], truth: set[tuple[int, int]]
                 ) -> dict[str, float]:
    """Precision and recall of matched cells against true cells, and ``hit`` (any overlap)."""
    overlap = len(matched_cells & truth)
    return {"precision": overlap / len(matched_cells) if matched_cells else 0.0,
            "recall": overlap / len(truth) if truth else 0.0,
            "hit": float(overlap > 0)}


@checked_arguments
def follow_rate(agent: Any, env: Any, episodes: Count = 10, seed: int = 0,
                truth: Sequence[Sequence[Sequence[int]]] | None = None) -> dict[str, float]:
    """Greedy episodes of ``agent`` on ``env`` (an :class:`InstructionFollowing`
    environment): ``rate`` (chain done by matched states), ``truth_rate`` (true cells of every
    sub-goal visited in order; with ``truth``, mazes), ``env_success`` and ``mean_length``."""
    wrapper = wrapper_of(env, InstructionFollowing)
    if wrapper is None:
        raise ValueError("follow_rate needs an InstructionFollowing environment (plan.wrap(env))")
    targets = None if truth is None else [{(int(r), int(c)) for r, c in cells}
                                          for cells in truth]
    if targets is not None and len(targets) != len(wrapper.chain):
        raise ValueError(f"truth has {len(targets)} cell sets for a chain of "
                         f"{len(wrapper.chain)}")
    base = wrapper.unwrapped
    if hasattr(agent, "bind"):
        agent.bind(env)
    done = truth_done = success = 0
    lengths = []
    for n in range(episodes):
        obs, info = env.reset(seed=seed if n == 0 else None)
        k = 0

        def advance(k: int) -> int:
            while targets is not None and k < len(targets) and tuple(base.cell) in targets[k]:
                k += 1
            return k

        k = advance(k)
        length = 0
        while True:
            action = agent.act(agent.observe(obs, info), info.get("legal_moves"), False)
            obs, _, terminated, truncated, info = env.step(action)
            length += 1
            k = advance(k)
            if terminated or truncated:
                break
        done += bool(info.get("instruction_done"))
        truth_done += targets is not None and k == len(targets)
        success += bool(info.get("env_success", info.get("is_success", False)))
        lengths.append(length)
    out = {"episodes": episodes, "rate": done / episodes, "env_success": success / episodes,
           "mean_length": float(np.mean(lengths))}
    if targets is not None:
        out["truth_rate"] = truth_done / episodes
    return out


def match_picture(maze: Any, matched: Sequence[set[tuple[int, int]]],
                  truth: Sequence[set[tuple[int, int]]] | None = None,
                  path: str | Path | None = None, cell_pixels: int = 32) -> np.ndarray:
    """The maze with each sub-goal's matched cells filled in its colour (numbered by dots) and its
    true cells framed; the RGB array, also written as a PNG when ``path`` is given."""
    size = int(cell_pixels)
    grid = np.asarray(maze.grid)
    height, width = grid.shape
    image = canvas(height * size, width * size, (250, 250, 250))
    for r in range(height):
        for c in range(width):
            colour = (60, 60, 70) if grid[r, c] else (235, 235, 235)
            fill_rect(image, r * size, c * size, (r + 1) * size, (c + 1) * size, colour)
    gr, gc = maze.goal
    fill_rect(image, gr * size, gc * size, (gr + 1) * size, (gc + 1) * size, (70, 180, 80))
    fill_rect(image, gr * size + 3, gc * size + 3, (gr + 1) * size - 3, (gc + 1) * size - 3,
              (235, 235, 235))
    for n, cells in enumerate(truth or []):
        colour = SUBGOAL_COLOURS[n % len(SUBGOAL_COLOURS)]
        for r, c in cells:
            fill_rect(image, r * size + 1, c * size + 1, (r + 1) * size - 1, (c + 1) * size - 1,
                      colour)
            fill_rect(image, r * size + 4, c * size + 4, (r + 1) * size - 4, (c + 1) * size - 4,
                      (235, 235, 235))
    owners: dict[tuple[int, int], list[int]] = {}
    for n, cells in enumerate(matched):
        for cell in cells:
            owners.setdefault((int(cell[0]), int(cell[1])), []).append(n)
    inner = size - 12
    for (r, c), subgoals in owners.items():  # a cell matched by several: one stripe each
        width = inner / len(subgoals)
        for s, n in enumerate(subgoals):
            left = c * size + 6 + s * width
            fill_rect(image, r * size + 6, left, (r + 1) * size - 6, left + width,
                      SUBGOAL_COLOURS[n % len(SUBGOAL_COLOURS)])
            for dot in range(n + 1):  # sub-goal n + 1 has n + 1 white dots
                fill_disk(image, r * size + 9 + 3 * (dot // 3), left + 3 + 3 * (dot % 3), 1.1,
                          (255, 255, 255))
    if path is not None:
        write_png(path, image)
    return image
