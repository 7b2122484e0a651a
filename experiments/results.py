"""The results folder: its runs, its rows, checking it, preparing it, and writing it safely.

Contract: every file is written through :func:`replacing` (inside the folder, never through
a symbolic link, whole, then moved into place), by the holder of :func:`folder_lock`; every
file read is bounded (:func:`bounded`); a full disk or a bad folder is one line
(:class:`ResultsFolderError`, :class:`ConfigError`). Reading a folder never imports what its
``config.yaml`` names. Layout, resume and safety rules: ``docs/configuration.md``.
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
from collections import Counter
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

EPISODE_COLUMNS = ("adapter", "agent", "seed", "phase", "episode", "return", "length", "success",
                   "wall_time", "llm_calls", "cache_hits", "llm_fallbacks")
"""Columns of ``episodes.csv`` (what they mean: ``docs/configuration.md``)."""
RESULT_FILES = ("config.yaml", "episodes.csv", "summary.csv", "summary.md",
                "learning_curves.png", "final_returns.png", "prerender.json",
                "search_summary.md", "rounds.csv", "best_so_far.png")
"""What the runner writes at the top of a results folder (besides ``runs/``)."""
RUN_FILES = ("episodes.csv", "done.json", "failed.json")
MARKER = ".langadapt-results"
"""Marks a folder as written by ``langadapt run``: the only kind ``--force`` empties."""
MARKER_TEXT = "a langadapt results folder: `langadapt run --force` may replace its results\n"
LOCK_FILE = ".langadapt.lock"
RUN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*__[A-Za-z0-9][A-Za-z0-9.+_-]*__seed[0-9]+")
"""The name of a run folder, ``runs/<adapter>__<agent>__seed<k>`` (labels hold no ``__``)."""
OLD_COUNTER_NAMES = {"cache_hits": "llm_cache_hits", "fallbacks": "llm_fallbacks",
                     "seconds": "llm_seconds"}
"""LLM role counters of older ``done.json`` files, by today's names."""
MAX_EPISODES_BYTES = 1_000_000_000
MAX_RECORD_BYTES = 10_000_000
WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO,
                          errno.EACCES, errno.EPERM})
"""``OSError`` numbers that mean "this folder cannot be written" (one line, not a traceback)."""


class ResultsFolderError(ValueError):
    """A results folder that cannot be used as it is; the message says what to do."""


def bounded(path: Path, most: int) -> Path:
    """``path``, refused in one line when it holds more than ``most`` bytes."""
    size = Path(path).stat().st_size
    if size > most:
        raise ResultsFolderError(f"{path}: {size:,} bytes; expected at most {most:,} bytes "
                                 "(a file of a results folder langadapt writes is smaller)")
    return path


def inside(out_dir: Path, relative: str | Path) -> Path:
    """``out_dir / relative``, refused when it or a folder on the way is a symbolic link."""
    path = Path(out_dir)
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            raise ResultsFolderError(
                f"{path} is a symbolic link; a results folder is written only inside itself — "
                "remove the link (or pass --force to replace the folder's results)")
    return path


@contextmanager
def replacing(out_dir: Path, relative: str | Path) -> Iterator[Path]:
    """A new temporary path beside ``out_dir / relative`` (same suffix), moved over the
    target when the block ends without an error, removed otherwise."""
    target = inside(out_dir, relative)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    while True:  # a fresh name, an ordinary file's permissions (tempfile's are private)
        temporary = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp{target.suffix}"
        try:
            os.close(os.open(temporary, flags, 0o666))
            break
        except FileExistsError:
            continue
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


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


_writing = threading.local()


@contextmanager
def writing(out_dir: Path, again: str) -> Iterator[None]:
    """An ``OSError`` of :data:`WRITE_ERRORS` inside ``out_dir`` becomes one line naming the
    folder, the error and ``again`` (what to do next); nested, the outermost block speaks."""
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
            f"the finished runs are kept — {again}") from None
    finally:
        _writing.depth = depth


def _within(filename: Any, folder: Path) -> bool:
    where = os.path.abspath(os.fsdecode(filename or folder))
    return where == os.path.abspath(folder) or where.startswith(os.path.abspath(folder) + os.sep)


