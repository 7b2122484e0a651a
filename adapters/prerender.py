"""Prerendering: describe and encode many inputs ahead of time (docs/adapters.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..environments.maze import bfs_distances

#: One adapter input: (state, legal_moves, episode_action_history).
AdapterInput = tuple[Any, Sequence[int], Sequence[Any]]

__all__ = ["AdapterInput", "prerender_checked", "reachable_inputs"]

_NEEDED = ("free_cells", "grid", "legal_moves_at", "observation_of", "start")


def reachable_inputs(env: Any, with_last_action: bool = False) -> list[AdapterInput]:
    """``(state, legal_moves, history)`` for every maze cell reachable from the start, in
    row-major order; ``with_last_action``: also each cell after each action (an action into
    a wall stays put, so any action can precede any cell). docs/adapters.md, "Prerender"."""
    base = getattr(env, "unwrapped", env)
    missing = [name for name in _NEEDED if not hasattr(base, name)]
    if missing:
        raise ValueError(
            f"environment {type(base).__name__} has no {missing}; reachable_inputs expected a "
            "discrete grid environment such as MazeEnv"
        )
    seen = bfs_distances(base.grid, tuple(base.start))
    n_actions = int(base.action_space.n)
    inputs: list[AdapterInput] = []
    for cell in base.free_cells():
        if cell not in seen:
            continue
        state, legal = base.observation_of(cell), base.legal_moves_at(cell)
        inputs.append((state, legal, ()))
        if with_last_action:
            inputs.extend((state, legal, (a,)) for a in range(n_actions))
    return inputs


def prerender_checked(adapter: Any, items: list[tuple[np.ndarray, tuple[int, ...], Any]],
                      progress: bool, batch_size: int) -> dict[str, int]:
    """`BaseAdapter.prerender` of checked ``items``."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}: expected a positive int")
    if len(items) > adapter.memo_capacity:
        raise ValueError(f"prerender of {len(items)} inputs exceeds memo_capacity="
                         f"{adapter.memo_capacity}; expected at most memo_capacity inputs "
                         "(raise it)")
    described = adapter.describe_checked(items, progress)
    texts = list(dict.fromkeys(text for text, _ in described))
    vectors: dict[str, np.ndarray] = {}
    batches: Any = range(0, len(texts), batch_size)
    if progress and len(texts) > batch_size:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=f"prerender {adapter.kind}", unit="batch")
    for start in batches:
        chunk = texts[start : start + batch_size]
        vectors.update(zip(chunk, adapter.text_vectors(chunk), strict=True))
    memo = adapter.memo
    for (state, legal, history), (text, keep) in zip(items, described, strict=True):
        if keep:
            memo.put(memo.key(state, legal, history),
                     (adapter.observation_of(vectors[text], state), text))
    return {"inputs": len(items), "distinct_texts": len(texts)}
