"""The results folder: its layout, its runs on disk, reading it back and checking it.

Layout of a results folder::

    config.yaml               the resolved experiment (defaults filled in, seeds listed)
    runs/<run>/episodes.csv   one row per episode (process pool: appended and flushed as each
                              episode ends; Ray: written when the run's result arrives)
    runs/<run>/done.json      written when the run finished (rows, wall time, adapter and LLM
                              role counters)
    runs/<run>/failed.json    written instead when a Ray run failed (its error)
    prerender.json            what describing and encoding the reachable states cost, per pass
    episodes.csv              all runs' rows, in the experiment's order, once the runs end
    summary.csv, summary.md   per adapter x agent (see experiments.report)
    learning_curves.png, final_returns.png
    search_summary.md, rounds.csv, best_so_far.png   with llm_policy_search agents
    .langadapt.lock           who writes the folder now (PID and host)
    .langadapt-results        marks the folder as langadapt's: ``--force`` empties only such a
                              folder (or one whose config.yaml is an experiment), and only of
                              the files above and the run folders

A folder is written only inside itself, in whole files, by one writer at a time, and a full
disk is one line (:mod:`.results_io`); ``--force`` empties only a langadapt folder, and a
symbolic link among its entries is refused (:mod:`.results_folder`). ``done.json`` of older
versions kept the LLM roles' counters as ``cache_hits``, ``fallbacks`` and ``seconds``; they
are read under today's names (:func:`read_run_record`).

A crash loses at most the runs in flight; resuming keeps every finished run (a
``done.json`` whose ``episodes.csv`` has the rows it records) and redoes the others.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import AdapterSpec, AgentSpec, ExperimentConfig, load_config
from .results_io import (
    MAX_EPISODES_BYTES,
    MAX_RECORD_BYTES,
    ResultsFolderError,
    bounded,
    inside,
    write_csv,
    write_json,
)

EPISODE_COLUMNS = (
    "adapter",
    "agent",
    "seed",
    "phase",
    "episode",
    "return",
    "length",
    "success",
    "wall_time",
    "llm_calls",
    "cache_hits",
    "llm_fallbacks",
)
"""Columns of ``episodes.csv``. ``phase`` is ``train``, ``eval`` (greedy evaluation during
training; ``episode`` is then the number of training episodes done), ``final`` (the
greedy evaluation of the final policy after training, ``episode`` likewise) or, with
``keep_best``, ``best`` (the same evaluation of the retained policy; ``episode`` is that of
the evaluation that chose it), and with ``evaluation.transfer``, ``transfer`` (the final
policy on the transfer evaluation's held-out episodes). ``llm_calls``
and ``cache_hits`` count what the episode cost the adapter: LLM requests made, and
lookups answered by the persistent description and embedding caches (the adapter's
in-memory memo, which serves repeated states within a run, is not counted);
``llm_fallbacks``: descriptions that came from the rule describer because the LLM failed."""

RESULT_FILES = (
    "config.yaml",
    "episodes.csv",
    "summary.csv",
    "summary.md",
    "learning_curves.png",
    "final_returns.png",
    "prerender.json",
    "search_summary.md",
    "rounds.csv",
    "best_so_far.png",
)
"""What the runner writes at the top of a results folder (besides ``runs/``)."""

RUN_FILES = ("episodes.csv", "done.json", "failed.json")
"""What a run writes in ``runs/<run>/``."""

MARKER = ".langadapt-results"
"""The file that marks a folder as written by ``langadapt run`` (what ``--force`` may empty)."""
MARKER_TEXT = "a langadapt results folder: `langadapt run --force` may replace its results\n"

RUN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*__[A-Za-z0-9][A-Za-z0-9.+_-]*__seed[0-9]+")
"""The name of a run folder, ``runs/<adapter>__<agent>__seed<k>`` (labels hold no ``__``)."""

OLD_COUNTER_NAMES = {
    "cache_hits": "llm_cache_hits",
    "fallbacks": "llm_fallbacks",
    "seconds": "llm_seconds",
}
"""LLM role counters of older ``done.json`` files, by the name they have now."""


# ----------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class Run:
    """One (adapter, agent, seed) combination."""

    adapter: AdapterSpec
    agent: AgentSpec
    seed: int

    @property
    def key(self) -> str:
        return f"{self.adapter.name}__{self.agent.name}__seed{self.seed}"


def runs_of(config: ExperimentConfig) -> list[Run]:
    return [
        Run(adapter, agent, seed)
        for adapter in config.adapters
        for agent in config.agents
        for seed in config.seed_list
    ]


def find_run(config: ExperimentConfig, run_key: str) -> Run:
    for run in runs_of(config):
        if run.key == run_key:
            return run
    raise ValueError(f"run {run_key!r} is not a run of experiment {config.name!r}")


# ----------------------------------------------------------------------------- episodes


@dataclass
class Episode:
    """One row of ``episodes.csv``."""

    adapter: str
    agent: str
    seed: int
    phase: str
    episode: int
    return_: float
    length: int
    success: bool
    wall_time: float
    llm_calls: int
    cache_hits: int
    llm_fallbacks: int = 0


def read_episodes(path: Path) -> list[Episode]:
    """The rows of an ``episodes.csv``; ValueError naming the file if it is not one (or is
    larger than :data:`MAX_EPISODES_BYTES`)."""
    with open(bounded(path, MAX_EPISODES_BYTES), newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in EPISODE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{path}: not a langadapt episodes file, missing columns {', '.join(missing)}"
            )
        try:
            return [_episode(row) for row in reader]
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path} line {reader.line_num}: {error}") from None


def _episode(row: dict[str, str]) -> Episode:
    return Episode(
        adapter=row["adapter"],
        agent=row["agent"],
        seed=int(row["seed"]),
        phase=row["phase"],
        episode=int(row["episode"]),
        return_=float(row["return"]),
        length=int(row["length"]),
        success=row["success"] in ("1", "True", "true"),
        wall_time=float(row["wall_time"]),
        llm_calls=int(row["llm_calls"]),
        cache_hits=int(row["cache_hits"]),
        llm_fallbacks=int(row.get("llm_fallbacks") or 0),
    )


# ----------------------------------------------------------------------------- runs on disk


def fresh_run_dir(out_dir: Path, run_key: str) -> Path:
    """An empty ``runs/<run_key>/``: an unfinished earlier attempt is removed, but for a
    GRPO run's ``grpo/`` folder, whose checkpoint it resumes from."""
    inside(out_dir, "runs").mkdir(exist_ok=True)
    run_dir = inside(out_dir, Path("runs") / run_key)
    run_dir.mkdir(exist_ok=True)
    for entry in run_dir.iterdir():  # an unfinished earlier attempt: start this run afresh
        if entry.is_dir() and not entry.is_symlink() and entry.name != "grpo":
            shutil.rmtree(entry)
        elif entry.name != "grpo" or entry.is_symlink():
            entry.unlink()
    return run_dir


@contextmanager
def run_rows(run_dir: Path) -> Iterator[csv.DictWriter]:
    """A CSV writer of a fresh run's ``episodes.csv``, the header written; each row is on
    disk as soon as it is written (a crash keeps the episodes done)."""
    with open(run_dir / "episodes.csv", "x", newline="") as handle:  # "x": never a link
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        writer.writeheader()
        real_writerow = writer.writerow

        def writerow(row: dict[str, Any]) -> Any:
            written = real_writerow(row)
            handle.flush()
            return written

        writer.writerow = writerow  # type: ignore[method-assign]
        yield writer


def write_finished_run(
    out_dir: Path, run_key: str, rows: list[dict[str, Any]], summary: dict[str, Any]
) -> None:
    """Write a run whose rows arrived all at once (from a Ray worker): CSV, then done.json."""
    run_dir = fresh_run_dir(out_dir, run_key)
    with write_csv(out_dir, Path("runs") / run_key / "episodes.csv") as handle:
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    write_json(out_dir, Path("runs") / run_dir.name / "done.json", {**summary, "rows": len(rows)})


def write_failed_run(out_dir: Path, run_key: str, error: str) -> None:
    """Record a run that failed (its worker died more often than retried, or it raised)."""
    fresh_run_dir(out_dir, run_key)
    write_json(out_dir, Path("runs") / run_key / "failed.json", {"run": run_key, "error": error})


def _csv_rows(path: Path) -> int | None:
    """Complete rows of a per-run ``episodes.csv`` (None if missing or malformed)."""
    try:
        with open(bounded(path, MAX_EPISODES_BYTES), newline="") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error):  # too large: ResultsFolderError
        return None
    if not rows or tuple(rows[0]) != EPISODE_COLUMNS:
        return None
    if any(len(row) != len(EPISODE_COLUMNS) for row in rows[1:]):
        return None
    return len(rows) - 1


