"""``langadapt report A B ...``: several results folders in one summary and one set of
curves, each adapter named ``<folder>/<adapter>`` (folders are only read, never written).
Each folder's ``episodes.csv`` is checked against its ``runs/`` first, as for one folder's
report; the comparison folder is written as a results folder is (one writer, whole files,
never through a link: :mod:`.results`), and never into a results folder.

Curves are over environment steps when every folder's budget is steps, over training
episodes otherwise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .config import load_config
from .costs import Cost, folder_costs
from .plots import plot_final_returns, plot_learning_curves
from .report import summary_markdown, write_summary_csv
from .results import (
    Episode,
    ResultsFolderError,
    check_results,
    folder_lock,
    inside,
    read_episodes,
    replacing,
    write_text,
    writing,
)
from .summary import summarise

__all__ = ["compare_folders"]


def _folder_episodes(folder: Path) -> tuple[list[Episode], bool, float | None,
                                            dict[tuple[str, str], Cost], str]:
    """(episodes with adapters renamed ``<folder>/<adapter>``, budget in steps, threshold,
    the runs' costs under the same names, the environment with its params)."""
    if not (folder / "config.yaml").is_file() or not (folder / "episodes.csv").is_file():
        raise ResultsFolderError(f"{folder} is not a langadapt results folder: expected "
                                 "config.yaml and episodes.csv")
    check_results(folder)  # crafted or cut rows: refused before they are summarised
    config = load_config(folder / "config.yaml", data_only=True)
    try:
        episodes = read_episodes(folder / "episodes.csv")
    except ValueError as error:
        raise ResultsFolderError(str(error)) from None
    renamed = [dataclasses.replace(e, adapter=f"{folder.name}/{e.adapter}") for e in episodes]
    in_steps = all(config.training_for(agent).steps for agent in config.agents)
    costs = {(f"{folder.name}/{adapter}", agent): cost
             for (adapter, agent), cost in folder_costs(config, folder).items()}
    environment = f"{config.environment.id} {config.environment.params}"
    return renamed, in_steps, config.evaluation.threshold, costs, environment


def compare_folders(folders: list[Path], out_dir: Path) -> str:
    """Write ``summary.csv``, ``summary.md``, ``learning_curves.png`` and
    ``final_returns.png`` of ``folders`` together into ``out_dir``; return the markdown."""
    names = [folder.name for folder in folders]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ResultsFolderError(f"folders named {', '.join(repeated)} twice: their adapters "
                                 "would share names; copy or rename one")
    episodes: list[Episode] = []
    in_steps, thresholds, costs, environments = [], set(), {}, {}
    for folder in folders:
        rows, steps, threshold, cost, environments[folder] = _folder_episodes(folder)
        episodes += rows
        in_steps.append(steps)
        thresholds.add(threshold)
        costs.update(cost)
    threshold = thresholds.pop() if len(thresholds) == 1 else None
    if (out_dir / "config.yaml").exists() or (out_dir / "suite.yaml").exists():
        raise ResultsFolderError(f"--out {out_dir} is a results folder; a comparison never "
                                 "replaces a folder's own summary: choose another --out")
    rows = summarise(episodes, threshold, costs)
    title = "compared: " + ", ".join(names)
    markdown = summary_markdown(rows, title, threshold)
    if len(set(environments.values())) > 1:
        markdown += ("\nThe folders' environments differ: "
                     + "; ".join(f"{folder}: {env}" for folder, env in environments.items())
                     + ".\n")
    with writing(out_dir, f"free some space and compare again into --out {out_dir}"):
        inside(out_dir.parent, out_dir.name).mkdir(parents=True, exist_ok=True)
        with folder_lock(out_dir):
            with replacing(out_dir, "summary.csv") as temporary:
                write_summary_csv(rows, temporary)
            write_text(out_dir, "summary.md", markdown)
            with replacing(out_dir, "learning_curves.png") as temporary:
                plot_learning_curves(episodes, temporary, title,
                                     x_axis="steps" if all(in_steps) else "episodes")
            with replacing(out_dir, "final_returns.png") as temporary:
                plot_final_returns(rows, temporary, title)
    return markdown
