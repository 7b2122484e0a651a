"""The results folder: its layout, writing it safely, reading it back and checking it.

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

A folder is written safely:

- **Only inside itself.** An entry of the folder that is a symbolic link (``summary.md``,
  ``runs/``, ``runs/<run>/done.json``, ...) is refused with a :class:`ResultsFolderError`
  naming it, before anything is written: a link would send the writes (or ``--force``'s
  deletions) outside the folder. ``--force`` removes such a link itself, never what it
  points to, with the folder's other result files. The folder itself may be a link.
- **Whole files.** Every file but a running run's ``episodes.csv`` is written to a
  temporary file beside it and moved into place (``os.replace``): a crash or a full disk
  leaves the previous version, never half a file.
- **One writer.** ``run`` and ``report`` hold an exclusive lock (``fcntl.flock``) on
  ``.langadapt.lock``, which names the holder's PID and host; a second writer is refused
  with a one-line error naming them. The kernel drops the lock when its holder dies, so a
  killed run never blocks the next (where ``flock`` is unavailable, a lock whose PID is
  gone on this host is taken over).
- **A full disk is one line.** ``OSError`` while writing (no space, quota, read-only, I/O
  error, permission) becomes a :class:`ResultsFolderError` naming the folder and the
  error; finished runs are kept and ``--resume`` continues.
- **Old counter names.** ``done.json`` of older versions kept the LLM roles' counters as
  ``cache_hits``, ``fallbacks`` and ``seconds``; they are read as ``llm_cache_hits``,
  ``llm_fallbacks`` and ``llm_seconds`` (:func:`read_run_record`).

A crash loses at most the runs in flight; resuming keeps every finished run (a
``done.json`` whose ``episodes.csv`` has the rows it records) and redoes the others.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from .config import (
    AdapterSpec,
    AgentSpec,
    ConfigError,
    ExperimentConfig,
    changed_keys,
    load_config,
    load_yaml,
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
the evaluation that chose it). ``llm_calls``
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

LOCK_FILE = ".langadapt.lock"

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

WRITE_ERRORS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES,
     errno.EPERM}
)
"""``OSError`` numbers that mean "this folder cannot be written" (one line, not a traceback)."""


class ResultsFolderError(ValueError):
    """A results folder that cannot be used as it is; the message says what to do."""


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
    """The rows of an ``episodes.csv``; ValueError naming the file if it is not one."""
    with open(path, newline="") as handle:
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


# ----------------------------------------------------------------------------- writing safely


def inside(out_dir: Path, relative: str | Path) -> Path:
    """``out_dir / relative``, refusing when it or a folder on the way is a symbolic link
    (a write there would land outside the results folder)."""
    path = Path(out_dir)
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            raise ResultsFolderError(
                f"{path} is a symbolic link; a results folder is written only inside itself — "
                "remove the link (or pass --force to replace the folder's results)"
            )
    return path


def refuse_links(out_dir: Path) -> None:
    """Refuse a results folder any of whose result entries is a symbolic link."""
    for name in (*RESULT_FILES, LOCK_FILE, MARKER, "runs"):
        inside(out_dir, name)
    runs = out_dir / "runs"
    if runs.is_dir():
        for run_dir in runs.iterdir():
            inside(out_dir, Path("runs") / run_dir.name)
            if run_dir.is_dir():
                for name in RUN_FILES:
                    inside(out_dir, Path("runs") / run_dir.name / name)


@contextmanager
def replacing(out_dir: Path, relative: str | Path) -> Iterator[Path]:
    """A temporary path beside ``out_dir / relative`` to write; moved over the target when
    the block ends without an error (removed otherwise). The temporary name keeps the
    target's suffix, so plotting libraries pick the format from it."""
    target = inside(out_dir, relative)
    temporary = _new_file(target.parent, f".{target.name}.", f".tmp{target.suffix}")
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _new_file(folder: Path, prefix: str, suffix: str) -> Path:
    """A new empty file of a fresh name in ``folder`` (never an existing file or link),
    with the permissions an ordinary new file gets (``tempfile`` would make it private)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    while True:
        path = folder / f"{prefix}{secrets.token_hex(4)}{suffix}"
        try:
            os.close(os.open(path, flags, 0o666))
        except FileExistsError:
            continue
        return path


def write_text(out_dir: Path, relative: str | Path, text: str) -> None:
    with replacing(out_dir, relative) as temporary:
        temporary.write_text(text)


def write_json(out_dir: Path, relative: str | Path, data: Any) -> None:
    write_text(out_dir, relative, json.dumps(data, indent=2))


@contextmanager
def write_csv(out_dir: Path, relative: str | Path) -> Iterator[IO[str]]:
    """An open text file for a whole CSV file, moved into place when the block ends."""
    with replacing(out_dir, relative) as temporary, open(temporary, "w", newline="") as handle:
        yield handle


@contextmanager
def writing(out_dir: Path, again: str) -> Iterator[None]:
    """Turn an ``OSError`` that means the folder cannot be written (:data:`WRITE_ERRORS`:
    a full disk, a quota, a read-only or failing disk, no permission inside the folder)
    into one line naming the folder, the error and ``again`` (what to do next). Nested, the
    outermost block speaks (a report written by ``run`` says what ``run`` should do)."""
    depth = getattr(_writing, "depth", 0)
    _writing.depth = depth + 1
    try:
        yield
    except OSError as error:
        if depth or error.errno not in WRITE_ERRORS:
            raise
        if error.errno in (errno.EACCES, errno.EPERM) and not _within(error.filename, out_dir):
            raise  # a permission problem elsewhere (a model file, a cache) is not ours
        code = errno.errorcode.get(error.errno, str(error.errno))
        where = f" ({error.filename})" if error.filename else ""
        raise ResultsFolderError(
            f"{out_dir}: cannot write the results: {error.strerror or error} [{code}]{where}; "
            f"the finished runs are kept — {again}"
        ) from None
    finally:
        _writing.depth = depth


_writing = threading.local()


def _within(filename: Any, folder: Path) -> bool:
    if not filename:
        return True
    try:
        Path(os.path.abspath(filename)).relative_to(os.path.abspath(folder))
    except (TypeError, ValueError):
        return False
    return True


# ----------------------------------------------------------------------------- one writer


_held: dict[str, list[int]] = {}  # real path of a locked folder -> [lock file descriptor, depth]
_held_guard = threading.Lock()


@contextmanager
def folder_lock(out_dir: Path) -> Iterator[None]:
    """Hold the folder's exclusive lock for the block (re-entrant within one process); a
    :class:`ResultsFolderError` naming the holder if another process holds it."""
    key = os.path.realpath(out_dir)
    with _held_guard:
        if key in _held:
            _held[key][1] += 1
            descriptor = None
        else:
            descriptor = _acquire(Path(out_dir))
            _held[key] = [descriptor, 1]
    try:
        yield
    finally:
        with _held_guard:
            _held[key][1] -= 1
            if _held[key][1] == 0:
                os.close(_held.pop(key)[0])  # closing the file drops the lock


def _acquire(out_dir: Path) -> int:
    path = inside(out_dir, LOCK_FILE)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(path, flags, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(descriptor)
        os.close(descriptor)
        raise _in_use(out_dir, holder) from None
    except OSError:  # no flock on this file system: a holder that is alive on this host wins
        holder = _holder(descriptor)
        if holder is not None and _alive(*holder):
            os.close(descriptor)
            raise _in_use(out_dir, holder) from None
    record = f"{os.getpid()} {socket.gethostname()}\n".encode()
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, record, 0)
    return descriptor


def _holder(descriptor: int) -> tuple[int, str] | None:
    try:
        pid, host = os.pread(descriptor, 4096, 0).decode().split()[:2]
        return int(pid), host
    except (OSError, ValueError):
        return None


def _alive(pid: int, host: str) -> bool:
    if host != socket.gethostname():
        return True  # cannot tell: another machine's process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _in_use(out_dir: Path, holder: tuple[int, str] | None) -> ResultsFolderError:
    who = f"langadapt process {holder[0]} on {holder[1]}" if holder else "another process"
    return ResultsFolderError(
        f"{out_dir} is being written by {who} (lock {out_dir / LOCK_FILE}); wait for it to "
        "end (or stop it), then run again — two writers would overwrite each other's runs"
    )


# ----------------------------------------------------------------------------- preparing


def prepare_output(config: ExperimentConfig, out_dir: Path, resume: bool, force: bool) -> None:
    """Create the results folder, refusing to mix two different experiments in one.

    ``force`` replaces an earlier experiment's results, in a folder recognised as
    langadapt's own (:func:`is_results_folder`), and only what the runner writes
    (:func:`_remove_results`); a folder holding anything else is never touched. Call it
    holding :func:`folder_lock`, or before any other writer can run.
    """
    config_file = out_dir / "config.yaml"
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir} is a file; expected a results folder")
    refuse_foreign(out_dir)
    if force and is_results_folder(out_dir):
        _remove_results(out_dir)
    refuse_links(out_dir)
    if config_file.exists():
        try:
            existing = load_config(config_file)
        except ConfigError as error:
            _refuse_old_finetune(out_dir)
            reason = str(error).splitlines()[-1].strip()
            raise ConfigError(
                f"{config_file} cannot be read ({reason}); this folder's experiment is "
                "unknown: pass --force to replace its results, or choose another --out folder"
            ) from None
        if existing.fingerprint() != config.fingerprint() and not (
                resume and _adds_seeds(existing, config)):
            changes = "; ".join(changed_keys(existing, config))
            raise ConfigError(
                f"{out_dir} holds the results of a different experiment (changed: {changes}); "
                "choose another --out folder, or pass --force to replace them"
            )
        if not resume:
            raise ConfigError(
                f"{out_dir} already holds results of this experiment; pass --resume to "
                "continue it or --force to start again"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / MARKER).is_file():
        write_text(out_dir, MARKER, MARKER_TEXT)
    resolved = config.resolved()
    resolved["output"] = str(out_dir)
    write_text(out_dir, "config.yaml", yaml.safe_dump(resolved, sort_keys=False))


def _adds_seeds(existing: ExperimentConfig, config: ExperimentConfig) -> bool:
    """Whether ``config`` is ``existing`` with more seeds (every earlier seed kept): resuming
    then keeps the finished runs and trains the new seeds."""
    earlier = set(existing.seed_list)
    if not earlier < set(config.seed_list):
        return False
    return (existing.model_copy(update={"seeds": config.seeds}).fingerprint()
            == config.fingerprint())


def _old_finetune_config(out_dir: Path) -> bool:
    """Whether ``config.yaml`` is one the old ``langadapt finetune`` wrote (``grpo`` and
    ``lora`` at its top)."""
    config_file = out_dir / "config.yaml"
    if config_file.is_symlink() or not config_file.is_file():
        return False
    try:
        data = load_yaml(config_file.read_bytes().decode("utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError, ConfigError):
        return False
    return isinstance(data, dict) and {"grpo", "lora"} <= set(data)


def _refuse_old_finetune(out_dir: Path) -> None:
    """One line for a folder the old ``langadapt finetune`` wrote (``grpo`` and ``lora`` at
    the top of its ``config.yaml``, ``seed_<k>/`` folders)."""
    if _old_finetune_config(out_dir):
        raise ConfigError(
            f"{out_dir} holds results of the old `langadapt finetune` (grpo and lora settings "
            "at the top of config.yaml, seed_<k>/ folders); GRPO is now an agent (type: grpo) "
            "of an experiment, its files in runs/<run>/grpo/, so this folder cannot be "
            "resumed: choose another --out folder, or pass --force to replace its results "
            "(seed_<k>/adapter stays usable with llm_policy and finetune-export)")


def is_results_folder(out_dir: Path) -> bool:
    """Whether langadapt wrote ``out_dir``: it holds the :data:`MARKER` file the runner
    writes, or a ``config.yaml`` that is an experiment (or of the old ``langadapt
    finetune``). Only such a folder is emptied by ``--force``."""
    marker = out_dir / MARKER
    if marker.is_file() and not marker.is_symlink():
        return True
    config_file = out_dir / "config.yaml"
    if config_file.is_symlink() or not config_file.is_file():
        return False
    try:
        load_config(config_file)
    except ConfigError:
        return _old_finetune_config(out_dir)
    return True


def refuse_foreign(out_dir: Path) -> None:
    """Refuse a folder that holds files but is not a langadapt results folder
    (:func:`is_results_folder`), without suggesting ``--force``: it is someone else's."""
    if not out_dir.is_dir() or is_results_folder(out_dir):
        return
    if any(entry.name != LOCK_FILE for entry in out_dir.iterdir()):
        raise ConfigError(
            f"{out_dir} exists and is not a langadapt results folder (no {MARKER} file, no "
            "experiment config.yaml); its files are not langadapt's, so they are never "
            "replaced: choose another --out folder"
        )


def _remove_results(out_dir: Path) -> None:
    """Remove what the runner writes: the :data:`RESULT_FILES` and the run folders
    (``runs/<adapter>__<agent>__seed<k>``); other entries of the folder and of ``runs/``
    stay. A symbolic link is removed itself, never followed."""
    for name in RESULT_FILES:
        path = out_dir / name
        if path.is_symlink() or path.is_file():
            path.unlink()
    runs = out_dir / "runs"
    if runs.is_symlink():
        runs.unlink()
    elif runs.is_dir():
        for entry in runs.iterdir():
            if not RUN_KEY.fullmatch(entry.name):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)  # does not follow links inside the folder
            else:
                entry.unlink()
        if not any(runs.iterdir()):
            runs.rmdir()


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
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error):
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
        record = json.loads(path.read_text())
    except (OSError, ValueError):
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
    config = load_config(config_file)
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
        with open(path, newline="") as handle:
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
    with open(Path(out_dir) / "episodes.csv", newline="") as handle:
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
    passes = json.loads(path.read_text()) if path.exists() else []
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
