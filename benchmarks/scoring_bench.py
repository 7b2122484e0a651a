"""LLM decisions on llama.cpp / SmolLM2: scoring the known replies vs generating one.

``n`` distinct maze decision prompts (`langadapt.roles.decision_messages`): non-goal cells
of the four named mazes and of random 9x9 mazes (``n // 60`` of them, seeds 0, 1, ...),
each with a random subset (two or more where the cell allows) of its legal moves, drawn
without repeats. For every prompt, side by side in one run, each
starting from the same state — llama.cpp's KV cache holding just the prefix every prompt
shares (system prompt and template), as in a run where consecutive decisions differ:

(a) ``floor``: llama.cpp evaluating that decision's new prompt tokens (after the shared
    prefix) and nothing else — no decision can cost less;
(b) ``scored``: `LLMBackend.score` of every candidate reply (``{ "action": N}``), as
    `langadapt.llm.decide` does it;
(c) ``generated``: greedy structured generation (``chat`` with the action schema,
    ``max_tokens`` 16), what a generating role pays.

Reported: ms per decision (mean, median) of each, (b)/(a) and (c)/(a), prompt tokens
evaluated, and how often greedy scoring picks the action greedy generation writes (every
disagreement listed). No answer cache: every request is evaluated.

``python -m langadapt.benchmarks.scoring_bench [--n N] [--seed S]`` runs it on
its own (the lead's figure: N = 1000 on a quiet machine).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import numpy as np

from ..environments import MazeEnv, language_for
from ..environments.maze import MAZE_LAYOUTS
from ..llm import LlamaCppBackend, decide
from ..llm.llamacpp import _evaluate, chat_prompt_tokens, load_llama
from ..roles import DiscreteActionParser, decision_messages

__all__ = ["decision_prompts", "run"]


def decision_prompts(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` distinct maze decisions: ``{"maze", "cell", "moves", "messages", "schema"}``,
    the cells of the four named mazes and of random 9x9 mazes, each with a random subset of
    its legal moves (two or more where it has them). ValueError when the mazes hold fewer
    than ``n`` distinct ones."""
    rng = np.random.default_rng(seed)
    cells = []
    mazes = [(name, MazeEnv(maze=name)) for name in MAZE_LAYOUTS]
    # random 9x9 mazes after the named ones, as many as n distinct decisions need
    mazes += [(f"random9x9-{k}", MazeEnv(maze="random", width=9, height=9, seed=k))
              for k in range(max(0, n // 60))]
    for name, env in mazes:
        spec = language_for(env)
        parser = DiscreteActionParser(n_actions=spec.n_actions)
        cells += [(name, env, spec, parser, cell) for cell in env.free_cells()
                  if cell != env.goal]
    seen: set[tuple[str, tuple[int, int], tuple[int, ...]]] = set()
    out: list[dict[str, Any]] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n + 10_000:
            raise ValueError(f"the mazes hold fewer than n={n} distinct decisions")
        name, env, spec, parser, cell = cells[int(rng.integers(len(cells)))]
        legal = env.legal_moves_at(cell)
        size = int(rng.integers(min(2, len(legal)), len(legal) + 1))
        moves = tuple(sorted(int(m) for m in rng.choice(legal, size=size, replace=False)))
        key = (name, tuple(cell), moves)
        if key in seen:
            continue
        seen.add(key)
        out.append({"maze": name, "cell": tuple(int(c) for c in cell), "moves": list(moves),
                    "messages": decision_messages(spec, env.observation_of(cell), list(moves)),
                    "schema": parser.schema(list(moves))})
    return out


def _keep(llama: Any, n: int) -> None:
    """Cut llama.cpp's KV cache back to its first ``n`` tokens."""
    n = min(n, llama.n_tokens)
    llama._ctx.kv_cache_seq_rm(-1, n, -1)
    llama.n_tokens = n
    llama._requires_eval = True


def _summary(ms: list[float]) -> dict[str, float]:
    return {"mean_ms": statistics.fmean(ms), "median_ms": statistics.median(ms)}


def run(quick: bool = False, n: int | None = None, seed: int = 0,
        verbose: bool = True) -> dict[str, Any]:
    """The figures of the module docstring for ``n`` decisions (default 1000; 20 with
    ``quick``)."""
    n = (20 if quick else 1000) if n is None else n
    decisions = decision_prompts(n, seed)
    backend = LlamaCppBackend(cache_path=None, temperature=0.0)
    llama, lock = load_llama(backend.model_path, backend.context_length, backend.n_threads)
    prompts = [chat_prompt_tokens(llama, d["messages"]) for d in decisions]
    shared = len(prompts[0])
    for tokens in prompts[1:]:
        shared = next((i for i, (a, b) in enumerate(zip(prompts[0][:shared], tokens, strict=False))
                       if a != b), min(shared, len(tokens)))
    # warm up: load, the shared prefix evaluated once
    backend.score(decisions[0]["messages"], ["x"])
    times: dict[str, list[float]] = {"floor": [], "scored": [], "generated": []}
    new_tokens: list[int] = []
    disagreements: list[dict[str, Any]] = []
    for d, tokens in zip(decisions, prompts, strict=True):
        with lock:
            _keep(llama, shared)
            start = time.perf_counter()
            _evaluate(llama, tokens[shared:], len(tokens) - shared - 1)
            times["floor"].append((time.perf_counter() - start) * 1000)
            _keep(llama, shared)
        new_tokens.append(len(tokens) - shared)
        start = time.perf_counter()
        decision = decide(backend, d["messages"], d["schema"])
        times["scored"].append((time.perf_counter() - start) * 1000)
        with lock:
            _keep(llama, shared)
        start = time.perf_counter()
        reply = backend.chat(d["messages"], schema=d["schema"], max_tokens=16)
        times["generated"].append((time.perf_counter() - start) * 1000)
        generated = json.loads(reply)
        if generated != decision.value:
            disagreements.append({
                "maze": d["maze"], "cell": d["cell"], "moves": d["moves"],
                "scored": decision.value["action"], "generated": generated["action"],
                "generated_reply": reply,
                "probabilities": {json.loads(k)["action"]: round(p, 3)
                                  for k, p in decision.probabilities.items()}})
    stats = backend.stats()
    results: dict[str, Any] = {
        "n": n,
        "shared_prefix_tokens": shared,
        "new_prompt_tokens_mean": statistics.fmean(new_tokens),
        **{f"{k}_{m}": v for k, ms in times.items() for m, v in _summary(ms).items()},
        "scored_over_floor": statistics.fmean(times["scored"]) / statistics.fmean(times["floor"]),
        "generated_over_floor": (statistics.fmean(times["generated"])
                                 / statistics.fmean(times["floor"])),
        "agreement": (n - len(disagreements)) / n,
        "disagreements": disagreements,
        "llm_scored": stats["llm_scored"],
        "llm_prompt_tokens": stats["llm_prompt_tokens"],
        "llm_prompt_tokens_reused": stats["llm_prompt_tokens_reused"],
    }
    if verbose:
        print(f"{n} maze decisions, shared prefix {shared} tokens, "
              f"{results['new_prompt_tokens_mean']:.1f} new prompt tokens each")
        for k in times:
            print(f"  {k:>9}: {results[f'{k}_mean_ms']:7.1f} ms mean, "
                  f"{results[f'{k}_median_ms']:7.1f} ms median per decision")
        print(f"  scored / floor {results['scored_over_floor']:.2f}, generated / floor "
              f"{results['generated_over_floor']:.2f}")
        print(f"  greedy scoring = greedy generation: {n - len(disagreements)}/{n}")
        for d in disagreements:
            print(f"    {d['maze']} {d['cell']} moves {d['moves']}: scored {d['scored']}, "
                  f"generated {d['generated_reply']!r}, p={d['probabilities']}")
    return results


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="distinct decisions (1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = run(n=args.n, seed=args.seed, verbose=not args.json)
    if args.json:
        print(json.dumps(figures, indent=2))
