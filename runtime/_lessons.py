"""Lessons: what a run learned from a failed judgement, recalled later (docs/guides/judgement.md).

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
from typing import Any, Protocol, TypeVar, runtime_checkable

import anyio
import anyio.lowlevel
import attrs

from tether.providers import TetherError

from ._sqlite import SQLiteFile

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


class StoredLessons:
    """``add`` and ``recall`` of a lesson store kept in a database (SQLite, PostgreSQL).

    A store built on it gives ``_run(job)`` (the job in a worker thread, with a
    connection), ``_insert(conn, lesson)``, ``_select(conn, scope, limit)`` and
    ``_clock``; the two differ only in their SQL.
    """

    __slots__ = ()
    _clock: Callable[[], float]

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

    async def _run(self, job: Callable[[Any], _T]) -> _T:
        raise NotImplementedError

    def _insert(self, conn: Any, lesson: Lesson) -> None:
        raise NotImplementedError

    def _select(self, conn: Any, scope: str, limit: int) -> list[Lesson]:
        raise NotImplementedError


class SQLiteLessonStore(SQLiteFile, StoredLessons):
    """The embedded lesson store: one SQLite file, standard-library ``sqlite3``.

    Every call runs in a worker thread, in WAL mode, with a versioned schema;
    a foreign SQLite file is refused untouched (see :mod:`._sqlite`, shared
    with the conversation store). Each ``add`` is one INSERT in autocommit,
    with ``synchronous=NORMAL``: a power cut may lose the last lessons, which
    is acceptable for lessons and saves an fsync per add.

    ``path`` must name a file: ``":memory:"`` would give every pooled
    connection its own empty database (use :class:`InMemoryLessonStore`).
    ``clock`` (unix seconds) stamps ``created_at``; tests may fix it.
    """

    kind = "lesson store"
    in_memory = "InMemoryLessonStore"
    error = LessonStoreError
    schema_version = SCHEMA_VERSION
    migrations = _MIGRATIONS
    objects = _OUR_OBJECTS
    application_id = APPLICATION_ID
    table = "lessons"
    columns = tuple(_COLUMNS.split(", "))

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(path, busy_timeout_s=busy_timeout_s)
        self._clock = clock

    # --- the async API ---------------------------------------------------------------

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


__all__ = [
    "InMemoryLessonStore",
    "Lesson",
    "LessonStore",
    "LessonStoreError",
    "SQLiteLessonStore",
]
