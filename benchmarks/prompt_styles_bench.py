"""Prompt styles on llama.cpp / SmolLM2: what a decision costs and how good it is.

For every non-goal cell of the four named mazes (its legal moves as the maze gives them),
side by side in one run, with no answer cache (every request evaluated):

- ``verbose`` and ``compact`` decision prompts (`langadapt.roles.decision_messages`), each
  decided by structured generation (what a role paid before scoring) and by scoring the
  known replies (`langadapt.llm.decide`): milliseconds per decision, prompt tokens
  evaluated (new, after llama.cpp's prefix cache) per decision, and the **optimal-move
  rate** — how often SmolLM2's greedy decision is a move on a shortest path (BFS oracle,
  `roles.MazeOracle`) — beside a uniformly random legal move's rate;
- the LLM **potential by expectation** (`roles.RewardShaping` with ``potential: llm``:
  the expectation of SmolLM2's 0-10 scale): its Spearman correlation with minus the BFS
  distance on each maze, for both styles (the oracle's is 1.0 by construction).

``python -m langadapt.benchmarks.prompt_styles_bench [--quick]``.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from ..environments import ACTION_DELTAS, MAZE_LAYOUTS, MazeEnv, language_for
from ..llm import LlamaCppBackend, decide
from ..roles import (
    DiscreteActionParser,
    MazeOracle,
    RewardShaping,
    decision_messages,
    spearman_with_distance,
)

__all__ = ["run"]

STYLES = ("verbose", "compact")


def _states(mazes: list[str]) -> list[tuple[str, MazeEnv, Any, tuple[int, int], list[int]]]:
    out = []
    for name in mazes:
        env = MazeEnv(maze=name)
        out += [(name, env, language_for(env), cell, env.legal_moves_at(cell))
                for cell in env.free_cells()
                if cell != env.goal and len(env.legal_moves_at(cell)) > 1]
    return out


def run(quick: bool = False, verbose: bool = True) -> dict[str, Any]:
    """The figures of the module docstring (``quick``: umaze and double_t_maze only)."""
    mazes = ["umaze", "double_t_maze"] if quick else list(MAZE_LAYOUTS)
    states = _states(mazes)
    figures: dict[str, Any] = {"decisions": len(states)}
    random_rate = statistics.fmean(
        len(_optimal(env, cell, moves)) / len(moves) for _, env, _, cell, moves in states)
    figures["random_optimal_rate"] = random_rate
    for path in ("generated", "scored"):
        for style in STYLES:
            backend = LlamaCppBackend(cache_path=None, temperature=0.0)
            backend.score([{"role": "user", "content": "warm up"}], ["x"])  # load the model
            ms, optimal = [], 0
            before = backend.stats()
            for _, env, spec, cell, moves in states:
                messages = decision_messages(spec, env.observation_of(cell), moves, style=style)
                schema = DiscreteActionParser(n_actions=spec.n_actions).schema(moves)
                start = time.perf_counter()
                if path == "scored":
                    action = decide(backend, messages, schema).value["action"]
                else:
                    action = json.loads(backend.chat(messages, schema=schema,
                                                     max_tokens=16))["action"]
                ms.append((time.perf_counter() - start) * 1000)
                optimal += action in _optimal(env, cell, moves)
            after = backend.stats()
            tokens = after["llm_prompt_tokens"] - before["llm_prompt_tokens"]
            reused = after["llm_prompt_tokens_reused"] - before["llm_prompt_tokens_reused"]
            key = f"{style}_{path}"
            figures[f"{key}_ms_per_decision"] = statistics.fmean(ms)
            figures[f"{key}_new_prompt_tokens"] = (tokens - reused) / len(states)
            figures[f"{key}_optimal_rate"] = optimal / len(states)
    for path in ("generated", "scored"):
        figures[f"compact_over_verbose_{path}"] = (
            figures[f"compact_{path}_ms_per_decision"]
            / figures[f"verbose_{path}_ms_per_decision"])
    figures["compact_scored_over_verbose_generated"] = (
        figures["compact_scored_ms_per_decision"] / figures["verbose_generated_ms_per_decision"])
    for style in STYLES:
        for name in mazes:
            shaper = RewardShaping(MazeEnv(maze=name),
                                   {"potential": "llm", "prompt_style": style},
                                   backend=LlamaCppBackend(cache_path=None, temperature=0.0))
            shaper.prepare()
            figures[f"{style}_{name}_potential_spearman"] = spearman_with_distance(shaper)
            figures[f"{style}_{name}_potential_distinct"] = len(set(shaper.potentials.values()))
    if verbose:
        print(f"{len(states)} maze decisions (every non-goal cell with 2+ legal moves); "
              f"random legal move optimal {random_rate:.3f}")
        for path in ("generated", "scored"):
            for style in STYLES:
                key = f"{style}_{path}"
                print(f"  {key:>18}: {figures[f'{key}_ms_per_decision']:7.1f} ms, "
                      f"{figures[f'{key}_new_prompt_tokens']:5.1f} new prompt tokens, "
                      f"optimal {figures[f'{key}_optimal_rate']:.3f}")
        for path in ("generated", "scored"):
            print(f"  compact / verbose ({path}): {figures[f'compact_over_verbose_{path}']:.2f}")
        print("  compact scored / verbose generated: "
              f"{figures['compact_scored_over_verbose_generated']:.2f}")
        for style in STYLES:
            print(f"  potential by expectation, Spearman with -distance ({style}): " + ", ".join(
                f"{name} {figures[f'{style}_{name}_potential_spearman']:.2f}" for name in mazes))
    return figures


def _optimal(env: MazeEnv, cell: tuple[int, int], moves: list[int]) -> set[int]:
    """The legal moves whose target cell is nearest the goal."""
    distance = MazeOracle(env.grid, env.goal).distance

    def d(a: int) -> int:
        return distance.get((cell[0] + ACTION_DELTAS[a][0], cell[1] + ACTION_DELTAS[a][1]),
                            10**9)

    best = min(d(a) for a in moves)
    return {a for a in moves if d(a) == best}


if __name__ == "__main__":
    import sys

    run(quick="--quick" in sys.argv)
