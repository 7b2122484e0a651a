"""``langadapt report A B ...``: several results folders in one summary and one set of
curves, each adapter named ``<folder>/<adapter>`` (folders are only read, never written).

Curves are over environment steps when every folder's budget is steps, over training
episodes otherwise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .config import load_config
from .plots import plot_final_returns, plot_learning_curves
from .report import summary_markdown, write_summary_csv
from .results import Episode, read_episodes
from .results_io import ResultsFolderError
from .summary import summarise

__all__ = ["compare_folders"]


def _folder_episodes(folder: Path) -> tuple[list[Episode], bool, float | None]:
    """(episodes with adapters renamed ``<folder>/<adapter>``, budget in steps, threshold)."""
    if not (folder / "config.yaml").is_file() or not (folder / "episodes.csv").is_file():
        raise ResultsFolderError(f"{folder} is not a langadapt results folder: expected "
                                 "config.yaml and episodes.csv")
    config = load_config(folder / "config.yaml", data_only=True)
    try:
        episodes = read_episodes(folder / "episodes.csv")
    except ValueError as error:
        raise ResultsFolderError(str(error)) from None
    renamed = [dataclasses.replace(e, adapter=f"{folder.name}/{e.adapter}") for e in episodes]
    in_steps = all(config.training_for(agent).steps for agent in config.agents)
    return renamed, in_steps, config.evaluation.threshold


def compare_folders(folders: list[Path], out_dir: Path) -> str:
    """Write ``summary.csv``, ``summary.md``, ``learning_curves.png`` and
    ``final_returns.png`` of ``folders`` together into ``out_dir``; return the markdown."""
    names = [folder.name for folder in folders]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ResultsFolderError(f"folders named {', '.join(repeated)} twice: their adapters "
                                 "would share names; copy or rename one")
    episodes: list[Episode] = []
    in_steps, thresholds = [], set()
    for folder in folders:
        rows, steps, threshold = _folder_episodes(folder)
        episodes += rows
        in_steps.append(steps)
        thresholds.add(threshold)
    threshold = thresholds.pop() if len(thresholds) == 1 else None
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = summarise(episodes, threshold)
    title = "compared: " + ", ".join(names)
    markdown = summary_markdown(rows, title, threshold)
    write_summary_csv(rows, out_dir / "summary.csv")
    (out_dir / "summary.md").write_text(markdown, encoding="utf-8")
    plot_learning_curves(episodes, out_dir / "learning_curves.png", title,
                         x_axis="steps" if all(in_steps) else "episodes")
    plot_final_returns(rows, out_dir / "final_returns.png", title)
    return markdown
