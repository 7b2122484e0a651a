"""Learning curves and final-return bars: raw vs language vs llm, mean and 95% percentile
bootstrap interval over seeds (never outside the seeds' range), each seed's own curve
beneath. Two rows of curves: the greedy evaluations during training (when the experiment
has them), ending in a star at the end of the budget, the final greedy evaluation (held-out
episodes when the experiment names them), and the training episodes' returns. Curves run
over environment steps when the training budget is steps (Q-learning and DQN then line up
however long their episodes are), over training episodes otherwise. Also the best-so-far
curves of policy search and rliable's performance profiles."""

from __future__ import annotations

import math
import textwrap
import warnings
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import EngFormatter  # noqa: E402

from .results import Episode  # noqa: E402
from .stats import (  # noqa: E402
    SummaryRow,
    mean_and_interval,
    profile_estimates,
    require_rliable,
)

_COUNT = EngFormatter(sep="")
"""Tick labels of counts: 50k, 1.5M."""

LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")
"""Lines that lie on top of each other (two adapters that both solved the task) stay visible:
each has its style and marker, the markers staggered, earlier lines drawn wider beneath."""

TITLE_CHARACTERS_PER_INCH = 12
"""How many characters of a 10-point title fit an inch of figure (titles are wrapped)."""

GRID_POINTS = 100
"""Most points of a mean curve: more distinct x values than this are read on an even grid."""

Series = dict[int, list[tuple[int, float]]]
"""Per seed, (x, y) points in increasing x."""


def _evaluation_points(episodes: list[Episode]) -> Series:
    """Per seed, (training episodes done, mean return of the greedy evaluation then)."""
    per_seed: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for e in episodes:
        if e.phase == "eval":
            per_seed[e.seed][e.episode].append(e.return_)
    return {seed: [(x, float(np.mean(v))) for x, v in sorted(points.items())]
            for seed, points in per_seed.items()}