def read_run_record(path: Path) -> dict[str, Any] | None:
    """A run's ``done.json`` (or ``failed.json``), None if unreadable; LLM role counters of
    older versions (``cache_hits``, ``fallbacks``, ``seconds``) under today's names."""
    try:
        record = json.loads(bounded(path, MAX_RECORD_BYTES).read_text())
    except (OSError, ValueError):  # a ResultsFolderError is a ValueError: too large
        return None
    if not isinstance(record, dict):
        return None
    roles = record.get("llm_roles")
    if isinstance(roles, dict):
        record["llm_roles"] = {
            name: _current_names(stats) if isinstance(stats, dict) else stats
            for name, stats in roles.items()
        }
    if isinstance(record.get("agent_stats"), dict):
        record["agent_stats"] = _current_names(record["agent_stats"])
    return record


def _current_names(stats: dict[str, Any]) -> dict[str, Any]:
    renamed = dict(stats)
    for old, new in OLD_COUNTER_NAMES.items():
        if old in renamed and new not in renamed:
            renamed[new] = renamed.pop(old)
    return renamed


def finished_runs(out_dir: Path) -> dict[str, int]:
    """Runs that finished, with their number of episode rows: a ``done.json`` and an
    ``episodes.csv`` holding exactly the rows it records (a truncated file is unfinished)."""
    finished = {}
    for done_file in (out_dir / "runs").glob("*/done.json"):
        record = read_run_record(done_file)
        rows = _csv_rows(done_file.parent / "episodes.csv")
        if record is None or rows is None or rows == 0:
            continue
        if record.get("rows", rows) == rows:  # done.json of older versions has no "rows"
            finished[done_file.parent.name] = rows
    return finished


