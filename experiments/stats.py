"""The field's statistics for few-seed comparisons, through ``rliable`` (Agarwal et al. 2021):
IQM and mean of a (runs x tasks) score matrix with stratified bootstrap 95% intervals, and
performance profiles. ``rliable`` is the optional extra ``stats``
(``pip install 'langadapt[stats]'``); without it :func:`require_rliable` is one line naming it.

Scores are final greedy success rates: one per run (a training seed) and task. Intervals
resample runs within each task (rliable's stratified bootstrap, percentile method), seeded
so a rebuilt report is identical.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .config import ConfigError
from .results import Episode

__all__ = [
    "BOOTSTRAP_REPS",
    "STATS_HINT",
    "StatsNotInstalled",
    "aggregate_estimates",
    "plot_performance_profile",
    "require_rliable",
    "seed_scores",
    "seed_scores_markdown",
]

STATS_HINT = "pip install 'langadapt[stats]'"
BOOTSTRAP_REPS = 2_000
"""Bootstrap resamples per estimate (rliable's own default for profiles)."""


class StatsNotInstalled(ConfigError, ImportError):
    """``rliable`` is missing: the message is one line naming :data:`STATS_HINT` (a
    ConfigError, so the command line shows it as one line)."""


def require_rliable() -> tuple[Any, Any, Any]:
    """``(rliable.library, rliable.metrics, rliable.plot_utils)``, imported now."""
    try:
        from rliable import library, metrics, plot_utils  # noqa: PLC0415  (optional extra)
    except ImportError as error:
        raise StatsNotInstalled(
            f"IQM, stratified bootstrap intervals and performance profiles need rliable "
            f"({error}): {STATS_HINT}") from None
    return library, metrics, plot_utils


@contextmanager
def _seeded_global_rng(seed: int) -> Iterator[None]:
    """rliable's stratified bootstrap draws its resamples from numpy's global RNG
    (``np.random.choice``; its ``random_state`` argument reaches only arch): seed that for
    the call and give the caller's state back after."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def aggregate_estimates(scores: np.ndarray, reps: int = BOOTSTRAP_REPS, seed: int = 0
                        ) -> dict[str, tuple[float, float, float]]:
    """``{"iqm": (point, low, high), "mean": (...)}`` of a (runs x tasks) score matrix:
    rliable's ``aggregate_iqm`` and ``aggregate_mean`` with its stratified bootstrap 95%
    percentile intervals (resamples seeded with ``seed``). With one run the
    intervals are nan (nothing to resample)."""
    library, metrics, _ = require_rliable()
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or 0 in scores.shape or not np.isfinite(scores).all():
        raise ValueError(f"scores of shape {scores.shape}: expected a finite (runs x tasks) "
                         "matrix with at least one run and one task")

    def both(matrix: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(matrix), metrics.aggregate_mean(matrix)])

    if scores.shape[0] < 2:
        point = both(scores)
        return {"iqm": (float(point[0]), math.nan, math.nan),
                "mean": (float(point[1]), math.nan, math.nan)}
    with _seeded_global_rng(seed):
        points, intervals = library.get_interval_estimates({"scores": scores}, both, reps=reps)
    point, interval = points["scores"], intervals["scores"]
    return {name: (float(point[i]), float(interval[0, i]), float(interval[1, i]))
            for i, name in enumerate(("iqm", "mean"))}


def plot_performance_profile(score_dict: Mapping[str, np.ndarray], path: Path | str,
                             title: str = "", reps: int = BOOTSTRAP_REPS, seed: int = 0) -> None:
    """rliable's performance profile (fraction of run x task scores above each threshold
    tau in [0, 1], with stratified bootstrap 95% bands) of each (runs x tasks) matrix of
    ``score_dict``, saved as a PNG."""
    library, _, plot_utils = require_rliable()
    import matplotlib  # noqa: PLC0415  (the report's backend choice stays with the caller)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    taus = np.linspace(0.0, 1.0, 41)
    with _seeded_global_rng(seed):
        points, intervals = library.get_interval_estimates(
            {k: np.asarray(v, dtype=float) for k, v in score_dict.items()},
            lambda m: library.score_distributions(m, taus), reps=reps)
    from .plots import line_style, wrapped  # noqa: PLC0415  (plots sets the Agg backend)

    figure, axis = plt.subplots(figsize=(7, 4.5))
    plot_utils.plot_performance_profiles(
        points, taus, performance_profile_cis=intervals, ax=axis, labelsize="large",
        ticklabelsize="medium",
        xlabel=r"success rate $\tau$", ylabel="fraction of runs x tasks\n" r"with success $> \tau$")
    for index, line in enumerate(axis.get_lines()):  # overlapping profiles stay visible
        line.set(**line_style(index, len(taus)))
    axis.legend(loc="lower left", fontsize=8)
    axis.set_title(wrapped(f"{title}\nperformance profile, stratified bootstrap 95% bands"
                           .strip(), figure.get_figwidth()), fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def seed_scores(episodes: Sequence[Episode], phase: str = "final"
                ) -> dict[tuple[str, str], dict[int, float]]:
    """Per (adapter, agent): each seed's success rate over its ``phase`` episodes."""
    outcomes: dict[tuple[str, str], dict[int, list[bool]]] = defaultdict(
        lambda: defaultdict(list))
    for e in episodes:
        if e.phase == phase:
            outcomes[(e.adapter, e.agent)][e.seed].append(bool(e.success))
    return {key: {seed: float(np.mean(v)) for seed, v in sorted(by_seed.items())}
            for key, by_seed in outcomes.items()}


def _estimate(value: tuple[float, float, float]) -> str:
    point, low, high = value
    if math.isnan(low):
        return f"{100 * point:.1f}"
    return f"{100 * point:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def seed_scores_markdown(episodes: Sequence[Episode]) -> str:
    """The final success of each adapter x agent as IQM and mean over seeds with
    stratified bootstrap 95% intervals (rliable); a one-line note naming the extra when
    rliable is missing."""
    scores = seed_scores(episodes)
    if not scores:
        return ""
    try:
        require_rliable()
    except StatsNotInstalled as error:
        return f"\n{error}\n"
    lines = ["", "Final success (%) over seeds, rliable: IQM and mean with stratified "
             "bootstrap 95% intervals (none with one seed).", "",
             "| adapter | agent | seeds | IQM | mean |", "|---|---|---|---|---|"]
    for (adapter, agent), by_seed in scores.items():
        estimates = aggregate_estimates(np.array(list(by_seed.values()))[:, None])
        lines.append(f"| {adapter} | {agent} | {len(by_seed)} | {_estimate(estimates['iqm'])} "
                     f"| {_estimate(estimates['mean'])} |")
    return "\n".join(lines) + "\n"
