"""Whether a path may hold the store's SQLite file (see :mod:`.store`), checked without
writing to it: a symbolic link, a directory or another program's database is refused."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

COLUMNS = ["key", "value", "meta", "created"]


class CacheError(ValueError):
    """A cache file cannot be used (a directory, a link, another program's database, an
    unexpected database error); a file that merely cannot be written is not an error."""


def refuse_foreign(db: sqlite3.Connection, path: Path, what: str) -> None:
    """CacheError when the database holds tables other than ``entries``, or an ``entries``
    table of other columns: another program's file, never written to."""
    tables = [row[0] for row in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    others = sorted(set(tables) - {"entries"})
    if others:
        raise CacheError(f"{what} {str(path)!r} is another program's SQLite database (tables "
                         f"{', '.join(others[:5])}); expected a langadapt cache (one 'entries' "
                         "table): choose another path")
    columns = [row[1] for row in db.execute("PRAGMA table_info(entries)")]
    if columns and columns != COLUMNS:
        raise CacheError(
            f"{what} {str(path)!r} has an 'entries' table with columns {columns}; expected "
            f"{COLUMNS} (another program's file? choose another path)")


def check_store_file(path: str | os.PathLike[str], what: str = "cache") -> None:
    """CacheError unless ``path`` is absent or a file a store may use: never a symbolic
    link or a directory, never another program's SQLite database (read-only look; a file
    that is not SQLite at all is the store's to move aside)."""
    path = Path(path).expanduser()
    if path.is_symlink():
        raise CacheError(f"{what} path {str(path)!r} is a symbolic link; expected a file of "
                         "its own (a link would write into the file it points to)")
    if path.is_dir():
        raise CacheError(f"{what} path {str(path)!r} is a directory; expected a file")
    if not path.is_file() or path.stat().st_size == 0:
        return
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"  # reads only: no -wal, no -shm
    try:
        with closing(sqlite3.connect(uri, uri=True)) as db:
            refuse_foreign(db, path, what)
    except sqlite3.DatabaseError:
        return