def failed_runs(out_dir: Path) -> dict[str, str]:
    """Runs recorded as failed, with their error."""
    failed = {}
    for path in (out_dir / "runs").glob("*/failed.json"):
        record = read_run_record(path) or {}
        failed[path.parent.name] = str(record.get("error", "unknown error"))
    return failed


# ----------------------------------------------------------------------------- checking


def check_results(out_dir: Path | str) -> dict[str, str]:
    """Check a results folder before it is summarised; returns the failed runs' errors.

    ``episodes.csv`` must hold, for every run that ``config.yaml`` names, exactly the rows
    its ``runs/<run>/done.json`` records; else :class:`ResultsFolderError` naming the runs
    and what to do (``--resume`` redoes unfinished runs and merges the file anew).
    """
    out_dir = Path(out_dir)
    config_file = out_dir / "config.yaml"
    if not config_file.is_file():
        raise ResultsFolderError(
            f"{out_dir} is not a langadapt results folder: expected config.yaml and episodes.csv"
        )
    config = load_config(config_file, data_only=True)
    resume = f"langadapt run {config_file} --resume"
    finished, failed = finished_runs(out_dir), failed_runs(out_dir)
    expected = [run.key for run in runs_of(config)]
    unfinished = [key for key in expected if key not in finished and key not in failed]
    if unfinished:
        raise ResultsFolderError(
            f"{out_dir}: interrupted — {listing(unfinished)} of {len(expected)} runs "
            f"unfinished; run with --resume: {resume}"
        )
    episodes_file = out_dir / "episodes.csv"
    if not episodes_file.is_file():
        raise ResultsFolderError(
            f"{out_dir}: interrupted — all runs finished but episodes.csv was not written; "
            f"run with --resume: {resume}"
        )
    counts = _rows_per_run(episodes_file)
    wrong = [
        f"{run.key} ({counts.get((run.adapter.name, run.agent.name, str(run.seed)), 0)} of "
        f"{finished[run.key]} rows)"
        for run in runs_of(config)
        if run.key in finished
        and counts.get((run.adapter.name, run.agent.name, str(run.seed)), 0) != finished[run.key]
    ]
    if wrong:
        raise ResultsFolderError(
            f"{episodes_file} does not match runs/: {listing(wrong)} — the file was cut or "
            f"edited; nothing was summarised. Rebuild it from runs/ with --resume: {resume}"
        )
    return {key: failed[key] for key in expected if key in failed}


