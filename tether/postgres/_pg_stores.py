"""PostgreSQL conversation and lesson stores: the SQLite stores' semantics, for many machines.

Both share :class:`~tether.postgres._pg.PostgresDatabase` (a pool used from worker
threads, a versioned schema) and keep their SQLite counterparts' contracts:

* :class:`PostgresConversationStore`: a conversation is its rows of
  ``conversation_messages``, one message (JSON text, exactly what the SQLite
  store writes) per ``position``. An append is one transaction that takes a
  transaction-level advisory lock on the conversation, checks its length
  against ``expected_length`` and inserts every message; so appends to one
  conversation from any number of processes never interleave, and a stale one
  is refused whole with :class:`~tether.runtime.ConversationConflict`.
* :class:`PostgresLessonStore`: one ``INSERT`` per lesson; recall is scoped,
  newest first by ``(created_at, id)``, from an index in that order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import psycopg

from tether.runtime import (
    ConversationStoreError,
    Lesson,
    LessonStoreError,
    StoredConversations,
    StoredLessons,
    conversation_conflict,
)

from ._pg import DEFAULT_SCHEMA, MAX_CONNECTIONS, PostgresDatabase

_Conn = psycopg.Connection[tuple[object, ...]]

#: The conversation tables' schema version (``tether_versions``, component ``conversations``).
CONVERSATIONS_SCHEMA_VERSION = 1

_CONVERSATIONS_V1 = (
    """
    CREATE TABLE {schema}.conversation_messages (
        conversation  text NOT NULL,
        position      integer NOT NULL,
        message       text NOT NULL,
        run_id        text,
        created_at    double precision NOT NULL,
        PRIMARY KEY (conversation, position)
    )
    """,
)

#: The lesson tables' schema version (component ``lessons``).
LESSONS_SCHEMA_VERSION = 1

_LESSONS_V1 = (
    """
    CREATE TABLE {schema}.lessons (
        id          text PRIMARY KEY,
        scope       text NOT NULL,
        question    text NOT NULL,
        feedback    text,
        answer      text,
        created_at  double precision NOT NULL,
        run_id      text
    )
    """,
    "CREATE INDEX lessons_recall ON {schema}.lessons (scope, created_at DESC, id DESC)",
)


class PostgresConversationStore(PostgresDatabase, StoredConversations):
    """Conversations in PostgreSQL, shared by every process and machine on the database.

    ``PostgresConversationStore(dsn, schema="tether")``; see :mod:`tether.postgres`.
    """

    kind = "conversation store"
    error = ConversationStoreError
    component = "conversations"
    schema_version = CONVERSATIONS_SCHEMA_VERSION
    migrations: ClassVar[Mapping[int, Sequence[str]]] = {0: _CONVERSATIONS_V1}
    tables = frozenset({"conversation_messages"})

    @property
    def described(self) -> str:
        return f"conversation store at {self.where}"

    def _select(self, conn: _Conn, conversation: str) -> list[str]:
        query = psycopg.sql.SQL(
            "SELECT message FROM {} WHERE conversation = %s ORDER BY position"
        ).format(self._t("conversation_messages"))
        return [str(row[0]) for row in conn.execute(query, (conversation,))]

    def _insert(
        self,
        conn: _Conn,
        conversation: str,
        rows: list[str],
        expected: int | None,
        run_id: str | None,
        now: float,
    ) -> None:
        table = self._t("conversation_messages")
        with conn.transaction():
            # Appends to one conversation take turns (a hash collision only makes two
            # conversations take turns too); loads never wait for it.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"tether conversation {self.schema}\x1f{conversation}",),
            )
            row = conn.execute(
                psycopg.sql.SQL("SELECT COUNT(*) FROM {} WHERE conversation = %s").format(table),
                (conversation,),
            ).fetchone()
            length = int(str(row[0])) if row is not None else 0
            if expected is not None and length != expected:
                raise conversation_conflict(conversation, expected, length)
            if rows:
                with conn.cursor() as cur:
                    cur.executemany(
                        psycopg.sql.SQL(
                            "INSERT INTO {} (conversation, position, message, run_id, created_at)"
                            " VALUES (%s, %s, %s, %s, %s)"
                        ).format(table),
                        [
                            (conversation, length + i, text, run_id, now)
                            for i, text in enumerate(rows)
                        ],
                    )


_LESSON_COLUMNS = "id, scope, question, feedback, answer, created_at, run_id"


class PostgresLessonStore(PostgresDatabase, StoredLessons):
    """Lessons in PostgreSQL, shared by every process and machine on the database.

    ``PostgresLessonStore(dsn, schema="tether", clock=time.time)``; ``clock``
    (unix seconds) stamps ``created_at``; tests may fix it.
    """

    kind = "lesson store"
    error = LessonStoreError
    component = "lessons"
    schema_version = LESSONS_SCHEMA_VERSION
    migrations: ClassVar[Mapping[int, Sequence[str]]] = {0: _LESSONS_V1}
    tables = frozenset({"lessons"})

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        max_connections: int = MAX_CONNECTIONS,
        connect_timeout_s: float = 10.0,
        statement_timeout_s: float = 30.0,
        synchronous_commit: bool | None = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            dsn,
            schema=schema,
            max_connections=max_connections,
            connect_timeout_s=connect_timeout_s,
            statement_timeout_s=statement_timeout_s,
            synchronous_commit=synchronous_commit,
        )
        self._clock = clock

    def _insert(self, conn: _Conn, lesson: Lesson) -> None:
        conn.execute(
            psycopg.sql.SQL(
                f"INSERT INTO {{}} ({_LESSON_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ).format(self._t("lessons")),
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

    def _select(self, conn: _Conn, scope: str, limit: int) -> list[Lesson]:
        rows = conn.execute(
            psycopg.sql.SQL(
                f"SELECT {_LESSON_COLUMNS} FROM {{}} WHERE scope = %s "
                "ORDER BY created_at DESC, id DESC LIMIT %s"
            ).format(self._t("lessons")),
            (scope, limit),
        ).fetchall()
        return [
            Lesson(
                id=str(row[0]),
                scope=str(row[1]),
                question=str(row[2]),
                feedback=None if row[3] is None else str(row[3]),
                answer=None if row[4] is None else str(row[4]),
                created_at=float(row[5]),  # type: ignore[arg-type]
                run_id=None if row[6] is None else str(row[6]),
            )
            for row in rows
        ]


__all__ = ["PostgresConversationStore", "PostgresLessonStore"]
