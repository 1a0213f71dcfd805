"""Lessons: what a run learned from a failed judgement, recalled by later runs (DESIGN §8).

A lesson is the question plus the judge's feedback (the shortfall reasons).
The failed answer is kept only when there is no feedback; the caller decides
what to pass, the store keeps what it is given. Recall is scoped (by agent
name unless told otherwise), newest first by ``(created_at, id)``, at most a
fixed count.

Two stores ship: :class:`InMemoryLessonStore` (tests; no threads) and
:class:`SQLiteLessonStore` (the embedded store; standard-library ``sqlite3``).
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import NoReturn, Protocol, TypeVar, runtime_checkable

import anyio
import anyio.lowlevel
import anyio.to_thread
import attrs

from tether.providers import TetherError

_T = TypeVar("_T")

#: The longest a question, feedback or answer gets inside :meth:`Lesson.as_prompt`.
PROMPT_FIELD_CHARS = 2000


@attrs.frozen(kw_only=True)
class Lesson:
    """One stored lesson.

    ``id`` is time-ordered and, within a process, strictly increasing in the
    order lessons were added, so ``(created_at, id)`` orders insertion even
    when two lessons share a ``created_at``.
    """

    id: str
    scope: str
    question: str
    #: The judge's feedback (the shortfall reasons), if it gave any.
    feedback: str | None
    #: The failed answer; stored only when there is no feedback (the caller's choice).
    answer: str | None
    #: Unix time.
    created_at: float
    run_id: str | None = None

    def as_prompt(self) -> str:
        """Short text for a later run's input: the question and the feedback.

        The failed answer appears only when there is no feedback. Long fields
        are cut to :data:`PROMPT_FIELD_CHARS` characters.
        """
        lines = [f"Earlier question: {_cut(self.question)}"]
        if self.feedback:
            lines.append(f"Reviewer feedback: {_cut(self.feedback)}")
        elif self.answer:
            lines.append(f"Rejected answer: {_cut(self.answer)}")
        else:
            lines.append("The answer to it was rejected.")
        return "\n".join(lines)


def _cut(text: str) -> str:
    text = text.strip()
    if len(text) <= PROMPT_FIELD_CHARS:
        return text
    return text[: PROMPT_FIELD_CHARS - 1].rstrip() + "…"


@runtime_checkable
class LessonStore(Protocol):
    """Where lessons are kept between runs."""

    async def add(
        self,
        *,
        scope: str,
        question: str,
        feedback: str | None,
        answer: str | None = None,
        run_id: str | None = None,
    ) -> Lesson:
        """Store a lesson and return it."""
        ...

    async def recall(self, scope: str, limit: int) -> list[Lesson]:
        """At most ``limit`` lessons of ``scope``, newest first by ``(created_at, id)``."""
        ...

    async def aclose(self) -> None:
        """Release the store's resources (a later call may reopen them)."""
        ...


class LessonStoreError(TetherError):
    """The lesson store could not be read or written."""


# --- ids ---------------------------------------------------------------------------

_id_lock = threading.Lock()
_last_ns = 0


def new_lesson_id() -> str:
    """A time-ordered id: 20 digits of nanoseconds (strictly increasing in this
    process, even when the clock stalls or steps back) and 8 random hex digits
    that keep ids of different processes apart."""
    global _last_ns
    with _id_lock:
        _last_ns = max(time.time_ns(), _last_ns + 1)
        ns = _last_ns
    return f"{ns:020d}-{secrets.token_hex(4)}"


def _make_lesson(
    *,
    scope: str,
    question: str,
    feedback: str | None,
    answer: str | None,
    run_id: str | None,
    clock: Callable[[], float],
) -> Lesson:
    if not scope:
        raise ValueError("a lesson needs a non-empty scope")
    return Lesson(
        id=new_lesson_id(),
        scope=scope,
        question=question,
        feedback=feedback,
        answer=answer,
        created_at=float(clock()),
        run_id=run_id,
    )


