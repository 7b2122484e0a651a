"""The one keyed store of LLM answers and embeddings: an in-memory LRU in front of an
optional SQLite file (first writer of a key wins); `check_store_file` says, without writing,
whether a path may hold that file. See docs/llm.md, "The cache"."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
    "meta TEXT NOT NULL, created TEXT NOT NULL)"
)
_CHUNK = 500  # keys per SELECT ... IN (...)
BUSY_TIMEOUT_S = 60.0
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


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


_UNWRITABLE = ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_FULL",
               "SQLITE_IOERR", "SQLITE_AUTH")


def _is_unwritable(error: BaseException) -> bool:
    if not isinstance(error, sqlite3.OperationalError):
        return False
    name = getattr(error, "sqlite_errorname", "")
    if name:
        return name.startswith(_UNWRITABLE)
    text = str(error).lower()
    return any(word in text for word in ("readonly", "read-only", "unable to open",
                                         "disk i/o", "full", "permission", "not authorized"))


def _is_corrupt(error: sqlite3.DatabaseError) -> bool:
    name = getattr(error, "sqlite_errorname", "")
    if name:
        return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB")
    text = str(error)
    return "malformed" in text or "not a database" in text


def _use_wal(db: sqlite3.Connection) -> None:
    """WAL mode; "database is locked" (two processes opening a new file at once: SQLite
    skips the busy handler) is retried until the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


