"""The embedded stores' SQLite plumbing: one file, worker threads, a versioned schema.

:class:`SQLiteFile` is what :class:`~._lessons.SQLiteLessonStore` and
:class:`~._conversations.SQLiteConversationStore` share; each names its
schema, its ``application_id``, the table it needs and its error class, and
writes its own statements.

Decisions:

* **Threads.** Every database call runs in a worker thread
  (``anyio.to_thread.run_sync``) under the store's own capacity limiter of
  :data:`MAX_THREADS` threads, so a store never blocks the event loop nor
  starves other ``to_thread`` users.
* **Connections.** A small pool of connections opened with
  ``check_same_thread=False``; a call borrows one for the length of one
  worker-thread job and gives it back, so a connection is only ever used by
  one thread at a time. At most :data:`MAX_THREADS` stay open while idle.
  This is safe for many concurrent runs in one process; across processes
  SQLite's own file locking serializes writers.
* **Journal.** WAL (``PRAGMA journal_mode=WAL``): readers never block the
  writer and the writer never blocks readers; ``busy_timeout_s`` is how long
  a writer waits for another writer (another process, say) before the call
  fails with the store's error (its ``transient_error``, when it has one: a
  busy, locked or full file may pass, and the run store's callers try again).
  A write refused for room (a full disk, ``RLIMIT_FSIZE``) first empties the
  WAL into the file (``wal_checkpoint(TRUNCATE)``), so a small write tried
  again can fit in the pages the file has.
* **Schema.** Versioned with ``PRAGMA user_version``; created or migrated on
  first use inside ``BEGIN IMMEDIATE`` (so two processes opening a new file at
  once do not race); new files get the store's ``application_id``. A file
  from a newer tether is refused. So is a SQLite file of anything else (other
  tables, another ``application_id``, a ``user_version`` without the store's
  table), before anything in it is changed: the WAL switch comes after.
* **Cancellation.** Every job runs with ``abandon_on_cancel=False``: a
  cancelled caller waits for its job to end, so no thread is ever left running
  on a connection nobody owns, and a started write completes (or rolls back)
  whole. Jobs are short, bounded by ``busy_timeout_s`` when locked.
* **Lifetime.** Opened lazily on first use. :meth:`SQLiteFile.aclose` closes
  every connection (one still in use closes when its job ends); a later call
  opens new ones, so a store may outlive a ``Runtime``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NoReturn, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from tether.providers import TetherError

_T = TypeVar("_T")

#: Worker threads one store uses at most (per event loop).
MAX_THREADS = 4
#: What :meth:`SQLiteFile._fresh` makes anew in each process (never pickled).
_LOCAL = frozenset(
    {"_lock", "_idle", "_generation", "_schema_ready", "_schema_lock", "_limiter_var"}
)


class SQLiteFile:
    """One SQLite file of a tether store (see the module docstring).

    A subclass sets the class attributes below and runs its statements with
    :meth:`_run` (``job(connection)`` in a worker thread; the connection is in
    autocommit mode, so a job that writes more than one row opens its own
    ``BEGIN IMMEDIATE`` transaction).
    """

    #: How errors name the store ("lesson store").
    kind: ClassVar[str]
    #: The class to suggest instead of ``":memory:"``.
    in_memory: ClassVar[str]
    error: ClassVar[type[TetherError]]
    #: The error for a fault that may pass (locked, busy, full); ``error`` if unset.
    transient_error: ClassVar[type[TetherError] | None] = None
    schema_version: ClassVar[int]
    #: ``migrations[v]`` takes a database from version ``v`` to ``v + 1``.
    migrations: ClassVar[Mapping[int, tuple[str, ...]]]
    #: What the store puts in its file (besides SQLite's own ``sqlite_*`` objects).
    objects: ClassVar[frozenset[str]]
    application_id: ClassVar[int]
    #: The table a file of this store must have, and its columns.
    table: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]
    #: ``PRAGMA synchronous`` (with WAL, ``NORMAL`` cannot corrupt the file; a
    #: power cut may lose the last commits, never a process crash).
    synchronous: ClassVar[str] = "NORMAL"

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0) -> None:
        self.path = os.fspath(path)
        name = type(self).__name__
        if not self.path or self.path == ":memory:" or self.path.startswith("file::memory:"):
            raise ValueError(
                f"{name} needs a file path; use {self.in_memory} for an in-memory store"
            )
        if not busy_timeout_s >= 0:
            raise ValueError(f"busy_timeout_s must be >= 0, got {busy_timeout_s!r}")
        self.busy_timeout_s = float(busy_timeout_s)
        self._fresh()

    def _fresh(self) -> None:
        """The process-local machinery: no connection, lock or limiter is ever pickled."""
        name = type(self).__name__
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        # Bumped by close(): a connection of an older generation is closed, not pooled.
        self._generation = 0
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        # The pages the file may have under this process's RLIMIT_FSIZE (None: no limit).
        self._pages: int | None = _UNKNOWN
        # One limiter per event loop: a store may be used by successive event loops.
        self._limiter_var: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
            f"tether.{name}.limiter.{id(self)}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # A store travels (to a Ray host, a child process) as its settings: the copy
    # opens its own connections to the same file when first used.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in _LOCAL}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._fresh()

    async def aclose(self) -> None:
        """Close the store's connections (a later call opens new ones)."""
        # Shielded: closing must happen even when the caller is being cancelled,
        # or the connections would leak (and warn) until garbage collection.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.close, limiter=self._limiter())

    def close(self) -> None:
        """Close the idle connections now (synchronous; see :meth:`aclose`)."""
        with self._lock:
            self._generation += 1
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # --- plumbing --------------------------------------------------------------------

    def _limiter(self) -> anyio.CapacityLimiter:
        try:
            return self._limiter_var.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(MAX_THREADS)
            self._limiter_var.set(limiter)
            return limiter

    async def _run(self, job: Callable[[sqlite3.Connection], _T], *, reserve: bool = False) -> _T:
        """``job(connection)`` in a worker thread; ``reserve``: it may use the pages kept
        back under a file-size limit (see :func:`_size_limit`)."""
        return await anyio.to_thread.run_sync(
            self._with_connection, job, reserve, abandon_on_cancel=False, limiter=self._limiter()
        )

    def _with_connection(
        self, job: Callable[[sqlite3.Connection], _T], reserve: bool = False
    ) -> _T:
        """In a worker thread: borrow a connection, run ``job``, give it back."""
        try:
            self._ensure_schema()
            conn, generation = self._borrow()
            healthy = False
            try:
                if (pages := self._pages) is not None:  # only under a file-size limit
                    kept = 0 if reserve else self._kept_pages(conn, pages)
                    conn.execute(f"PRAGMA max_page_count = {max(1, pages - kept)}").fetchall()
                result = job(conn)
                healthy = True
            finally:
                self._give_back(conn, generation, healthy)
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _NO_ROOM:
                self._make_room()
            raise self._translate(exc) from exc
        except UnicodeDecodeError as exc:
            # sqlite3 decodes SQLite's own error text; a corrupt schema puts the
            # file's garbage bytes in it, and the decode fails before any sqlite3.Error.
            said = exc.object[:200].decode("utf-8", "replace")
            raise self.error(
                f"{self.kind} {self.path!r} is not a usable SQLite database: the file is "
                f"corrupt ({said})"
            ) from exc
        return result

    def _kept_pages(self, conn: sqlite3.Connection, pages: int) -> int:
        """Under a file-size limit of ``pages``: how many an ordinary write must leave
        for the ``reserve=True`` ones (none here; the run store keeps some)."""
        return 0

    def _make_room(self) -> None:
        """After a write refused for room (a full disk, a file-size limit): move the WAL
        into the file and empty it, so that a retried write that needs only pages the file
        already has (a small end, a replaced row) can fit. Best effort."""
        try:
            conn = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        except sqlite3.Error:
            return
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:
            pass
        finally:
            conn.close()

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: autocommit; a job manages its own transactions.
        # timeout= is SQLite's busy timeout (sqlite3_busy_timeout, PRAGMA busy_timeout).
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            if self._pages is _UNKNOWN:
                self._pages = _size_limit(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _borrow(self) -> tuple[sqlite3.Connection, int]:
        with self._lock:
            generation = self._generation
            if self._idle:
                return self._idle.pop(), generation
        return self._open(), generation

    def _give_back(self, conn: sqlite3.Connection, generation: int, healthy: bool) -> None:
        if healthy and not conn.in_transaction:
            with self._lock:
                if generation == self._generation and len(self._idle) < MAX_THREADS:
                    self._idle.append(conn)
                    return
        conn.close()

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if self._schema_ready:
                return
            conn = self._open()
            try:
                self._set_up(conn)
            finally:
                conn.close()
            self._schema_ready = True

    def _set_up(self, conn: sqlite3.Connection) -> None:
        # Reads only, until the file is known to be ours (or new): a foreign file is
        # refused before anything in it changes (no WAL switch, no -wal/-shm files).
        version = self._check_ours(conn)  # also reads the header: fails on a non-database
        if version < self.schema_version:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = self._check_ours(conn)  # another process may have got here first
                if version == 0:
                    conn.execute(f"PRAGMA application_id = {self.application_id}")
                while version < self.schema_version:
                    for statement in self.migrations[version]:
                        conn.execute(statement)
                    version += 1
                    conn.execute(f"PRAGMA user_version = {version}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        _enable_wal(conn, self.busy_timeout_s)

    def _check_ours(self, conn: sqlite3.Connection) -> int:
        """The schema version of a new file or one of this store's; the error otherwise.

        Ours: an ``application_id`` of 0 (files from before it was set) or the
        store's, no schema objects but the store's, and either ``user_version``
        0 with no objects at all (a new file) or a known ``user_version`` with
        the store's table and columns.
        """
        version = _user_version(conn)
        application_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        names = [
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite!_%' ESCAPE '!' "
                "ORDER BY name"
            )
        ]
        others = [name for name in names if name not in self.objects]
        if application_id not in (0, self.application_id):
            self._refuse_foreign(f"its application_id {application_id} is another program's")
        if others:
            listed = ", ".join(repr(name) for name in others[:5])
            more = f" and {len(others) - 5} more" if len(others) > 5 else ""
            self._refuse_foreign(f"it holds {listed}{more}")
        if version > self.schema_version:
            raise self.error(
                f"{self.kind} {self.path!r} has schema version {version}; this version of "
                f"tether supports up to {self.schema_version} (was it written by a newer tether?)"
            )
        if version < 0:
            self._refuse_foreign(f"its user_version {version} is no schema version of tether's")
        if version == 0:
            if names:
                self._refuse_foreign(
                    f"it holds {', '.join(map(repr, names))} but no schema version"
                )
            return version
        have = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({self.table})")}
        missing = [c for c in self.columns if c not in have]
        if missing:
            table = self.table
            what = f"no {table} table" if not have else f"a {table} table without {missing}"
            self._refuse_foreign(f"it has user_version {version} but {what}")
        return version

    def _refuse_foreign(self, why: str) -> NoReturn:
        raise self.error(
            f"{self.kind} {self.path!r} is not a tether {self.kind}: {why}. It was left "
            f"untouched; give {type(self).__name__} a new file or one that tether created"
        )

    def _translate(self, exc: sqlite3.Error) -> TetherError:
        text, kind = str(exc), self.kind
        lowered = text.lower()
        passing = self.transient_error or self.error
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in lowered or "busy" in lowered):
            return passing(
                f"{kind} {self.path!r} is locked: another connection held it for "
                f"longer than the busy timeout ({self.busy_timeout_s:g} s) ({text})"
            )
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _PASSING:
            return passing(f"{kind} {self.path!r} could not be written: {text}")
        if "not a database" in lowered or "malformed" in lowered or "corrupt" in lowered:
            return self.error(
                f"{kind} {self.path!r} is not a usable SQLite database: the file is "
                f"corrupt or of another kind ({text})"
            )
        if "unable to open" in lowered or "readonly" in lowered or "read-only" in lowered:
            return self.error(
                f"cannot open {kind} {self.path!r}: check that the directory exists "
                f"and the file is readable and writable ({text})"
            )
        return self.error(f"{kind} {self.path!r} failed: {text}")


