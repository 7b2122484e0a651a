"""Held-out evaluation episodes: the same seeds ``F + i`` for every run's final evaluation
(:class:`HeldOutEpisodes`), refused when they overlap a seed training uses
(:func:`check_heldout`, :func:`seeds_used_in_training`). Explained in
``docs/configuration.md`` (Held-out episodes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium

from ..agents.training import EVAL_SEED_OFFSET

__all__ = ["HeldOutEpisodes", "check_heldout", "seeds_used_in_training"]


def seeds_used_in_training(run_seeds: Iterable[int], evaluates_in_training: bool,
                           copies: int = 1, within: range | None = None) -> dict[int, str]:
    """Every reset seed training uses, with what uses it: the run seeds (first training
    episode; ``seed + i`` for copy ``i`` of ``copies``, only those ``within`` a range if
    given) and, with evaluations during training, ``seed + EVAL_SEED_OFFSET``."""
    used: dict[int, str] = {}
    for seed in run_seeds:
        for copy in range(copies - 1, 0, -1) if within is None else range(
                min(copies, within.stop - seed) - 1, max(0, within.start - seed - 1), -1):
            used[seed + copy] = (f"run seed {seed} + {copy} (copy {copy} of n_envs {copies}, "
                                 "its first training episode)")
        used[seed] = f"run seed {seed} (its first training episode)"
        if evaluates_in_training:
            used[seed + EVAL_SEED_OFFSET] = (f"run seed {seed} + {EVAL_SEED_OFFSET} (its "
                                             "evaluations during training)")
    return used


def check_heldout(heldout: range, run_seeds: Sequence[int], evaluates_in_training: bool,
                  copies: int = 1) -> None:
    """ValueError naming the seeds of ``heldout`` that training uses, if any."""
    used = seeds_used_in_training(run_seeds, evaluates_in_training, copies, heldout)
    overlap = sorted(seed for seed in used if seed in heldout)
    if overlap:
        named = "; ".join(f"{seed}: {used[seed]}" for seed in overlap[:5])
        more = f" and {len(overlap) - 5} more" if len(overlap) > 5 else ""
        raise ValueError(
            f"held-out seeds [{heldout.start}, {heldout.stop}) overlap the seeds training uses "
            f"— {named}{more}; move heldout_seeds.first past them or choose other run seeds")


class HeldOutEpisodes(gymnasium.Wrapper):
    """Plays the held-out episodes in order: a reset with a seed (any seed: an evaluation
    starting) restarts at ``seeds[0]``, a reset without one takes the next seed. Resetting
    past the last seed is an error (the evaluation asked for more episodes than held out).
    ``seeds``: the config's held-out seeds (never empty: checked at config load)."""

    def __init__(self, env: gymnasium.Env, seeds: Sequence[int]) -> None:
        super().__init__(env)
        self.seeds = list(seeds)
        self.next_index = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.next_index = 0
        if self.next_index >= len(self.seeds):
            raise ValueError(f"episode {self.next_index + 1} of a held-out evaluation: only "
                             f"{len(self.seeds)} held-out seeds")
        episode_seed = self.seeds[self.next_index]
        self.next_index += 1
        return self.env.reset(seed=episode_seed, options=options)
