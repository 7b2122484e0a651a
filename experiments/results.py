"""The results folder's contents: its runs (:class:`Run`), their rows (``episodes.csv``,
:class:`Episode`) and records (``done.json``, ``failed.json``), checked and merged. Files are
written and read through :mod:`.folders`. Layout and columns: ``docs/configuration.md``.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agents.checkpoints import Checkpoint, read_checkpoint
from .config import load_config
from .folders import ResultsFolderError, bounded, inside, replacing, write_csv, write_json
from .schema import AdapterSpec, AgentSpec, ExperimentConfig

EPISODE_COLUMNS = ("adapter", "agent", "seed", "phase", "episode", "return", "length", "success",
                   "wall_time", "llm_calls", "cache_hits", "llm_fallbacks")
"""Columns of ``episodes.csv`` (what they mean: ``docs/configuration.md``)."""
OLD_COUNTER_NAMES = {"cache_hits": "llm_cache_hits", "fallbacks": "llm_fallbacks",
                     "seconds": "llm_seconds"}
"""LLM role counters of older ``done.json`` files, by today's names."""
POLICY_FILES = {"final": "policy_final.safetensors", "best": "policy_best.safetensors"}
"""A run folder's kept policies (experiments.kept), by which one they are."""
CHECKPOINT_FILE = "checkpoint.safetensors"
"""An unfinished run's last checkpoint (agents.checkpoints), removed when the run ends."""
MAX_EPISODES_BYTES = 1_000_000_000
MAX_CHECKPOINT_BYTES = 4_000_000_000
MAX_RECORD_BYTES = 10_000_000


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
    return [Run(adapter, agent, seed)
            for adapter in config.adapters for agent in config.agents for seed in config.seed_list]


def find_run(config: ExperimentConfig, run_key: str) -> Run:
    for run in runs_of(config):
        if run.key == run_key:
            return run
    raise ValueError(f"run {run_key!r} is not a run of experiment {config.name!r}")


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


def _table(path: Path) -> list[list[str]]:
    """The rows of a CSV file of the folder (bounded); one line if it is not readable CSV."""
    try:
        with open(bounded(path, MAX_EPISODES_BYTES), newline="") as handle:
            return list(csv.reader(handle))
    except (UnicodeDecodeError, csv.Error) as error:
        raise ResultsFolderError(f"{path}: not a readable CSV file ({error})") from None


_TYPES = (str, str, int, str, int, float, int, lambda v: v in ("1", "True", "true"), float,
          int, int, lambda v: int(v or 0))


def read_episodes(path: Path) -> list[Episode]:
    """The rows of an ``episodes.csv``; a ValueError naming the file and line if it is not one."""
    header, *rows = _table(path) or [[]]
    missing = [c for c in EPISODE_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{path}: not a langadapt episodes file, missing columns "
                         f"{', '.join(missing)}")
    where = [header.index(c) for c in EPISODE_COLUMNS]
    for line, row in enumerate(rows, start=2):
        try:
            if len(row) != len(header):
                raise ValueError(f"{len(row)} fields, expected {len(header)}")
            rows[line - 2] = Episode(*(kind(row[i]) for kind, i in zip(_TYPES, where, strict=True)))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path} line {line}: {error}") from None
    return rows  # type: ignore[return-value]


SET_ASIDE = ".set-aside-"
"""Marks a file a resume set aside (a checkpoint that does not fit, the rows it came with):
kept in the run's folder when the run starts afresh, named in the warning."""

_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{8}\.tmp(\.[A-Za-z0-9]+)?")
"""What :func:`folders.replacing` names a file being written (left behind by a kill)."""

logger = logging.getLogger("langadapt.experiments")