_held: dict[str, list[int]] = {}  # real path of a locked folder -> [lock file descriptor, depth]
_held_guard = threading.Lock()


@contextmanager
def folder_lock(out_dir: Path) -> Iterator[None]:
    """Hold the folder's exclusive ``flock`` for the block (re-entrant within a process);
    one line naming the holder if another process holds it."""
    key = os.path.realpath(out_dir)
    with _held_guard:
        if key in _held:
            _held[key][1] += 1
        else:
            _held[key] = [_acquire(Path(out_dir)), 1]
    try:
        yield
    finally:
        with _held_guard:
            _held[key][1] -= 1
            if _held[key][1] == 0:
                os.close(_held.pop(key)[0])  # closing the file drops the lock


def _acquire(out_dir: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(inside(out_dir, LOCK_FILE), flags, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:  # no flock on this file system: a live holder on this host wins
        holder = _holder(descriptor)
        if isinstance(error, BlockingIOError) or (holder is not None and _alive(*holder)):
            os.close(descriptor)
            who = f"langadapt process {holder[0]} on {holder[1]}" if holder else "another process"
            raise ResultsFolderError(
                f"{out_dir} is being written by {who} (lock {out_dir / LOCK_FILE}); wait for it "
                "to end (or stop it), then run again — two writers would overwrite each other's "
                "runs") from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
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
    except OSError as error:  # PermissionError: alive, another user's
        return not isinstance(error, ProcessLookupError)
    return True


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


def fresh_run_dir(out_dir: Path, run_key: str) -> Path:
    """An empty ``runs/<run_key>/`` (but a GRPO run's ``grpo/``, which it resumes from)."""
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
    """A writer of a fresh run's ``episodes.csv``, each row flushed as it is written."""
    # "x": never a link; line-buffered: a crash keeps every row written
    with open(run_dir / "episodes.csv", "x", newline="", buffering=1) as handle:
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        writer.writeheader()
        yield writer


def write_finished_run(out_dir: Path, run_key: str, rows: list[dict[str, Any]],
                       summary: dict[str, Any]) -> None:
    """Write a run whose rows arrived all at once (from a Ray worker): CSV, then done.json."""
    fresh_run_dir(out_dir, run_key)
    with write_csv(out_dir, Path("runs") / run_key / "episodes.csv") as handle:
        writer = csv.DictWriter(handle, fieldnames=EPISODE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    write_json(out_dir, Path("runs") / run_key / "done.json", {**summary, "rows": len(rows)})


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
    resume = f"langadapt run {out_dir / 'config.yaml'} --resume"
    finished, failed = finished_runs(out_dir), failed_runs(out_dir)
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
    return {key: failed[key] for key in expected if key in failed}


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


def refuse_links(out_dir: Path) -> None:
    """Refuse a results folder any of whose result entries is a symbolic link."""
    for name in (*RESULT_FILES, LOCK_FILE, MARKER, "runs"):
        inside(out_dir, name)
    if (out_dir / "runs").is_dir():
        for run_dir in (out_dir / "runs").iterdir():
            for name in ("", *(RUN_FILES if run_dir.is_dir() else ())):
                inside(out_dir, Path("runs") / run_dir.name / name)


def results_folder_of(path: Path) -> Path | None:
    """The results folder an experiment file lies in, if any (its marker, a ``config.yaml``
    beside ``episodes.csv`` or ``runs/``, or a suite's ``suite.yaml``)."""
    folder = Path(path).parent
    if (folder / MARKER).exists():
        return folder
    if path.name == "config.yaml" and any((folder / n).exists() for n in ("episodes.csv", "runs")):
        return folder
    if path.name == "suite.yaml" and any((d / MARKER).exists() for d in folder.glob("*/")):
        return folder
    return None


def unnamed_modules(config: ExperimentConfig, named: list[str]) -> list[str]:
    """The modules ``config`` would import that the command line's ``--import`` does not name."""
    wanted = [*config.imports]
    if ":" in config.environment.id:
        wanted.append(config.environment.id.partition(":")[0])
    return [name for name in dict.fromkeys(wanted) if name not in named]


def prepare_output(config: ExperimentConfig, out_dir: Path, resume: bool, force: bool) -> None:
    """Create the results folder, refusing another experiment's or links; ``force`` empties
    a langadapt folder of what the runner writes. Call it holding the lock, after
    :func:`refuse_foreign` (``run_experiment`` refuses a file or a foreign folder first)."""
    config_file = out_dir / "config.yaml"
    if force and is_results_folder(out_dir):
        _remove_results(out_dir)
    refuse_links(out_dir)
    if config_file.exists():
        try:
            existing = load_config(config_file, data_only=True)
        except ConfigError as error:
            if _old_finetune_config(out_dir):
                raise ConfigError(
                    f"{out_dir} holds results of the old `langadapt finetune` (grpo and lora "
                    "settings at the top of config.yaml, seed_<k>/ folders); GRPO is now an agent "
                    "(type: grpo) of an experiment, its files in runs/<run>/grpo/, so this folder "
                    "cannot be resumed: choose another --out folder, or pass --force to replace "
                    "its results (seed_<k>/adapter stays usable with llm_policy and "
                    "finetune-export)") from None
            reason = str(error).splitlines()[-1].strip()
            raise ConfigError(
                f"{config_file} cannot be read ({reason}); this folder's experiment is "
                "unknown: pass --force to replace its results, or choose another --out folder"
            ) from None
        more_seeds = (resume and set(existing.seed_list) < set(config.seed_list)
                      and existing.model_copy(update={"seeds": config.seeds}).fingerprint()
                      == config.fingerprint())  # resuming with more seeds keeps the others
        if existing.fingerprint() != config.fingerprint() and not more_seeds:
            raise ConfigError(
                f"{out_dir} holds the results of a different experiment (changed: "
                f"{'; '.join(changed_keys(existing, config))}); choose another --out folder, "
                "or pass --force to replace them")
        if not resume:
            raise ConfigError(f"{out_dir} already holds results of this experiment; pass "
                              "--resume to continue it or --force to start again")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / MARKER).is_file():
        write_text(out_dir, MARKER, MARKER_TEXT)
    resolved = config.resolved()
    resolved["output"] = str(out_dir)
    write_text(out_dir, "config.yaml", yaml.safe_dump(resolved, sort_keys=False))


def _old_finetune_config(out_dir: Path) -> bool:
    """Whether ``config.yaml`` is one the old ``langadapt finetune`` wrote."""
    config_file = out_dir / "config.yaml"
    if config_file.is_symlink() or not config_file.is_file():
        return False
    try:
        data = load_yaml(config_file.read_bytes().decode("utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError, ConfigError):
        return False
    return isinstance(data, dict) and {"grpo", "lora"} <= set(data)


def is_results_folder(out_dir: Path) -> bool:
    """Whether langadapt wrote ``out_dir`` (its marker, or an experiment ``config.yaml``)."""
    marker = out_dir / MARKER
    if marker.is_file() and not marker.is_symlink():
        return True
    config_file = out_dir / "config.yaml"
    if config_file.is_symlink() or not config_file.is_file():
        return False
    try:
        load_config(config_file, data_only=True)
    except ConfigError:
        return _old_finetune_config(out_dir)
    return True


def refuse_foreign(out_dir: Path) -> None:
    """Refuse a folder holding files that is not langadapt's, without offering ``--force``."""
    if not out_dir.is_dir() or is_results_folder(out_dir):
        return
    if any(entry.name != LOCK_FILE for entry in out_dir.iterdir()):
        raise ConfigError(
            f"{out_dir} exists and is not a langadapt results folder (no {MARKER} file, no "
            "experiment config.yaml); its files are not langadapt's, so they are never "
            "replaced: choose another --out folder")


def _remove_results(out_dir: Path) -> None:
    """Remove the :data:`RESULT_FILES` and run folders; a link is removed, never followed."""
    for name in RESULT_FILES:
        if (out_dir / name).is_symlink() or (out_dir / name).is_file():
            (out_dir / name).unlink()
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
