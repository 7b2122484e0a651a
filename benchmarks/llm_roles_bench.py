"""The LLM as policy, advisor and reward shaper: parse rates, cost, potentials, policy success.

Figures (``run()`` returns them; ``python -m langadapt.benchmarks.llm_roles_bench
--part NAME`` runs one part):

- ``parse``: structured decoding on llama.cpp (SmolLM2) over distinct prompts (random maze
  cells with random legal-move sets, and random CartPole states): the share of decisions
  that yield a legal action; text mode on llama.cpp: parse rate, recovered by the correction
  re-prompt, fallbacks. Then the same decisions again on the same cache: LLM calls of a rerun.
- ``potential``: Spearman correlation of SmolLM2's potential with -(BFS distance) over every
  free cell of each maze, and the distinct scores it gave.
- ``policy``: SmolLM2 zero-shot on umaze, double_t_maze and CartPole beside random: success,
  return, seconds per decision, LLM calls per episode.

The advisor and shaping comparisons with DQN are experiments (``configs/llm_in_the_loop.yaml``).
LLM answers go to ``$LANGADAPT_CACHE_DIR`` (set it to keep the repository's cache clean).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from .. import environments  # noqa: F401
from ..agents import RandomAgent, evaluate
from ..llm import make_backend
from ..roles.llm_policy import LLMPolicy
from ..roles.reward_shaping import RewardShaping, spearman_with_distance


def _states(n: int, seed: int) -> list[tuple[Any, Any, list[int]]]:
    """``n`` (env, state, legal moves) triples with distinct prompts: maze cells with random
    legal subsets (at least two moves) and random CartPole states."""


    rng = np.random.default_rng(seed)
    mazes = [gym.make("langadapt/Maze-v0", maze=m) for m in ("double_t_maze", "medium", "large")]
    cartpole = gym.make("langadapt/CartPole-v0")
    out, seen = [], set()
    while len(out) < n:
        if rng.random() < 0.5:
            env = mazes[int(rng.integers(len(mazes)))]
            cells = env.unwrapped.free_cells()
            cell = cells[int(rng.integers(len(cells)))]
            k = int(rng.integers(2, 9))
            moves = sorted(int(m) for m in rng.choice(8, size=k, replace=False))
            state = np.array(cell, np.float32)
        else:
            env = cartpole
            state = rng.uniform([-2.0, -1.5, -0.2, -2.0], [2.0, 1.5, 0.2, 2.0]).astype(np.float32)
            moves = [0, 1]
        key = (id(env), tuple(np.round(state, 2)), tuple(moves))
        if key not in seen:
            seen.add(key)
            out.append((env, state, moves))
    return out


def _decide_all(backend: Any, states: list, decoding: str) -> dict[str, float]:

    policies: dict[int, LLMPolicy] = {}
    legal = 0
    started = time.perf_counter()
    for env, state, moves in states:
        if id(env) not in policies:
            policies[id(env)] = LLMPolicy(env.observation_space, env.action_space,
                                          {"decoding": decoding}, backend=backend)
            policies[id(env)].bind(env)
        legal += policies[id(env)].decide(state, moves) in moves
    totals: dict[str, float] = {}
    for policy in policies.values():
        for key, value in policy.stats().items():
            totals[key] = totals.get(key, 0) + value
    totals["legal_share"] = legal / len(states)
    totals["wall_seconds"] = time.perf_counter() - started
    return totals


def parse_part(n: int, text_n: int, cache_dir: Path) -> dict[str, float]:
    """Parse rates on llama.cpp (structured and text)."""

    figures: dict[str, float] = {}
    states = _states(n, seed=0)
    path = cache_dir / "llm_roles_bench.sqlite"
    smol = make_backend({"backend": "llamacpp", "cache_path": path})
    first = _decide_all(smol, states, "structured")
    again = _decide_all(make_backend({"backend": "llamacpp", "cache_path": path}), states,
                        "structured")
    figures.update({
        "llamacpp_structured_decisions": first["decisions"],
        "llamacpp_structured_legal_share": first["legal_share"],
        "llamacpp_structured_fallbacks": first["llm_fallbacks"],
        "llamacpp_structured_calls": first["llm_calls"],
        "llamacpp_seconds_per_call": first["llm_seconds"] / max(1, first["llm_calls"]),
        "llamacpp_rerun_calls": again["llm_calls"],
    })
    text = _decide_all(smol, states[:text_n], "text")
    asked = text["decisions"]
    figures.update({
        "llamacpp_text_decisions": asked,
        "llamacpp_text_parse_rate_first_reply": 1 - (text["corrections"] / asked),
        "llamacpp_text_recovered_by_correction": text["corrections"] - text["llm_fallbacks"],
        "llamacpp_text_fallbacks": text["llm_fallbacks"],
        "llamacpp_text_legal_share": 1 - text["llm_fallbacks"] / asked,
    })
    return figures


def potential_part() -> dict[str, float]:
    """Spearman correlation of SmolLM2's potential with -(BFS distance), per maze."""


    figures: dict[str, float] = {}
    for name in ("umaze", "double_t_maze", "medium", "large"):
        env = gym.make("langadapt/Maze-v0", maze=name)
        shaper = RewardShaping(env, {"potential": "llm"})
        shaper.prepare()
        figures[f"{name}_spearman"] = spearman_with_distance(shaper)
        figures[f"{name}_distinct_scores"] = len(set(shaper.potentials.values()))
        figures[f"{name}_cells_scored"] = shaper.stats()["potentials"]
    return figures


