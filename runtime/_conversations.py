"""Conversations: transcripts kept between runs under an id (see docs/guides/history.md).

``Runtime(conversations=store)`` and ``rt.start(agent, input,
conversation=ID)``: the run starts from the conversation's messages and, when
it ends ok, appends its new ones in one transaction. A conversation is a
list of :class:`~tether.providers.Message` in order, nothing else: what the
model saw and said. It is not the lesson store (:mod:`._lessons`), which
keeps what judges taught an agent across all its runs and users.

Two stores ship: :class:`InMemoryConversationStore` (tests, one process)
and :class:`SQLiteConversationStore` (one file, many processes).

:meth:`ConversationStore.append` takes ``expected_length``, the length the
run loaded: when another writer (another process on the same file) extended
the conversation meanwhile, the append is refused whole with
:class:`ConversationConflict` instead of interleaving two runs' turns.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import anyio.lowlevel
import cattrs
import cattrs.preconf.json

from tether.providers import Message, TetherError

from ._sqlite import SQLiteFile

_T = TypeVar("_T")


@runtime_checkable
class ConversationStore(Protocol):
    """Where conversations are kept between runs."""

    async def load(self, conversation: str) -> list[Message]:
        """The conversation's messages in order (empty for a new conversation)."""
        ...

    async def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        expected_length: int | None = None,
        run_id: str | None = None,
    ) -> None:
        """Append ``messages`` atomically: all of them or none.

        With ``expected_length``, refuse (:class:`ConversationConflict`) when
        the conversation no longer has that many messages.
        """
        ...

    async def aclose(self) -> None:
        """Release the store's resources (a later call may reopen them)."""
        ...


class ConversationStoreError(TetherError):
    """The conversation store could not be read or written."""


class ConversationConflict(ConversationStoreError):
    """The conversation changed since it was loaded; nothing was appended."""


def _check_id(conversation: object) -> str:
    if not isinstance(conversation, str) or not conversation:
        raise ValueError(f"a conversation id must be a non-empty str, got {conversation!r}")
    return conversation


def conversation_conflict(conversation: str, expected: int, found: int) -> ConversationConflict:
    """The error of an ``append`` that found ``found`` messages where the run expected
    ``expected`` (for stores built on :class:`StoredConversations`)."""
    return ConversationConflict(
        f"conversation {conversation!r} has {found} messages, not the {expected} the run "
        "started from: another run appended to it meanwhile; nothing was appended"
    )


# --- in memory ---------------------------------------------------------------------


class InMemoryConversationStore:
    """Conversations in a dict, for tests and one process. No threads, nothing to close."""

    def __init__(self) -> None:
        self._conversations: dict[str, list[Message]] = {}

    async def load(self, conversation: str) -> list[Message]:
        _check_id(conversation)
        await anyio.lowlevel.checkpoint()
        return list(self._conversations.get(conversation, ()))

    async def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        expected_length: int | None = None,
        run_id: str | None = None,
    ) -> None:
        _check_id(conversation)
        await anyio.lowlevel.checkpoint()
        kept = self._conversations.setdefault(conversation, [])
        if expected_length is not None and len(kept) != expected_length:
            raise conversation_conflict(conversation, expected_length, len(kept))
        kept.extend(messages)

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return f"InMemoryConversationStore({len(self._conversations)} conversations)"


# --- SQLite ------------------------------------------------------------------------

#: The schema version this code writes (``PRAGMA user_version``).
SCHEMA_VERSION = 1

_SCHEMA_V1 = (
    """
    CREATE TABLE IF NOT EXISTS conversation_messages (
        conversation  TEXT NOT NULL,
        position      INTEGER NOT NULL,
        message       TEXT NOT NULL,
        run_id        TEXT,
        created_at    REAL NOT NULL,
        PRIMARY KEY (conversation, position)
    ) WITHOUT ROWID
    """,
)

#: ``PRAGMA application_id`` of the conversation files tether creates ("TthC").
APPLICATION_ID = 0x54746843

_COLUMNS = ("conversation", "position", "message", "run_id", "created_at")

#: ``_MIGRATIONS[v]`` takes a database from version ``v`` to ``v + 1``.
_MIGRATIONS: dict[int, tuple[str, ...]] = {0: _SCHEMA_V1}