def _check_limit(limit: int) -> None:
    if limit < 0:
        raise ValueError(f"recall limit must be >= 0, got {limit!r}")


def _order_key(lesson: Lesson) -> tuple[float, str]:
    return (lesson.created_at, lesson.id)


# --- in memory ---------------------------------------------------------------------


class InMemoryLessonStore:
    """A lesson store in a dict, for tests. No threads, nothing to close.

    ``clock`` (unix seconds) stamps ``created_at``; tests may fix it.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._by_scope: dict[str, list[Lesson]] = {}

    async def add(
        self,
        *,
        scope: str,
        question: str,
        feedback: str | None,
        answer: str | None = None,
        run_id: str | None = None,
    ) -> Lesson:
        await anyio.lowlevel.checkpoint()
        lesson = _make_lesson(
            scope=scope,
            question=question,
            feedback=feedback,
            answer=answer,
            run_id=run_id,
            clock=self._clock,
        )
        self._by_scope.setdefault(scope, []).append(lesson)
        return lesson

    async def recall(self, scope: str, limit: int) -> list[Lesson]:
        _check_limit(limit)
        await anyio.lowlevel.checkpoint()
        lessons = self._by_scope.get(scope, [])
        return sorted(lessons, key=_order_key, reverse=True)[:limit]

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        count = sum(len(v) for v in self._by_scope.values())
        return f"InMemoryLessonStore({count} lessons)"


# --- SQLite ------------------------------------------------------------------------

#: The schema version this code writes (``PRAGMA user_version``).
SCHEMA_VERSION = 1

_SCHEMA_V1 = (
    """
    CREATE TABLE IF NOT EXISTS lessons (
        id          TEXT PRIMARY KEY,
        scope       TEXT NOT NULL,
        question    TEXT NOT NULL,
        feedback    TEXT,
        answer      TEXT,
        created_at  REAL NOT NULL,
        run_id      TEXT
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS lessons_recall
        ON lessons (scope, created_at DESC, id DESC)
    """,
)

#: What tether puts in a lessons file (besides SQLite's own ``sqlite_*`` objects).
_OUR_OBJECTS = frozenset({"lessons", "lessons_recall"})

#: ``PRAGMA application_id`` of the files tether creates ("TthL").
APPLICATION_ID = 0x5474684C

#: ``_MIGRATIONS[v]`` takes a database from version ``v`` to ``v + 1``.
_MIGRATIONS: dict[int, tuple[str, ...]] = {0: _SCHEMA_V1}

_COLUMNS = "id, scope, question, feedback, answer, created_at, run_id"

#: Worker threads one store uses at most (per event loop).
MAX_THREADS = 4


class SQLiteLessonStore:
    """The embedded lesson store: one SQLite file, standard-library ``sqlite3``.

    Every database call runs in a worker thread (``anyio.to_thread.run_sync``)
    under the store's own capacity limiter of :data:`MAX_THREADS` threads, so
    lessons never block the event loop nor starve other ``to_thread`` users.

    Decisions:

    * **Connections.** A small pool of connections opened with
      ``check_same_thread=False``; a call borrows one for the length of one
      worker-thread job and gives it back, so a connection is only ever used
      by one thread at a time. At most :data:`MAX_THREADS` stay open while
      idle. This is safe for many concurrent runs in one process; across
      processes SQLite's own file locking serializes writers.
    * **Journal.** WAL (``PRAGMA journal_mode=WAL``, ``synchronous=NORMAL``):
      readers never block the writer and the writer never blocks readers;
      ``busy_timeout_s`` is how long a writer waits for another writer
      (another process, say) before the call fails with
      :class:`LessonStoreError`.
    * **Schema.** Versioned with ``PRAGMA user_version``; created or migrated on
      first use inside ``BEGIN IMMEDIATE`` (so two processes opening a new file
      at once do not race); new files get :data:`APPLICATION_ID`. A file from a
      newer tether is refused. So is a SQLite file of anything else (other
      tables, another ``application_id``, a ``user_version`` without tether's
      table), before anything in it is changed: the WAL switch comes after.
    * **Cancellation.** Every job runs with ``abandon_on_cancel=False``: a
      cancelled caller waits for its job to end, so no thread is ever left
      running on a connection nobody owns, and a started write completes. Jobs
      are short: one statement, bounded by ``busy_timeout_s`` when locked.
    * **Lifetime.** Opened lazily on first use. :meth:`aclose` closes every
      connection (one still in use closes when its job ends); a later call
      opens new ones, so a store may outlive a ``Runtime``.

    ``path`` must name a file: ``":memory:"`` would give every pooled
    connection its own empty database (use :class:`InMemoryLessonStore`).
    ``clock`` (unix seconds) stamps ``created_at``; tests may fix it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = os.fspath(path)
        if not self.path or self.path == ":memory:" or self.path.startswith("file::memory:"):
            raise ValueError(
                "SQLiteLessonStore needs a file path; "
                "use InMemoryLessonStore for an in-memory store"
            )
        if not busy_timeout_s >= 0:
            raise ValueError(f"busy_timeout_s must be >= 0, got {busy_timeout_s!r}")
        self.busy_timeout_s = float(busy_timeout_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        # Bumped by close(): a connection of an older generation is closed, not pooled.
        self._generation = 0
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        # One limiter per event loop: a store may be used by successive event loops.
        self._limiter_var: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
            f"tether.SQLiteLessonStore.limiter.{id(self)}"
        )

    def __repr__(self) -> str:
        return f"SQLiteLessonStore({self.path!r})"

    # --- the async API ---------------------------------------------------------------

    async def add(
        self,
        *,
        scope: str,
        question: str,
        feedback: str | None,
        answer: str | None = None,
        run_id: str | None = None,
    ) -> Lesson:
        lesson = _make_lesson(
            scope=scope,
            question=question,
            feedback=feedback,
            answer=answer,
            run_id=run_id,
            clock=self._clock,
        )
        await self._run(lambda conn: self._insert(conn, lesson))
        return lesson

    async def recall(self, scope: str, limit: int) -> list[Lesson]:
        _check_limit(limit)
        if limit == 0:
            await anyio.lowlevel.checkpoint()
            return []
        return await self._run(lambda conn: self._select(conn, scope, limit))

    async def aclose(self) -> None:
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

    async def _run(self, job: Callable[[sqlite3.Connection], _T]) -> _T:
        return await anyio.to_thread.run_sync(
            self._with_connection, job, abandon_on_cancel=False, limiter=self._limiter()
        )

    def _with_connection(self, job: Callable[[sqlite3.Connection], _T]) -> _T:
        """In a worker thread: borrow a connection, run ``job``, give it back."""
        try:
            self._ensure_schema()
            conn, generation = self._borrow()
            healthy = False
            try:
                result = job(conn)
                healthy = True
            finally:
                self._give_back(conn, generation, healthy)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        return result

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: autocommit; each INSERT is its own transaction and
        # the schema set-up manages its own with BEGIN IMMEDIATE.
        # timeout= is SQLite's busy timeout (sqlite3_busy_timeout, PRAGMA busy_timeout).
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            # With WAL, NORMAL cannot corrupt the file; a power cut may lose the
            # last lessons, which is acceptable for lessons and saves an fsync per add.
            conn.execute("PRAGMA synchronous = NORMAL")
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
        if version < SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = self._check_ours(conn)  # another process may have got here first
                if version == 0:
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                while version < SCHEMA_VERSION:
                    for statement in _MIGRATIONS[version]:
                        conn.execute(statement)
                    version += 1
                    conn.execute(f"PRAGMA user_version = {version}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        _enable_wal(conn)

    def _check_ours(self, conn: sqlite3.Connection) -> int:
        """The schema version of a new or tether file; :class:`LessonStoreError` otherwise.

        Ours: an ``application_id`` of 0 (files from before it was set) or
        :data:`APPLICATION_ID`, no schema objects but tether's, and either
        ``user_version`` 0 with no objects at all (a new file) or a known
        ``user_version`` with a ``lessons`` table of tether's columns.
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
        others = [name for name in names if name not in _OUR_OBJECTS]
        if application_id not in (0, APPLICATION_ID):
            self._refuse_foreign(f"its application_id {application_id} is another program's")
        if others:
            listed = ", ".join(repr(name) for name in others[:5])
            more = f" and {len(others) - 5} more" if len(others) > 5 else ""
            self._refuse_foreign(f"it holds {listed}{more}")
        if version > SCHEMA_VERSION:
            raise LessonStoreError(
                f"lesson store {self.path!r} has schema version {version}; this version of "
                f"tether supports up to {SCHEMA_VERSION} (was it written by a newer tether?)"
            )
        if version < 0:
            self._refuse_foreign(f"its user_version {version} is no schema version of tether's")
        if version == 0:
            if names:
                self._refuse_foreign(
                    f"it holds {', '.join(map(repr, names))} but no schema version"
                )
            return version
        columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(lessons)")}
        missing = [c for c in _COLUMNS.split(", ") if c not in columns]
        if missing:
            what = "no lessons table" if not columns else f"a lessons table without {missing}"
            self._refuse_foreign(f"it has user_version {version} but {what}")
        return version

    def _refuse_foreign(self, why: str) -> NoReturn:
        raise LessonStoreError(
            f"lesson store {self.path!r} is not a tether lesson store: {why}. It was left "
            "untouched; give SQLiteLessonStore a new file or one that tether created"
        )

    @staticmethod
    def _insert(conn: sqlite3.Connection, lesson: Lesson) -> None:
        conn.execute(
            f"INSERT INTO lessons ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                lesson.id,
                lesson.scope,
                lesson.question,
                lesson.feedback,
                lesson.answer,
                lesson.created_at,
                lesson.run_id,
            ),
        )

    @staticmethod
    def _select(conn: sqlite3.Connection, scope: str, limit: int) -> list[Lesson]:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM lessons WHERE scope = ? "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (scope, limit),
        ).fetchall()
        return [
            Lesson(
                id=row[0],
                scope=row[1],
                question=row[2],
                feedback=row[3],
                answer=row[4],
                created_at=row[5],
                run_id=row[6],
            )
            for row in rows
        ]

    def _translate(self, exc: sqlite3.Error) -> LessonStoreError:
        text = str(exc)
        lowered = text.lower()
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in lowered or "busy" in lowered):
            return LessonStoreError(
                f"lesson store {self.path!r} is locked: another connection held it for "
                f"longer than the busy timeout ({self.busy_timeout_s:g} s) ({text})"
            )
        if "not a database" in lowered or "malformed" in lowered or "corrupt" in lowered:
            return LessonStoreError(
                f"lesson store {self.path!r} is not a usable SQLite database: the file is "
                f"corrupt or of another kind ({text})"
            )
        if "unable to open" in lowered or "readonly" in lowered or "read-only" in lowered:
            return LessonStoreError(
                f"cannot open lesson store {self.path!r}: check that the directory exists "
                f"and the file is readable and writable ({text})"
            )
        return LessonStoreError(f"lesson store {self.path!r} failed: {text}")


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _enable_wal(conn: sqlite3.Connection) -> None:
    # Persistent in the file; a no-op once set. Needs a moment of exclusive access,
    # so it waits for the busy timeout like any write.
    conn.execute("PRAGMA journal_mode = WAL").fetchone()


__all__ = [
    "InMemoryLessonStore",
    "Lesson",
    "LessonStore",
    "LessonStoreError",
    "SQLiteLessonStore",
]