def policy_part(episodes: int) -> dict[str, float]:
    """SmolLM2 zero-shot beside random on umaze, double_t_maze and CartPole."""


    figures: dict[str, float] = {}
    for name, env in (
        ("umaze", gym.make("langadapt/Maze-v0", maze="umaze")),
        ("double_t_maze", gym.make("langadapt/Maze-v0", maze="double_t_maze")),
        ("cartpole", gym.make("langadapt/CartPole-v0")),
    ):
        policy = LLMPolicy(env.observation_space, env.action_space)
        policy.bind(env)
        records = evaluate(policy, env, episodes=episodes, seed=0)
        stats = policy.stats()
        rand = evaluate(RandomAgent(env.observation_space, env.action_space), env,
                        episodes=max(episodes, 20), seed=0)
        figures.update({
            f"{name}_llm_success": float(np.mean([r.success for r in records])),
            f"{name}_llm_return": float(np.mean([r.return_ for r in records])),
            f"{name}_llm_seconds_per_decision": stats["llm_seconds"] / max(1, stats["decisions"]),
            f"{name}_llm_calls_per_episode": stats["llm_calls"] / episodes,
            f"{name}_random_success": float(np.mean([r.success for r in rand])),
            f"{name}_random_return": float(np.mean([r.return_ for r in rand])),
        })
    return figures


def run(quick: bool = False, parts: tuple[str, ...] = ("parse", "potential", "policy"),
        n: int | None = None, text_n: int | None = None) -> dict[str, float | str]:
    """Run the chosen parts; ``quick`` uses 60 structured and 20 text decisions."""
    figures: dict[str, float | str] = {}
    n = n or (60 if quick else 1000)
    text_n = min(n, text_n or (20 if quick else 200))
    with tempfile.TemporaryDirectory() as tmp:
        if "parse" in parts:
            figures.update(parse_part(n, text_n, Path(tmp)))
        if "potential" in parts:
            figures.update(potential_part())
        if "policy" in parts:
            figures.update(policy_part(2 if quick else 5))
    for key, value in figures.items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", action="append", choices=("parse", "potential", "policy"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-n", type=int, default=None, help="structured decisions (parse)")
    parser.add_argument("--text-n", type=int, default=None, help="text decisions (parse)")
    args = parser.parse_args()
    run(quick=args.quick, parts=tuple(args.part or ("parse", "potential", "policy")), n=args.n,
        text_n=args.text_n)