#: Messages as JSON: one converter, cattrs' JSON preconf (tagged by each block's ``type``).
_converter = cattrs.preconf.json.make_converter()


def encode_message(message: Message) -> str:
    return json.dumps(
        _converter.unstructure(message), ensure_ascii=False, separators=(",", ":"), default=repr
    )


def decode_message(text: str) -> Message:
    return _converter.structure(json.loads(text), Message)


class StoredConversations:
    """``load`` and ``append`` of a conversation store kept in a database (SQLite,
    PostgreSQL). A store built on it gives ``_run(job)`` (the job in a worker
    thread, with a connection), ``_select(conn, conversation)``,
    ``_insert(conn, conversation, rows, expected, run_id, now)`` and
    ``described`` (how its errors name it); the two differ only in their SQL.
    """

    __slots__ = ()

    @property
    def described(self) -> str:
        raise NotImplementedError

    async def load(self, conversation: str) -> list[Message]:
        _check_id(conversation)
        rows = await self._run(lambda conn: self._select(conn, conversation))
        try:
            return [decode_message(row) for row in rows]
        except (ValueError, RecursionError, cattrs.BaseValidationError) as exc:
            raise ConversationStoreError(
                f"{self.described}: conversation {conversation!r} holds a "
                f"message this tether cannot read ({exc})"
            ) from exc

    async def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        expected_length: int | None = None,
        run_id: str | None = None,
    ) -> None:
        _check_id(conversation)
        rows = [encode_message(m) for m in messages]
        now = time.time()
        await self._run(
            lambda conn: self._insert(conn, conversation, rows, expected_length, run_id, now)
        )

    async def _run(self, job: Callable[[Any], _T]) -> _T:
        raise NotImplementedError

    def _select(self, conn: Any, conversation: str) -> list[str]:
        raise NotImplementedError

    def _insert(
        self,
        conn: Any,
        conversation: str,
        rows: list[str],
        expected: int | None,
        run_id: str | None,
        now: float,
    ) -> None:
        raise NotImplementedError


class SQLiteConversationStore(SQLiteFile, StoredConversations):
    """The embedded conversation store: one SQLite file, standard-library ``sqlite3``.

    It shares the lesson store's plumbing (:mod:`._sqlite`): worker threads,
    WAL, a versioned schema, a foreign file refused untouched, and many
    processes on one file. A conversation is its rows in
    ``conversation_messages``, one message (JSON) per ``position``. An append
    is one ``BEGIN IMMEDIATE`` transaction that checks the length and inserts
    every message, so a process killed mid-way leaves the conversation as it
    was, and two processes cannot interleave. ``synchronous=FULL``: an append
    that returned survives a power cut too (one fsync per run that ends ok).
    """

    kind = "conversation store"
    in_memory = "InMemoryConversationStore"
    error = ConversationStoreError
    schema_version = SCHEMA_VERSION
    migrations = _MIGRATIONS
    objects = frozenset({"conversation_messages"})
    application_id = APPLICATION_ID
    table = "conversation_messages"
    columns = _COLUMNS
    synchronous = "FULL"

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0) -> None:
        super().__init__(path, busy_timeout_s=busy_timeout_s)

    @property
    def described(self) -> str:
        return f"conversation store {self.path!r}"

    @staticmethod
    def _select(conn: sqlite3.Connection, conversation: str) -> list[str]:
        return [
            str(row[0])
            for row in conn.execute(
                "SELECT message FROM conversation_messages WHERE conversation = ? "
                "ORDER BY position",
                (conversation,),
            )
        ]

    @staticmethod
    def _insert(
        conn: sqlite3.Connection,
        conversation: str,
        rows: list[str],
        expected: int | None,
        run_id: str | None,
        now: float,
    ) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            (length,) = conn.execute(
                "SELECT COUNT(*) FROM conversation_messages WHERE conversation = ?",
                (conversation,),
            ).fetchone()
            if expected is not None and length != expected:
                raise conversation_conflict(conversation, expected, length)
            conn.executemany(
                "INSERT INTO conversation_messages "
                "(conversation, position, message, run_id, created_at) VALUES (?, ?, ?, ?, ?)",
                [(conversation, length + i, row, run_id, now) for i, row in enumerate(rows)],
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


__all__ = [
    "ConversationConflict",
    "ConversationStore",
    "ConversationStoreError",
    "InMemoryConversationStore",
    "SQLiteConversationStore",
]