class SQLiteStore:
    """Key -> value in memory (LRU of ``capacity``) and in the SQLite file ``path`` (or
    None); values (bytes or str) are stored as given. `open_store` shares one per file."""

    def __init__(self, path: str | os.PathLike[str] | None, capacity: int = 100_000,
                 what: str = "cache") -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity={capacity!r}: expected a positive int")
        self.path = None if path is None else Path(path).expanduser()
        self.capacity = capacity
        self.what = what
        self.file_hits = 0  # entries read from the file (not memory)
        self.read_only = False  # the file cannot be written: new entries stay in memory
        self.usable = True  # False: the file cannot be used at all (memory only)
        self._memory: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._inode: int | None = None
        self._forked = False  # set in a forked child: reopen the file before using it
        _STORES.add(self)
        if self.path is not None:
            check_store_file(self.path, what)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                self._give_up(error)
                return
            try:
                self._open()
            except sqlite3.DatabaseError as error:
                self._on_error(error)

    # ---- the file ------------------------------------------------------------------
    def _open(self) -> None:
        assert self.path is not None
        db = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
        )
        try:
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            refuse_foreign(db, self.path, self.what)  # before anything is written to it
            _use_wal(db)
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(_SCHEMA)
            db.execute("SELECT key FROM entries LIMIT 1").fetchall()
        except BaseException:
            db.close()
            raise
        self._db = db
        self._inode = os.stat(self.path).st_ino

    def _give_up(self, error: BaseException) -> None:
        """Run in memory only from now on (one warning naming the file)."""
        if self._db is not None:
            self._db.close()
            self._db = None
        self.usable = False
        logger.warning("%s %s cannot be used (%s); continuing without it: entries are kept in "
                       "memory only for the rest of the run", self.what, self.path, error)

    def _stop_writing(self, error: BaseException) -> None:
        """Read the file but write nothing more to it (one warning naming the file)."""
        self.read_only = True
        logger.warning("%s %s cannot be written (%s); using it read-only for the rest of the "
                       "run: new entries are kept in memory only", self.what, self.path, error)

    def _open_read_only(self, error: BaseException) -> None:
        """Reopen read-only after ``error``; memory only when it cannot be read either."""
        assert self.path is not None
        if self._db is not None:
            self._db.close()
            self._db = None
        if not self.path.is_file():
            self._give_up(error)
            return
        uri = self.path.resolve().as_uri()
        for query in ("mode=ro", "mode=ro&immutable=1"):  # immutable: no -shm can be made
            try:
                db = sqlite3.connect(f"{uri}?{query}", uri=True, timeout=BUSY_TIMEOUT_S,
                                     check_same_thread=False, isolation_level=None)
            except sqlite3.DatabaseError:
                continue
            try:
                columns = [row[1] for row in db.execute("PRAGMA table_info(entries)")]
                if columns == COLUMNS:
                    db.execute("SELECT key FROM entries LIMIT 1").fetchall()
                    self._db = db
                    self._stop_writing(error)
                    return
            except sqlite3.DatabaseError:
                pass
            db.close()
        self._give_up(error)

    def _recover(self, error: sqlite3.DatabaseError) -> None:
        """Move the corrupt file aside (unless another process already did) and reopen."""
        assert self.path is not None
        if self._db is not None:
            self._db.close()
            self._db = None
        try:
            same_file = self._inode is None or os.stat(self.path).st_ino == self._inode
        except FileNotFoundError:
            same_file = False
        if same_file and self.path.exists():
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            try:
                os.replace(self.path, aside)
                for suffix in ("-wal", "-shm"):
                    side = self.path.with_name(self.path.name + suffix)
                    if side.exists():
                        os.replace(side, aside.with_name(aside.name + suffix))
            except OSError as cannot:
                self._give_up(f"{error}; it could not be moved aside: {cannot}")
                return
            logger.warning(
                "%s %s is damaged (%s); moved it to %s and continue with a fresh file",
                self.what, self.path, error, aside,
            )
        try:
            self._open()
        except sqlite3.DatabaseError as again:
            if _is_unwritable(again):
                self._give_up(again)
                return
            raise CacheError(
                f"could not create a fresh {self.what} at {str(self.path)!r}: {again}"
            ) from again

    def _run(self, op: Callable[[sqlite3.Connection], Any], default: Any = None) -> Any:
        """``op(connection)`` (``default`` without a file), retried once after `_on_error`."""
        if self._forked:
            self._reopen_after_fork()
        if self._db is None:
            return default
        try:
            return op(self._db)
        except sqlite3.DatabaseError as error:
            self._on_error(error)  # e.g. the folder became read-only: no -shm file
            return default if self._db is None else op(self._db)

    def _write(self, op: Callable[[sqlite3.Connection], Any]) -> None:
        """``op(connection)`` for a write: skipped once read-only; refused: read-only from now."""
        if self._forked:
            self._reopen_after_fork()
        if self._db is None or self.read_only:
            return
        try:
            op(self._db)
        except sqlite3.DatabaseError as error:
            self._on_error(error, writing=True)
            if self._db is not None and not self.read_only:  # a fresh file after corruption
                self._write(op)

    def _on_error(self, error: sqlite3.DatabaseError, writing: bool = False) -> None:
        """Unwritable: read-only; corrupt: moved aside and replaced; else `CacheError`."""
        if _is_unwritable(error):
            self._stop_writing(error) if writing else self._open_read_only(error)
        elif _is_corrupt(error):
            self._recover(error)
        else:
            raise CacheError(f"{self.what} {str(self.path)!r}: {error}") from error

    # ---- reading -------------------------------------------------------------------
    def get_many(self, keys: Iterable[str], decode: Callable[[Any], Any] | None = None
                 ) -> dict[str, Any]:
        """The known entries among ``keys`` (memory, then the file); ``decode`` gives what memory
        holds, None for a value that fails its check (deleted, counted as missing)."""
        found: dict[str, Any] = {}
        with self._lock:
            memory = self._memory
            missing = []
            for key in dict.fromkeys(keys):
                value = memory.get(key)
                if value is None:
                    missing.append(key)
                else:
                    memory.move_to_end(key)
                    found[key] = value
            if missing and self._db is not None:
                rows = self._run(lambda db: _select(db, missing), default=[])
                bad = []
                for key, stored in rows:
                    value = stored if decode is None else decode(stored)
                    if value is None:
                        bad.append(key)
                        continue
                    found[key] = value
                    self._remember(key, value)
                    self.file_hits += 1
                if bad:
                    logger.warning("%s %s: %d stored value(s) failed their check; deleted",
                                   self.what, self.path, len(bad))
                    self._write(lambda db: db.executemany(
                        "DELETE FROM entries WHERE key = ?", [(k,) for k in bad]))
        return found

    def get(self, key: str) -> Any:
        return self.get_many([key]).get(key)

    # ---- writing -------------------------------------------------------------------
    def put_many(self, items: Iterable[tuple[str, Any, Any, dict[str, Any] | None]],
                 created: str | None = None) -> None:
        """Store ``(key, memory value, stored value, meta)`` items in one transaction."""
        stamp = created or utc_now()
        with self._lock:
            rows = []
            for key, value, stored, meta in items:
                self._remember(key, value)
                rows.append((key, stored, json.dumps(meta or {}, ensure_ascii=False,
                                                     sort_keys=True), stamp))
            if rows:
                self._write(lambda db: _insert(db, rows))

    def put(self, key: str, value: Any, meta: dict[str, Any] | None = None,
            created: str | None = None) -> None:
        """Store one value (bytes or str) as it is."""
        self.put_many([(key, value, value, meta)], created)

    def _remember(self, key: str, value: Any) -> None:
        memory = self._memory
        memory[key] = value
        memory.move_to_end(key)
        if len(memory) > self.capacity:
            memory.popitem(last=False)

    # ---- inspecting ----------------------------------------------------------------
    def __len__(self) -> int:
        """Entries in the file (in memory for a memory-only store)."""
        with self._lock:
            if self._db is None:
                return len(self._memory)
            count = self._run(lambda db: db.execute("SELECT COUNT(*) FROM entries")
                              .fetchone()[0])
            return len(self._memory) if count is None else int(count)

    @property
    def memory_size(self) -> int:
        return len(self._memory)

    def rows(self, after: int = 0) -> Iterator[tuple[str, Any, dict[str, Any], str]]:
        """Every stored ``(key, value, meta, created)`` after row ``after``, in order written."""
        if self._db is None:
            why = ("is memory-only (path=None)" if self.path is None
                   else f"could not use its file {str(self.path)!r}")
            raise CacheError(f"this {self.what} {why}; nothing is stored")
        with self._lock:
            rows = self._run(lambda db: db.execute(
                "SELECT key, value, meta, created FROM entries WHERE rowid > ? ORDER BY rowid",
                (after,)).fetchall(), default=[])
        for key, value, meta, created in rows:
            yield key, value, json.loads(meta), created

    def last_row(self) -> int:
        """The number of the last row written to the file (0 without one)."""
        with self._lock:
            return int(self._run(lambda db: db.execute(
                "SELECT COALESCE(MAX(rowid), 0) FROM entries").fetchone()[0], default=0))

    def insert_rows(self, rows: Iterable[tuple[str, Any, dict[str, Any], str]]) -> None:
        """Write rows of another store (`rows`) to the file; keys it has are kept."""
        rows = [(key, value, json.dumps(meta, ensure_ascii=False, sort_keys=True), created)
                for key, value, meta, created in rows]
        with self._lock:
            if rows:
                self._write(lambda db: _insert(db, rows))

    def adopt(self, old_files: Iterable[Path]) -> None:
        """Copy ``old_files`` (the previous layout) in and rename each to ``<name>.adopted``
        (docs/configuration.md)."""
        old_files = [old for old in old_files if old.is_file()]
        if old_files and (self._db is None or self.read_only):
            logger.warning("%s: ignoring the old cache files %s (%s cannot be written); their "
                           "entries are computed again", self.what,
                           ", ".join(map(str, old_files)), self.path)
            return
        for old in old_files:
            try:  # read-only: never creates a file another process has just adopted
                with closing(sqlite3.connect(f"{old.resolve().as_uri()}?mode=ro", uri=True)) as db:
                    rows = db.execute("SELECT key, value, meta, created FROM entries "
                                      "ORDER BY rowid").fetchall()
                self.insert_rows((k, v, json.loads(m), c) for k, v, m, c in rows)
                os.replace(old, old.with_name(old.name + ".adopted"))
            except (sqlite3.DatabaseError, OSError, ValueError) as error:
                logger.warning("%s: could not read the old cache file %s (%s); ignoring it, "
                               "its entries are computed again", self.what, old, error)
            else:
                logger.info("%s: copied the old cache file %s into %s (renamed it to "
                            "%s.adopted)", self.what, old, self.path, old.name)

    def _reopen_after_fork(self) -> None:
        """In a forked child: a connection of its own (never close the parent's)."""
        self._forked = False
        self._db = None
        if self.path is None or not self.usable:
            return
        try:
            if self.read_only:
                self._open_read_only(sqlite3.OperationalError("read-only before the fork"))
            else:
                self._open()
        except sqlite3.DatabaseError as error:
            self._give_up(error)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass


def _select(db: sqlite3.Connection, keys: list[str]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for start in range(0, len(keys), _CHUNK):
        chunk = keys[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        out.extend(db.execute(f"SELECT key, value FROM entries WHERE key IN ({marks})", chunk))
    return out


def _insert(db: sqlite3.Connection, rows: list[tuple[str, Any, str, str]]) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany("INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?)", rows)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


_STORES: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()
_OPEN: weakref.WeakValueDictionary[str, SQLiteStore] = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()


def open_store(path: str | os.PathLike[str] | None, capacity: int, what: str = "cache"
               ) -> SQLiteStore:
    """The process's store of ``path`` (memory of at least ``capacity``); None: a fresh
    memory-only store."""
    if path is None:
        return SQLiteStore(None, capacity, what)
    name = str(Path(path).expanduser().resolve())
    with _OPEN_LOCK:
        store = _OPEN.get(name)
        if store is None or (store._db is None and store.usable and not store._forked):
            store = _OPEN[name] = SQLiteStore(path, capacity, what)
        store.capacity = max(store.capacity, capacity)
        return store


def _after_fork_in_child() -> None:
    """Fresh locks (one held at the fork would never be released) and files reopened."""
    for store in list(_STORES):
        store._lock = threading.RLock()
        store._forked = store._db is not None


os.register_at_fork(after_in_child=_after_fork_in_child)