def _rows_per_run(path: Path) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    try:
        with open(bounded(path, MAX_EPISODES_BYTES), newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            missing = [c for c in ("adapter", "agent", "seed") if c not in header]
            if missing:
                raise ResultsFolderError(
                    f"{path}: not a langadapt episodes file, missing columns {', '.join(missing)}"
                )
            where = [header.index(c) for c in ("adapter", "agent", "seed")]
            for row in reader:
                if len(row) != len(header):
                    raise ResultsFolderError(
                        f"{path} line {reader.line_num}: {len(row)} fields, expected "
                        f"{len(header)} — the file was cut or edited; rebuild it with --resume"
                    )
                key = (row[where[0]], row[where[1]], row[where[2]])
                counts[key] = counts.get(key, 0) + 1
    except (UnicodeDecodeError, csv.Error) as error:
        raise ResultsFolderError(f"{path}: not a readable CSV file ({error})") from None
    return counts


def listing(keys: list[str], most: int = 5) -> str:
    """``3 runs (a, b, c)``, at most ``most`` named."""
    shown = ", ".join(keys[:most])
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return f"{len(keys)} run{'s' if len(keys) != 1 else ''} ({shown}{more})"


def results_notes(out_dir: Path | str, failed: dict[str, str]) -> str:
    """Markdown lines for the summary: failed runs and LLM descriptions that were
    rule-language fallbacks (empty when there are none)."""
    lines = []
    fallbacks: dict[str, int] = {}
    with open(bounded(Path(out_dir) / "episodes.csv", MAX_EPISODES_BYTES), newline="") as handle:
        for row in csv.DictReader(handle):
            count = int(row.get("llm_fallbacks") or 0)
            if count:
                fallbacks[row["adapter"]] = fallbacks.get(row["adapter"], 0) + count
    for adapter, count in fallbacks.items():
        lines.append(
            f"- **{adapter}: {count} description{'s' if count != 1 else ''} came from the rule "
            "describer, not the LLM** (the LLM failed and `fallback` is on): its rows are not "
            "a pure LLM result."
        )
    for key, error in failed.items():
        lines.append(f"- **run {key} failed** and is not in the table: {error}")
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


# ----------------------------------------------------------------------------- merging


def merge_episodes(config: ExperimentConfig, out_dir: Path) -> Path:
    """Concatenate the runs' episode files in the experiment's order into ``episodes.csv``."""
    done = finished_runs(out_dir)
    with write_csv(out_dir, "episodes.csv") as out:
        writer = csv.writer(out)
        writer.writerow(EPISODE_COLUMNS)
        for run in runs_of(config):
            if run.key in done:
                with open(out_dir / "runs" / run.key / "episodes.csv", newline="") as handle:
                    rows = csv.reader(handle)
                    next(rows, None)
                    writer.writerows(rows)
    return out_dir / "episodes.csv"


def record_prerender(out_dir: Path, counters: dict[str, dict[str, float]]) -> None:
    """Append one prerender pass (what it cost each adapter) to ``prerender.json``."""
    path = inside(out_dir, "prerender.json")
    passes = json.loads(bounded(path, MAX_RECORD_BYTES).read_text()) if path.exists() else []
    keep = ("llm_calls", "llm_cache_hits", "llm_failures", "llm_seconds", "encoder_calls",
            "embedding_cache_hits")
    passes.append(
        {
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "adapters": {
                name: {key: stats.get(key, 0) for key in keep} for name, stats in counters.items()
            },
        }
    )
    write_json(out_dir, "prerender.json", passes)