def _training_points(episodes: list[Episode]) -> tuple[int, Series]:
    """(window, per seed the moving mean of ``window`` training returns at each training
    episode that ends a window); the window is a twentieth of the longest seed's episodes."""
    by_seed: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for e in sorted((e for e in episodes if e.phase == "train"), key=lambda e: e.episode):
        by_seed[e.seed].append((e.episode, e.return_))
    window = max(1, max((len(v) for v in by_seed.values()), default=1) // 20)
    smoothed = {}
    for seed, points in by_seed.items():
        values = np.array([v for _, v in points])
        kernel = np.ones(window) / window
        moving = np.convolve(values, kernel, mode="valid") if len(values) >= window else values
        smoothed[seed] = [(points[i + window - 1][0], float(m)) for i, m in enumerate(moving)]
    return window, smoothed


def _mean_band(series: Series):
    """The mean over seeds and its bootstrap interval (the mean where undefined) on a
    common grid: every x of the curves, or :data:`GRID_POINTS` evenly spaced ones when
    there are more. Each seed counts where its curve spans x, read linearly between its
    points (seeds evaluated at different steps still share a band)."""
    xs = sorted({x for points in series.values() for x, _ in points})
    if not xs:
        return (np.array([]),) * 4
    grid = np.array(xs, dtype=float) if len(xs) <= GRID_POINTS else np.linspace(
        xs[0], xs[-1], GRID_POINTS)
    columns: list[list[float]] = [[] for _ in grid]
    for points in series.values():
        px = np.array([x for x, _ in points], dtype=float)
        inside = np.flatnonzero((grid >= px[0]) & (grid <= px[-1]))
        values = np.interp(grid[inside], px, [y for _, y in points])
        for index, value in zip(inside, values, strict=True):
            columns[index].append(float(value))
    keep = [i for i, column in enumerate(columns) if column]
    stats = np.array([mean_and_interval(columns[i]) for i in keep]).reshape(-1, 3)
    means, lows, highs = stats.T
    undefined = np.isnan(lows)
    lows[undefined], highs[undefined] = means[undefined], means[undefined]
    return grid[keep], means, lows, highs


def _in_steps(series: Series, episodes: list[Episode]) -> Series:
    """The points of ``series`` with x as environment steps: the training episodes done
    replaced by the sum of their lengths (per seed, from the training rows)."""
    lengths: dict[int, dict[int, int]] = defaultdict(dict)
    for e in episodes:
        if e.phase == "train":
            lengths[e.seed][e.episode] = e.length
    converted = {}
    for seed, points in series.items():
        done = sorted(lengths[seed].items())
        ends = dict(zip([k for k, _ in done], np.cumsum([n for _, n in done]).tolist(),
                        strict=True))
        converted[seed] = [(int(ends.get(x, 0)), y) for x, y in points]
    return converted


def seeds_label(count: int) -> str:
    """``1 seed``, ``3 seeds``."""
    return f"{count} seed{'' if count == 1 else 's'}"


def wrapped(text: str, width_inches: float) -> str:
    """``text`` wrapped line by line to fit a figure ``width_inches`` wide (10-point)."""
    width = max(20, int(width_inches * TITLE_CHARACTERS_PER_INCH))
    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def line_style(index: int, points: int) -> dict:
    """Matplotlib keywords of the ``index``-th line of a panel of ``points`` points, so that
    lines on top of each other stay distinguishable (:data:`MARKERS`)."""
    every = max(1, points // 20)
    return {"linestyle": LINE_STYLES[index % len(LINE_STYLES)],
            "marker": MARKERS[index % len(MARKERS)], "markersize": 4,
            "markevery": (index * max(1, every // 3) % every, every),
            "linewidth": max(0.9, 2.4 - 0.5 * index), "alpha": 0.85}


def _final_points(episodes: list[Episode], x_axis: str, budget: int | None = None) -> Series:
    """Per seed, one point: (the training budget: ``budget`` if given, else the training
    episodes or steps the rows record, the mean return of the final greedy evaluation)."""
    points: Series = {}
    for seed in sorted({e.seed for e in episodes if e.phase == "final"}):
        final = [e for e in episodes if e.seed == seed and e.phase == "final"]
        train = [e for e in episodes if e.seed == seed and e.phase == "train"]
        x = sum(e.length for e in train) if x_axis == "steps" else final[0].episode
        x = budget if budget else x
        points[seed] = [(x, float(np.mean([e.return_ for e in final])))]
    return points


def _curve_rows(episodes: list[Episode]) -> list[str]:
    """The rows of panels: evaluations (when there are any) above training returns."""
    return (["eval"] if any(e.phase == "eval" for e in episodes) else []) + ["train"]


def plot_learning_curves(episodes: list[Episode], path: Path, title: str = "",
                         x_axis: str = "episodes", budgets: dict[str, int] | None = None
                         ) -> None:
    """One column per agent, a row for the greedy evaluations (when there are any) and one
    for the training returns; one line per adapter with its 95% band over seeds and each
    seed's own line beneath, the final greedy evaluation a star at the end of the agent's
    budget (``budgets``: per agent, in ``x_axis`` units; default: what the rows record).
    ``x_axis``: ``episodes`` (training episodes done) or ``steps`` (environment steps done,
    for a budget in steps)."""
    if x_axis not in ("episodes", "steps"):
        raise ValueError(f"x_axis={x_axis!r}: expected 'episodes' or 'steps'")
    agents = list(dict.fromkeys(e.agent for e in episodes))
    adapters = list(dict.fromkeys(e.adapter for e in episodes))
    rows = _curve_rows(episodes)
    columns = max(1, len(agents))
    figure, axes = plt.subplots(len(rows), columns, figsize=(5.2 * columns, 3.4 * len(rows)),
                                squeeze=False)
    kept = any(e.phase == "best" for e in episodes)
    for row, phase in enumerate(rows):
        for column, agent in enumerate(agents):
            axis = axes[row][column]
            windows: set[int] = set()
            for index, adapter in enumerate(adapters):
                subset = [e for e in episodes if e.agent == agent and e.adapter == adapter]
                if phase == "eval" or len(rows) == 1:  # the stars: in the top row
                    series = _evaluation_points(subset)
                    final = _final_points(subset, x_axis, (budgets or {}).get(agent))
                    _plot_final(axis, series, final, index, subset, x_axis, adapter)
                    _plot_kept(axis, subset, index, x_axis)
                if phase == "train":
                    window, series = _training_points(subset)
                    if series:
                        windows.add(window)
                if x_axis == "steps":
                    series = _in_steps(series, subset)
                _plot_band(axis, series, index, adapter)
            ylabel = ("greedy evaluation return" if phase == "eval" else
                      "training return" + (f" (moving mean of {_span(windows)} episodes)"
                                           if windows else ""))
            axis.set_title(f"{agent}: {'greedy evaluations' if phase == 'eval' else 'training'}")
            axis.set_xlabel("environment steps" if x_axis == "steps" else "training episodes")
            axis.xaxis.set_major_formatter(_COUNT)  # 400k, not 400000 beside 350000
            axis.set_ylabel(ylabel)
            axis.grid(alpha=0.3)
            if axis.has_data():
                axis.legend(fontsize=8)
    spread = ("one seed: its curve" if len({e.seed for e in episodes}) == 1 else
              "mean and 95% bootstrap interval over seeds (thin: each seed)")
    marks = "star: the final greedy evaluation" + (
        "; diamond: the kept (best) policy on the same episodes, at the evaluation that "
        "chose it" if kept else "")
    figure.suptitle(wrapped(f"{title}\n{spread}; {marks}", figure.get_figwidth()),
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _span(windows: set[int]) -> str:
    """``37`` or ``25–37``: the moving-mean windows of a panel's curves."""
    return (str(min(windows)) if len(windows) == 1
            else f"{min(windows)}–{max(windows)}")


def _plot_final(axis, series: Series, final: Series, index: int, subset: list[Episode],
                x_axis: str, adapter: str = "") -> None:
    """The final greedy evaluation's mean over seeds as a star at the end of the budget,
    joined by a dotted line to the last evaluation during training; a star with no curve
    to join (kept policies played again: ``langadapt evaluate``) carries the adapter's
    label."""
    if not final:
        return
    if x_axis == "steps":
        series = _in_steps(series, subset)
    x = float(np.mean([points[0][0] for points in final.values()]))
    y = float(np.mean([points[0][1] for points in final.values()]))
    colour = f"C{index}"
    xs, means, _, _ = _mean_band(series)
    if len(xs):
        axis.plot([xs[-1], x], [means[-1], y], color=colour, linestyle=":", linewidth=1)
    label = None if len(xs) else f"{adapter} ({seeds_label(len(final))}, final evaluation only)"
    axis.plot([x], [y], color=colour, marker="*", markersize=12 - 2 * (index % 3),
              markeredgecolor="black", markeredgewidth=0.5, linestyle="none", zorder=5,
              label=label)


def _plot_kept(axis, subset: list[Episode], index: int, x_axis: str) -> None:
    """The kept (best) policy's mean return over seeds on the final episodes, a diamond at
    the evaluation that chose it (its training episodes or steps then)."""
    best: Series = {}
    for seed in sorted({e.seed for e in subset if e.phase == "best"}):
        rows = [e for e in subset if e.seed == seed and e.phase == "best"]
        best[seed] = [(rows[0].episode, float(np.mean([e.return_ for e in rows])))]
    if not best:
        return
    if x_axis == "steps":
        best = _in_steps(best, subset)
    x = float(np.mean([points[0][0] for points in best.values()]))
    y = float(np.mean([points[0][1] for points in best.values()]))
    axis.plot([x], [y], color=f"C{index}", marker="D", markersize=7, markeredgecolor="black",
              markeredgewidth=0.5, linestyle="none", zorder=5)


def _plot_band(axis, series: Series, index: int, adapter: str) -> None:
    """Each seed's line, thin, under the mean line and its band."""
    xs, means, lows, highs = _mean_band(series)
    if len(xs) == 0:
        return
    colour = f"C{index}"
    for points in series.values():
        axis.plot([x for x, _ in points], [y for _, y in points], color=colour,
                  linewidth=0.6, alpha=0.35)
    axis.plot(xs, means, color=colour, label=f"{adapter} ({seeds_label(len(series))})",
              **line_style(index, len(xs)))
    axis.fill_between(xs, lows, highs, color=colour, alpha=0.2)


def plot_final_returns(rows: list[SummaryRow], path: Path, title: str = "") -> None:
    """Grouped bars: final greedy return per agent (groups) and adapter (bars), with the
    95% bootstrap interval over seeds; where a row has a kept (best, ``keep_best``) policy,
    its return on the same episodes beside it (hatched)."""
    agents = list(dict.fromkeys(r.agent for r in rows))
    adapters = list(dict.fromkeys(r.adapter for r in rows))
    kinds = ["final"] + (["kept"] if any(not math.isnan(r.best_return_mean) for r in rows)
                         else [])
    bars = [(adapter, kind) for adapter in adapters for kind in kinds]
    width = 0.8 / max(1, len(bars))
    figure, axis = plt.subplots(figsize=(max(4.8, 1.8 + 0.8 * len(agents) * max(1, len(bars))),
                                         3.8))
    for index, (adapter, kind) in enumerate(bars):
        xs, heights, errors = [], [], []
        for position, agent in enumerate(agents):
            row = next((r for r in rows if r.agent == agent and r.adapter == adapter), None)
            if row is None:
                continue
            mean, low, high = ((row.final_return_mean, row.final_return_low,
                                row.final_return_high) if kind == "final" else
                               (row.best_return_mean, row.best_return_low,
                                row.best_return_high))
            if kind == "kept" and math.isnan(mean):
                continue  # a row without keep_best
            xs.append(position + (index - (len(bars) - 1) / 2) * width)
            heights.append(mean)
            errors.append((0.0, 0.0) if math.isnan(low) else (mean - low, high - mean))
        yerr = np.array(errors).T if errors else None
        colour = f"C{adapters.index(adapter)}"
        axis.bar(xs, heights, width, yerr=yerr, capsize=3, color=colour,
                 label=adapter if len(kinds) == 1 else f"{adapter} ({kind})",
                 **({"hatch": "//", "alpha": 0.55, "edgecolor": colour} if kind == "kept"
                    else {}))
    axis.set_xticks(range(len(agents)), agents)
    axis.set_ylabel("final greedy return" if len(kinds) == 1
                    else "greedy return on the final episodes")
    axis.axhline(0, color="black", linewidth=0.6)
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8)
    spread = ("one seed: its final greedy return, no interval" if all(r.seeds == 1 for r in rows)
              else "mean and 95% bootstrap interval over seeds")
    if len(kinds) > 1:
        spread += "; hatched: the kept (best) policy on the same episodes"
    figure.suptitle(wrapped(f"{title}\n{spread}", figure.get_figwidth()), fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_best_so_far(
    by_calls: dict[str, list[list[tuple[float, float]]]],
    by_steps: dict[str, list[list[tuple[float, float]]]],
    path: Path,
    title: str = "",
) -> None:
    """Best-so-far return against LLM calls (search agents) and against environment steps
    (every agent): per agent the mean over seeds of each seed's step curve, band = min..max."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.8), squeeze=False)
    panels = (
        (axes[0][0], by_calls, "LLM calls (random search: proposals)", False),
        (axes[0][1], by_steps, "environment steps (log scale)", True),
    )
    agents = list(dict.fromkeys([*by_calls, *by_steps]))
    for axis, curves, xlabel, log in panels:
        for agent, runs in curves.items():
            runs = [r for r in runs if r]
            if not runs:
                continue
            end = max(r[-1][0] for r in runs)
            if log:
                start = max(1.0, min(r[0][0] for r in runs))
                grid = np.geomspace(start, max(end, start), 200)
            else:
                grid = np.linspace(0.0, end, 200) if end > 0 else np.array([0.0])
            values = np.full((len(runs), grid.size), np.nan)
            for row, points in enumerate(runs):
                xs = np.array([x for x, _ in points], dtype=float)
                ys = np.array([y for _, y in points], dtype=float)
                index = np.searchsorted(xs, grid, side="right") - 1
                values[row] = np.where(index >= 0, ys[np.maximum(index, 0)], np.nan)
                values[row, grid > xs[-1]] = ys[-1]  # a finished run keeps its best
            with warnings.catch_warnings():  # columns before any seed's first point
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=0)
                low, high = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
            position = agents.index(agent)
            colour = f"C{position}"
            axis.plot(grid, mean, color=colour, label=f"{agent} ({seeds_label(len(runs))})",
                      **line_style(position, len(grid)))
            axis.fill_between(grid, low, high, color=colour, alpha=0.15)
        if log:
            axis.set_xscale("log")
        axis.set_xlabel(xlabel)
        axis.set_ylabel("best-so-far return")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(wrapped(f"{title}\nmean over seeds, band: min to max",
                            figure.get_figwidth()), fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_performance_profile(score_dict: dict[str, np.ndarray], path: Path | str,
                             title: str = "") -> None:
    """rliable's performance profile of each (runs x tasks) matrix of ``score_dict`` (runs
    x tasks scoring above each tau in [0, 1], stratified bootstrap 95% bands), as a PNG."""
    _, _, plot_utils = require_rliable()
    taus = np.linspace(0.0, 1.0, 41)
    points, intervals = profile_estimates(score_dict, taus)
    figure, axis = plt.subplots(figsize=(9, 4.5))
    plot_utils.plot_performance_profiles(
        points, taus, performance_profile_cis=intervals, ax=axis, labelsize="large",
        ticklabelsize="medium",
        xlabel=r"success rate $\tau$", ylabel="fraction of runs x tasks\n" r"with success $> \tau$")
    for index, line in enumerate(axis.get_lines()):  # overlapping profiles stay visible
        line.set(**line_style(index, len(taus)))
    # beside the axes: inside, it would hide the profiles (they span the whole range)
    axis.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)
    bands = ("one run per row: no band" if all(len(v) == 1 for v in score_dict.values())
             else "stratified bootstrap 95% bands")
    axis.set_title(wrapped(f"{title}\nperformance profile, {bands}".strip(),
                           figure.get_figwidth()), fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
