"""The results folder as a place: every file written through :func:`replacing` (inside the
folder, never through a symbolic link, whole, then moved into place) by the holder of
:func:`folder_lock`; every file read bounded (:func:`bounded`); a full disk or a bad folder is
one line (:class:`ResultsFolderError`, :class:`ConfigError`); :func:`prepare_output` creates,
checks or empties it. Reading a folder never imports what its ``config.yaml`` names. Layout,
resume and safety rules: ``docs/configuration.md``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import yaml

from .config import changed_keys, load_config, load_yaml
from .schema import ConfigError, ExperimentConfig

RESULT_FILES = ("config.yaml", "episodes.csv", "summary.csv", "summary.md",
                "learning_curves.png", "final_returns.png", "prerender.json",
                "search_summary.md", "rounds.csv", "best_so_far.png", "stopped.json")
"""What the runner writes at the top of a results folder (besides ``runs/``)."""
RUN_FILES = ("episodes.csv", "done.json", "failed.json")
MARKER = ".langadapt-results"
"""Marks a folder as written by ``langadapt run``: the only kind ``--force`` empties."""
MARKER_TEXT = "a langadapt results folder: `langadapt run --force` may replace its results\n"
LOCK_FILE = ".langadapt.lock"
RUN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*__[A-Za-z0-9][A-Za-z0-9.+_-]*__seed[0-9]+")
"""The name of a run folder, ``runs/<adapter>__<agent>__seed<k>`` (labels hold no ``__``)."""
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


def inside(out_dir: Path, relative: str | Path, again: str = "remove the link") -> Path:
    """``out_dir / relative``, refused when it or a folder on the way is a symbolic link
    (``again``: what the refusal says to do)."""
    path = Path(out_dir)
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            raise ResultsFolderError(
                f"{path} is a symbolic link; a results folder is written only inside itself — "
                f"{again}")
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


def refuse_links(out_dir: Path, again: str = "remove the link") -> None:
    """Refuse a results folder any of whose result entries is a symbolic link."""
    for name in (*RESULT_FILES, LOCK_FILE, MARKER, "runs"):
        inside(out_dir, name, again)
    if (out_dir / "runs").is_dir():
        for run_dir in (out_dir / "runs").iterdir():
            for name in ("", *(RUN_FILES if run_dir.is_dir() else ())):
                inside(out_dir, Path("runs") / run_dir.name / name, again)


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
    refuse_links(out_dir, "remove the link (or pass --force to replace the folder's results: "
                 "the link is removed, never what it points to)")
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


def refuse_inside_results(out_dir: Path, what: str) -> None:
    """Refuse an ``--out`` that is, or lies inside, a results or suite folder (``what``: what
    would be written there, for the message)."""
    for folder in [out_dir.resolve(), *out_dir.resolve().parents]:
        if is_results_folder(folder) or (folder / "suite.yaml").is_file():
            where = "a results folder" if folder == out_dir.resolve() else \
                f"inside a results folder ({folder})"
            raise ResultsFolderError(f"--out {out_dir} is {where}; {what} never writes into a "
                                     "results folder: choose another --out")


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
