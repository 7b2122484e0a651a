"""Writing a results folder safely (see :mod:`.results` for its layout).

- **Only inside itself.** A path of the folder on the way to which there is a symbolic link
  is refused with a :class:`ResultsFolderError` naming it (:func:`inside`), before anything
  is written: a link would send the writes outside the folder.
- **Whole files.** A file is written to a temporary file beside it and moved into place
  (``os.replace``): a crash or a full disk leaves the previous version, never half a file.
- **One writer.** ``run`` and ``report`` hold an exclusive lock (``fcntl.flock``) on
  :data:`LOCK_FILE`, which names the holder's PID and host; a second writer is refused
  with a one-line error naming them. The kernel drops the lock when its holder dies, so a
  killed run never blocks the next (where ``flock`` is unavailable, a lock whose PID is
  gone on this host is taken over).
- **Bounded reads.** A file of the folder is read only below a size (:func:`bounded`); a
  larger one is refused in one line naming it and the bound.
- **A full disk is one line.** ``OSError`` while writing (no space, quota, read-only, I/O
  error, permission) becomes a :class:`ResultsFolderError` naming the folder and the
  error (:func:`writing`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

LOCK_FILE = ".langadapt.lock"

WRITE_ERRORS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES,
     errno.EPERM}
)
"""``OSError`` numbers that mean "this folder cannot be written" (one line, not a traceback)."""


class ResultsFolderError(ValueError):
    """A results folder that cannot be used as it is; the message says what to do."""


MAX_EPISODES_BYTES = 1_000_000_000
"""Largest ``episodes.csv`` read (a run's or the merged one): about 15 million rows."""
MAX_RECORD_BYTES = 10_000_000
"""Largest JSON record read (``done.json``, ``failed.json``, ``prerender.json``)."""


def bounded(path: Path, most: int) -> Path:
    """``path``, refused with a :class:`ResultsFolderError` naming it when it holds more
    than ``most`` bytes (read it after this)."""
    size = Path(path).stat().st_size
    if size > most:
        raise ResultsFolderError(f"{path}: {size:,} bytes; expected at most {most:,} bytes "
                                 "(a file of a results folder langadapt writes is smaller)")
    return path


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