#: SQLite's primary result codes of faults that may pass: SQLITE_BUSY, SQLITE_LOCKED,
#: SQLITE_IOERR (a write refused, e.g. past RLIMIT_FSIZE), SQLITE_FULL.
_PASSING = frozenset({5, 6, 10, 13})
#: Those of them that say a write found no room: SQLITE_IOERR, SQLITE_FULL.
_NO_ROOM = frozenset({10, 13})


def _size_limit(conn: sqlite3.Connection) -> int | None:
    """The pages a file may have under this process's ``RLIMIT_FSIZE``; ``None``: no limit.

    Under such a limit (a quota, a test's full disk) the file stops growing at a
    page count SQLite itself enforces (``max_page_count``), so that a write refused
    for room fails cleanly and the WAL can always be moved into the file; and a
    store keeps pages back (``_kept_pages``) for the writes that may use them
    (``_run(reserve=True)``: the run store's ends and claims), so that a run whose
    rounds found no room can still record its end."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY:
        return None
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return max(1, soft // page - 1)


#: ``SQLiteFile._pages`` before the first connection read the limit.
_UNKNOWN = -1


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _enable_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Persistent in the file; a no-op once set. It needs a moment of exclusive access,
    and SQLite may refuse it at once ("database is locked") rather than wait in its busy
    handler while another connection opens the same new file: so it is tried again,
    for up to the busy timeout (this runs in a worker thread)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


__all__ = ["MAX_THREADS", "SQLiteFile"]