def fresh_run_dir(out_dir: Path, run_key: str) -> Path:
    """An empty ``runs/<run_key>/`` (but a GRPO run's ``grpo/``, which it resumes from, and
    the files a resume set aside)."""
    inside(out_dir, "runs").mkdir(exist_ok=True)
    run_dir = inside(out_dir, Path("runs") / run_key)
    run_dir.mkdir(exist_ok=True)
    for entry in run_dir.iterdir():  # an unfinished earlier attempt: start this run afresh
        if entry.is_dir() and not entry.is_symlink() and entry.name != "grpo":
            shutil.rmtree(entry)
        elif (entry.name != "grpo" and SET_ASIDE not in entry.name) or entry.is_symlink():
            entry.unlink()
    return run_dir


def set_aside(out_dir: Path, run_key: str, reason: str,
              rows: bytes | None = None) -> None:
    """Rename the run's checkpoint (and write ``rows``, the run's ``episodes.csv`` as it
    was, beside it) with a :data:`SET_ASIDE` name, and warn in one line naming them."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    relative = Path("runs") / run_key
    kept = []
    checkpoint = inside(out_dir, relative / CHECKPOINT_FILE)
    if checkpoint.is_file():
        target = inside(out_dir, relative / f"{CHECKPOINT_FILE}{SET_ASIDE}{stamp}")
        checkpoint.replace(target)
        kept.append(target.name)
    csv_file = inside(out_dir, relative / "episodes.csv")
    if rows is not None or csv_file.is_file():
        name = f"episodes.csv{SET_ASIDE}{stamp}"
        if rows is None:
            csv_file.replace(inside(out_dir, relative / name))
        else:
            with replacing(out_dir, relative / name) as temporary:
                temporary.write_bytes(rows)
        kept.append(name)
    logger.warning("%s; run %s starts afresh (set aside in %s: %s)", reason, run_key,
                   out_dir / relative, ", ".join(kept))


def resumable(out_dir: Path, run_key: str, identity: dict[str, Any] | None = None
              ) -> Checkpoint | None:
    """The checkpoint an unfinished run goes on from: its ``checkpoint.safetensors`` when it
    reads back, was saved for ``identity`` (experiment, run, seed; an older one without
    identity is taken) and ``episodes.csv`` holds at least the rows it counts; None
    otherwise (the run starts afresh — a checkpoint that does not read back or fit is set
    aside with the rows, :func:`set_aside`). Temporary files a kill left are removed."""
    run_dir = out_dir / "runs" / run_key
    path, rows = run_dir / CHECKPOINT_FILE, run_dir / "episodes.csv"
    if run_dir.is_dir() and not run_dir.is_symlink():
        for entry in run_dir.iterdir():
            if _TEMPORARY.fullmatch(entry.name) and not entry.is_dir():
                entry.unlink()
    if any(p.is_symlink() or not p.is_file() for p in (path, rows)):
        return None
    try:
        checkpoint = read_checkpoint(path, MAX_CHECKPOINT_BYTES)
        written = len(_table(rows)) - 1
    except (ValueError, OSError) as error:
        set_aside(out_dir, run_key, str(error).splitlines()[0] or type(error).__name__)
        return None
    if identity is not None and checkpoint.identity not in (None, identity):
        set_aside(out_dir, run_key, f"{path} was saved for another run ({checkpoint.identity}"
                                    f"; this is {identity})")
        return None
    return checkpoint if written >= checkpoint.rows else None


@contextmanager
def run_rows(run_dir: Path, keep: int | None = None) -> Iterator[csv.DictWriter]:
    """A writer of a run's ``episodes.csv``, each row flushed as it is written: a fresh
    file, or with ``keep`` the first ``keep`` rows of the file there (a resumed run's)."""
    path = run_dir / "episodes.csv"
    if keep is not None:
        kept = _table(path)[: keep + 1]
        with write_csv(run_dir.parent.parent, Path("runs") / run_dir.name / "episodes.csv"
                       ) as handle:
            csv.writer(handle).writerows(kept)
    # "x": never a link; line-buffered: a crash keeps every row written
    with open(path, "x" if keep is None else "a", newline="", buffering=1) as handle:
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        if keep is None:
            writer.writeheader()
        yield writer


def write_finished_run(out_dir: Path, run_key: str, rows: list[dict[str, Any]],
                       summary: dict[str, Any]) -> None:
    """Write a run whose rows arrived all at once (from a Ray worker): CSV, its kept
    policies, then done.json."""
    fresh_run_dir(out_dir, run_key)
    with write_csv(out_dir, Path("runs") / run_key / "episodes.csv") as handle:
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    summary = dict(summary)
    write_policies(out_dir, run_key, summary.pop("policies", {}))
    write_json(out_dir, Path("runs") / run_key / "done.json", {**summary, "rows": len(rows)})


def write_policies(out_dir: Path, run_key: str, policies: dict[str, bytes]) -> None:
    """Write a run's kept policies into ``runs/<run_key>/`` (link-safe, atomic)."""
    for which, data in policies.items():
        with replacing(out_dir, Path("runs") / run_key / POLICY_FILES[which]) as temporary:
            temporary.write_bytes(data)


def write_failed_run(out_dir: Path, run_key: str, error: str) -> None:
    fresh_run_dir(out_dir, run_key)
    write_json(out_dir, Path("runs") / run_key / "failed.json", {"run": run_key, "error": error})


def read_run_record(path: Path) -> dict[str, Any] | None:
    """A run's ``done.json`` or ``failed.json`` (None if unreadable), with the counters of
    :data:`OLD_COUNTER_NAMES` under today's names."""
    try:
        record = json.loads(bounded(path, MAX_RECORD_BYTES).read_text())
    except (OSError, ValueError):  # a ResultsFolderError is a ValueError: too large
        return None
    if not isinstance(record, dict):
        return None
    stats = [*(record["llm_roles"].values() if isinstance(record.get("llm_roles"), dict)
               else ()), record.get("agent_stats")]
    for counters in (s for s in stats if isinstance(s, dict)):
        for old, new in OLD_COUNTER_NAMES.items():
            if old in counters and new not in counters:
                counters[new] = counters.pop(old)
    return record


def finished_runs(out_dir: Path) -> dict[str, int]:
    """Finished runs and their rows: a ``done.json`` whose ``episodes.csv`` holds exactly
    the rows it records (older versions record none)."""
    finished = {}
    for done_file in (out_dir / "runs").glob("*/done.json"):
        record, path = read_run_record(done_file), done_file.parent / "episodes.csv"
        if record is None or not path.is_file() or not bounded(path, MAX_EPISODES_BYTES):
            continue  # (too large: raised)
        try:
            with open(path, newline="") as handle:  # merged as they are: the runner's columns
                exact = tuple(next(csv.reader(handle), ())) == EPISODE_COLUMNS
            rows = len(read_episodes(path)) if exact else 0
        except (OSError, ValueError, csv.Error):
            continue
        if rows and record.get("rows", rows) == rows:
            finished[done_file.parent.name] = rows
    return finished


def failed_runs(out_dir: Path) -> dict[str, str]:
    return {path.parent.name: str((read_run_record(path) or {}).get("error", "unknown error"))
            for path in (out_dir / "runs").glob("*/failed.json")}


STOPPED_FILE = "stopped.json"
"""Written when a run's error stopped the experiment: that run, its error and the runs left
unfinished (kept for ``--resume``; the report summarises the finished ones)."""

NOT_FINISHED = "not finished: "
"""How :func:`check_results` marks the error of a run that a stop left unfinished."""


def write_stopped(out_dir: Path, run_key: str | None, error: str, left: list[str]) -> None:
    """Record that ``run_key``'s ``error`` stopped the experiment with ``left`` unfinished."""
    write_json(out_dir, STOPPED_FILE, {"run": run_key, "error": error, "unfinished": left})


def stopped_runs(out_dir: Path) -> dict[str, str]:
    """The runs a stop left unfinished (``stopped.json``), each with why (empty when none)."""
    record = read_run_record(out_dir / STOPPED_FILE) if (out_dir / STOPPED_FILE).is_file() \
        else None
    if record is None or not isinstance(record.get("unfinished"), list):
        return {}
    cause = record.get("run")
    return {str(key): NOT_FINISHED + (str(record.get("error")) if key == cause else
                                      f"the experiment stopped when run {cause} failed")
            for key in record["unfinished"]}


def listing(keys: list[str], most: int = 5) -> str:
    """``3 runs (a, b, c)``, at most ``most`` named."""
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return f"{len(keys)} run{'s' if len(keys) != 1 else ''} ({', '.join(keys[:most])}{more})"


def folder_config(out_dir: Path, *needs: str) -> ExperimentConfig:
    """The folder's ``config.yaml``, read as data; one line if it or one of ``needs`` is
    missing."""
    if not all((out_dir / name).is_file() for name in ("config.yaml", *needs)):
        raise ResultsFolderError(f"{out_dir} is not a langadapt results folder: expected "
                                 "config.yaml and episodes.csv")
    return load_config(out_dir / "config.yaml", data_only=True)


def check_results(out_dir: Path | str) -> dict[str, str]:
    """Refuse a folder whose ``episodes.csv`` lacks rows of its finished runs, or that has
    unfinished runs (naming them and the ``--resume`` that fixes it); the failed runs'
    errors."""
    out_dir = Path(out_dir)
    config = folder_config(out_dir)
    resume = f"langadapt run YOUR_EXPERIMENT.yaml --out {out_dir} --resume"  # never its copy
    finished, failed = finished_runs(out_dir), failed_runs(out_dir)
    failed = {**stopped_runs(out_dir), **failed}  # a stop's unfinished runs are named too
    expected = [run.key for run in runs_of(config)]
    unfinished = [key for key in expected if key not in finished and key not in failed]
    if unfinished:
        raise ResultsFolderError(f"{out_dir}: interrupted — {listing(unfinished)} of "
                                 f"{len(expected)} runs unfinished; run with --resume: {resume}")
    path = out_dir / "episodes.csv"
    if not path.is_file():
        raise ResultsFolderError(f"{out_dir}: interrupted — all runs finished but episodes.csv "
                                 f"was not written; run with --resume: {resume}")
    try:
        counts = Counter(f"{e.adapter}__{e.agent}__seed{e.seed}" for e in read_episodes(path))
    except ValueError as error:
        raise ResultsFolderError(f"{error} — the file was cut or edited; rebuild it with "
                                 "--resume") from None
    wrong = [f"{key} ({counts[key]} of {finished[key]} rows)" for key in expected
             if key in finished and counts[key] != finished[key]]
    if wrong:
        raise ResultsFolderError(
            f"{path} does not match runs/: {listing(wrong)} — the file was cut or edited; "
            f"nothing was summarised. Rebuild it from runs/ with --resume: {resume}")
    return {key: failed[key] for key in expected if key in failed and key not in finished}


def merge_episodes(config: ExperimentConfig, out_dir: Path) -> Path:
    """Concatenate the finished runs' rows in the experiment's order into ``episodes.csv``."""
    done = finished_runs(out_dir)
    with write_csv(out_dir, "episodes.csv") as out:
        writer = csv.writer(out)
        writer.writerow(EPISODE_COLUMNS)
        for run in runs_of(config):
            if run.key in done:
                writer.writerows(_table(out_dir / "runs" / run.key / "episodes.csv")[1:])
    return out_dir / "episodes.csv"


def record_prerender(out_dir: Path, counters: dict[str, dict[str, float]]) -> None:
    """Append one prerender pass (what it cost each adapter) to ``prerender.json``."""
    path = inside(out_dir, "prerender.json")
    passes = json.loads(bounded(path, MAX_RECORD_BYTES).read_text()) if path.exists() else []
    keep = ("llm_calls", "llm_cache_hits", "llm_failures", "llm_seconds", "encoder_calls",
            "embedding_cache_hits")
    passes.append({"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "adapters": {
        name: {key: stats.get(key, 0) for key in keep} for name, stats in counters.items()}})
    write_json(out_dir, "prerender.json", passes)


