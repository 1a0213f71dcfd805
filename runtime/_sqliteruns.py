"""The embedded run store: durable runs in one SQLite file (see docs/guides/durable.md).

:class:`SQLiteRunStore` implements :class:`~._runstore.RunStore` (its module
docstring is the contract) on the plumbing the lesson and conversation stores
share (:mod:`._sqlite`): worker threads, WAL, a versioned schema, a foreign
file refused untouched, many processes on one machine.

Three tables: ``runs`` (one row per run: record, status, lease and its epoch,
checkpoint, result, requests, parked calls), ``run_events`` (one row per event, keyed by
``(run_id, seq)``) and ``run_tools`` (the finished tool calls of rounds not
yet checkpointed past). Every method is one job in a worker thread, and every
method that writes is one ``BEGIN IMMEDIATE`` transaction: SQLite lets one
writer in at a time across all processes, so the owner check, the ``seq``
check and the writes of a method happen with nobody in between. That is what
makes a claim a compare-and-set: of concurrent claimers, the first to get the
write lock takes the run, and the others then see a live lease.

Leases are on the wall clock (``time.time()``) of the processes sharing the
file, which is one machine's. Followers (:meth:`SQLiteRunStore.wait`) poll the
file every ``poll_s`` (50 ms by default): SQLite has no way to wake a reader in
another process.

``synchronous=NORMAL`` with WAL: a process killed at any point loses no
committed write; a power cut may lose the last commits, never corrupt the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence

import anyio
import anyio.lowlevel

from ._runlist import (
    Order,
    RunPage,
    RunSummary,
    Sort,
    check_listing,
    listing_sql,
    page_of,
    summary_of_row,
)
from ._runrows import (
    RUN_COLUMNS,
    TOOL_COLUMNS,
    encode_json,
    renewal_epochs,
    run_of_row,
    tool_record_of_row,
)
from ._runstore import (
    JSON,
    Answer,
    Claim,
    Control,
    LeaseLost,
    NewRun,
    RunStatus,
    RunStoreError,
    RunStoreUnavailable,
    StoredRun,
    ToolRecord,
)
from ._sqlite import SQLiteFile

#: The schema version this code writes (``PRAGMA user_version``): 2 added the lease
#: epoch, 3 the listing's indexes (:meth:`SQLiteRunStore.list_runs`). An older file is
#: migrated in place on first use (version-1 runs get epoch 0); an older tether then
#: refuses the file (a newer schema) instead of writing unfenced.
SCHEMA_VERSION = 3

_SCHEMA_V1 = (
    """
    CREATE TABLE IF NOT EXISTS runs (
        run_id            TEXT PRIMARY KEY,
        agent             TEXT NOT NULL,
        input             TEXT NOT NULL,
        messages          TEXT NOT NULL,
        parent_run_id     TEXT,
        created_at        REAL NOT NULL,
        status            TEXT NOT NULL,
        owner             TEXT,
        lease_expires_at  REAL,
        previous_owner    TEXT,
        checkpoint        TEXT,
        events            INTEGER NOT NULL DEFAULT 0,
        result            TEXT,
        cancel            TEXT,
        stop              INTEGER NOT NULL DEFAULT 0,
        pending           TEXT NOT NULL DEFAULT '[]',
        answers           TEXT NOT NULL DEFAULT '[]',
        updated_at        REAL NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS runs_claimable ON runs (status, lease_expires_at)",
    """
    CREATE TABLE IF NOT EXISTS run_events (
        run_id  TEXT NOT NULL,
        seq     INTEGER NOT NULL,
        event   TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS run_tools (
        run_id     TEXT NOT NULL,
        round      INTEGER NOT NULL,
        call_id    TEXT NOT NULL,
        name       TEXT NOT NULL,
        arguments  TEXT NOT NULL,
        result     TEXT NOT NULL,
        recorded   INTEGER NOT NULL,
        PRIMARY KEY (run_id, round, call_id)
    ) WITHOUT ROWID
    """,
)

#: ``PRAGMA application_id`` of the run store files tether creates ("TthR").
APPLICATION_ID = 0x54746852

_COLUMNS = (
    "run_id",
    "agent",
    "input",
    "messages",
    "status",
    "owner",
    "lease_expires_at",
    "checkpoint",
    "events",
    "result",
)

#: A finished run's termination, as the listing filters on it (and indexes it).
_TERMINATION = "json_extract(result, '$.termination')"

#: The listing's row (:func:`~._runlist.summary_of_row`): counts from the result, else
#: the checkpoint, read in SQL so that the messages never leave the file.
_SUMMARY = (
    "run_id, agent, status, parent_run_id, created_at, updated_at, events, "
    f"{_TERMINATION}, "
    + ", ".join(
        f"json_extract(COALESCE(result, checkpoint), '$.usage.{key}')"
        for key in ("steps", "input_tokens", "output_tokens", "cost_usd", "unpriced")
    )
)


def _usage(key: str) -> str:
    return f"json_extract(COALESCE(result, checkpoint), '$.usage.{key}')"


#: What a listing sorts by, in SQL (as :func:`~._runlist.sort_value` computes it).
_SORT_BY = {
    "started": "created_at",
    "duration": "(CASE WHEN status = 'finished' THEN updated_at - created_at ELSE -1.0 END)",
    "tokens": (
        f"(CASE WHEN {_usage('input_tokens')} IS NULL AND {_usage('output_tokens')} IS NULL "
        f"THEN -1.0 ELSE COALESCE({_usage('input_tokens')}, 0) "
        f"+ COALESCE({_usage('output_tokens')}, 0) END)"
    ),
    "cost": (
        f"(CASE WHEN COALESCE({_usage('unpriced')}, 0) THEN -1.0 "
        f"ELSE COALESCE({_usage('cost_usd')}, -1.0) END)"
    ),
    "rounds": f"COALESCE({_usage('steps')}, -1.0)",
}

_TO_V2 = ("ALTER TABLE runs ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0",)

#: The listing's indexes, one per filter, each in the listing's order (keyset pages).
_TO_V3 = (
    "CREATE INDEX IF NOT EXISTS runs_listed ON runs (created_at, run_id)",
    "CREATE INDEX IF NOT EXISTS runs_by_agent ON runs (agent, created_at, run_id)",
    "CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, created_at, run_id)",
    f"CREATE INDEX IF NOT EXISTS runs_by_termination ON runs ({_TERMINATION}, created_at, run_id)",
)

_MIGRATIONS: dict[int, tuple[str, ...]] = {0: _SCHEMA_V1, 1: _TO_V2, 2: _TO_V3}


#: The largest end (its rows' bytes) that may use the room kept for ends: a lean one,
#: a ``RunFinished`` row and a result without its messages, is about 1 KiB.
_END_BYTES = 2048
#: The room kept for each running run's end: twice the largest, for the B-tree pages
#: its rows split (measured: a 1 KiB end grows the file by up to 3 KiB).
_END_ROOM = 2 * _END_BYTES

#: How often :meth:`SQLiteRunStore.wait` looks at the file, by default (seconds).
POLL_S = 0.05


class _Transaction:
    """``with _Transaction(conn):`` — ``BEGIN IMMEDIATE``, then commit, or roll back."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self._conn.execute("COMMIT")
        elif self._conn.in_transaction:
            self._conn.execute("ROLLBACK")


class SQLiteRunStore(SQLiteFile):
    """The embedded run store: one SQLite file, many processes on one machine.

    See the module docstring for how it behaves, and :mod:`._runstore` for
    what every method guarantees. ``poll_s`` is how often a follower looks
    for new events of a run another process writes.
    """

    kind = "run store"
    in_memory = "a temporary file (tmp_path / 'runs.db')"
    error = RunStoreError
    transient_error = RunStoreUnavailable
    schema_version = SCHEMA_VERSION
    migrations = _MIGRATIONS
    objects = frozenset(
        {
            "runs",
            "runs_claimable",
            "runs_listed",
            "runs_by_agent",
            "runs_by_status",
            "runs_by_termination",
            "run_events",
            "run_tools",
        }
    )
    application_id = APPLICATION_ID
    table = "runs"
    columns = _COLUMNS

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0, poll_s: float = POLL_S
    ) -> None:
        super().__init__(path, busy_timeout_s=busy_timeout_s)
        if not poll_s > 0:
            raise ValueError(f"SQLiteRunStore(poll_s=...) must be > 0, got {poll_s!r}")
        self.poll_s = float(poll_s)

    def _kept_pages(self, conn: sqlite3.Connection, pages: int, *, more: int = 0) -> int:
        """Room for every running run's end (``_END_ROOM`` each; ``more``: that many runs
        about to start running), at least an eighth of the file; asked only under a
        file-size limit (see ``_sqlite._size_limit``)."""
        (running,) = conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'running'").fetchone()
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        return max(pages // 8, -(-(int(running) + more) * _END_ROOM // page))

    def _room_for_its_end(self, conn: sqlite3.Connection) -> None:
        """Under a file-size limit, refuse a new run (a passing fault, as a full disk)
        unless the file still has the room kept for every running run's end, this
        one's included. ``max_page_count`` alone cannot: SQLite never sets it below the
        pages the file has, so writes fill those pages while the file is already past
        the room kept, and each new run would claim an end the file cannot hold (the
        last runs told ``store_failed`` then could not record it)."""
        if (pages := self._pages) is None or pages < 0:
            return
        (count,) = conn.execute("PRAGMA page_count").fetchone()
        (free,) = conn.execute("PRAGMA freelist_count").fetchone()
        if int(count) - int(free) + self._kept_pages(conn, pages, more=1) > pages:
            raise RunStoreUnavailable(
                f"{self.kind} {self.path!r} could not be written: no room is left for "
                "another run's end under the file-size limit"
            )

    # ------------------------------------------------------------------ records

    async def create(self, run: NewRun, *, owner: str, lease_s: float) -> None:
        messages = encode_json(run.messages)

        def job(conn: sqlite3.Connection) -> None:
            now = time.time()
            with _Transaction(conn):
                if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
                    raise ValueError(f"the run store already has a run {run.run_id!r}")
                self._room_for_its_end(conn)
                conn.execute(
                    "INSERT INTO runs (run_id, agent, input, messages, parent_run_id, created_at, "
                    "status, owner, lease_expires_at, updated_at, epoch) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, 1)",
                    (
                        run.run_id,
                        run.agent,
                        run.input,
                        messages,
                        run.parent_run_id,
                        run.created_at,
                        owner,
                        now + lease_s,
                        now,
                    ),
                )

        await self._run(job)

    async def get(self, run_id: str) -> StoredRun | None:
        def job(conn: sqlite3.Connection) -> StoredRun | None:
            row = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return None if row is None else run_of_row(row)

        return await self._run(job)

    # ------------------------------------------------------------ owner's writes

    async def commit(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, JSON]],
        checkpoint: Mapping[str, JSON] | None,
        lease_s: float,
        epoch: int | None = None,
    ) -> Control:
        def job(conn: sqlite3.Connection) -> Control:
            # Encoded here, in the worker thread: the event loop only hands the values over.
            rows = _rows(events)
            state = None if checkpoint is None else encode_json(checkpoint)
            now = time.time()
            with _Transaction(conn):
                count = _owned(conn, run_id, owner, now, epoch)
                _append(conn, run_id, count, rows)
                conn.execute(
                    "UPDATE runs SET events = ?, checkpoint = COALESCE(?, checkpoint), "
                    "lease_expires_at = ?, updated_at = ? WHERE run_id = ?",
                    (count + len(rows), state, now + lease_s, now, run_id),
                )
                cancel, stop = conn.execute(
                    "SELECT cancel, stop FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
            return Control(run_id=run_id, cancel=cancel, stop=bool(stop))

        return await self._run(job)

    async def record_tool(
        self, run_id: str, *, owner: str, record: ToolRecord, epoch: int | None = None
    ) -> None:
        result = encode_json(record.result)

        def job(conn: sqlite3.Connection) -> None:
            with _Transaction(conn):
                _owned(conn, run_id, owner, time.time(), epoch)
                (order,) = conn.execute(
                    "SELECT COALESCE(MAX(recorded), 0) + 1 FROM run_tools WHERE run_id = ?",
                    (run_id,),
                ).fetchone()
                conn.execute(
                    "INSERT OR REPLACE INTO run_tools "
                    "(run_id, round, call_id, name, arguments, result, recorded) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        record.round,
                        record.call_id,
                        record.name,
                        record.arguments,
                        result,
                        order,
                    ),
                )

        await self._run(job)

    async def tool_records(self, run_id: str, round: int | None = None) -> list[ToolRecord]:
        def job(conn: sqlite3.Connection) -> list[ToolRecord]:
            where, args = ("", (run_id,)) if round is None else (" AND round = ?", (run_id, round))
            return [
                tool_record_of_row(row)
                for row in conn.execute(
                    f"SELECT {TOOL_COLUMNS} FROM run_tools "
                    f"WHERE run_id = ?{where} ORDER BY recorded",
                    args,
                )
            ]

        return await self._run(job)

    async def park(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, JSON]],
        checkpoint: Mapping[str, JSON],
        pending: Sequence[str],
        epoch: int | None = None,
    ) -> None:
        if not pending:
            raise ValueError("park() needs the pending calls' ids (none given)")
        calls = encode_json(list(pending))

        def job(conn: sqlite3.Connection) -> None:
            rows, state = _rows(events), encode_json(checkpoint)
            now = time.time()
            with _Transaction(conn):
                count = _owned(conn, run_id, owner, now, epoch)
                _append(conn, run_id, count, rows)
                conn.execute(
                    "UPDATE runs SET events = ?, checkpoint = ?, pending = ?, answers = '[]', "
                    "status = CASE WHEN cancel IS NULL THEN 'parked' ELSE 'ready' END, "
                    "owner = NULL, lease_expires_at = NULL, updated_at = ? WHERE run_id = ?",
                    (count + len(rows), state, calls, now, run_id),
                )

        await self._run(job)

    async def finish(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, JSON]],
        result: Mapping[str, JSON],
        epoch: int | None = None,
    ) -> None:
        rows, value = _rows(events), encode_json(result)
        # Only an end no larger than the room kept for it may use that room: a larger one
        # would take other runs' (one that finds no room ends store_failed, leanly).
        lean = len(value) + sum(len(row) for _, row in rows) <= _END_BYTES

        def job(conn: sqlite3.Connection) -> None:
            now = time.time()
            with _Transaction(conn):
                count = _owned(conn, run_id, owner, now, epoch)
                _append(conn, run_id, count, rows)
                conn.execute(
                    "UPDATE runs SET events = ?, result = ?, status = 'finished', owner = NULL, "
                    "lease_expires_at = NULL, pending = '[]', updated_at = ? WHERE run_id = ?",
                    (count + len(rows), value, now, run_id),
                )
                conn.execute("DELETE FROM run_tools WHERE run_id = ?", (run_id,))

        await self._run(job, reserve=lean)  # an end fits even when rounds no longer do

    # ------------------------------------------------------------------ leases

    async def renew(
        self,
        owner: str,
        run_ids: Sequence[str],
        *,
        lease_s: float,
        epochs: Sequence[int] | None = None,
    ) -> list[Control]:
        ids = list(run_ids)
        checked = renewal_epochs(ids, epochs)
        fences: list[int | None] = [None] * len(ids) if checked is None else list(checked)
        if not ids:
            await anyio.lowlevel.checkpoint()
            return []

        def job(conn: sqlite3.Connection) -> list[Control]:
            now = time.time()
            controls = []
            with _Transaction(conn):
                for run_id, epoch in zip(ids, fences, strict=True):
                    row = conn.execute(
                        "UPDATE runs SET lease_expires_at = ? WHERE run_id = ? AND owner = ? "
                        "AND status = 'running' AND lease_expires_at > ? "
                        "AND (? IS NULL OR epoch = ?) RETURNING cancel, stop",
                        (now + lease_s, run_id, owner, now, epoch, epoch),
                    ).fetchone()
                    if row is None:
                        controls.append(Control(run_id=run_id, lost=True))
                    else:
                        controls.append(Control(run_id=run_id, cancel=row[0], stop=bool(row[1])))
            return controls

        return await self._run(job)

    async def release(self, run_id: str, *, owner: str) -> None:
        def job(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE runs SET owner = NULL, lease_expires_at = NULL, previous_owner = ?, "
                "updated_at = ? WHERE run_id = ? AND owner = ? AND status = 'running'",
                (owner, time.time(), run_id, owner),
            )

        await self._run(job)

    async def claimable(self, *, limit: int = 100) -> list[str]:
        def job(conn: sqlite3.Connection) -> list[str]:
            now = time.time()
            return [
                str(row[0])
                for row in conn.execute(
                    "SELECT run_id FROM runs WHERE status = 'ready' OR (status = 'running' "
                    "AND (lease_expires_at IS NULL OR lease_expires_at <= ?)) "
                    "ORDER BY created_at, rowid LIMIT ?",
                    (now, limit),
                )
            ]

        return await self._run(job)

    async def claim(self, run_id: str, *, owner: str, lease_s: float) -> Claim | None:
        def job(conn: sqlite3.Connection) -> Claim | None:
            now = time.time()
            with _Transaction(conn):
                row = conn.execute(
                    "SELECT status, owner, lease_expires_at, previous_owner FROM runs "
                    "WHERE run_id = ?",
                    (run_id,),
                ).fetchone()
                if row is None:
                    return None
                status, held_by, expires, released_by = row
                if status == "ready":
                    previous = None
                elif status == "running" and (expires is None or expires <= now):
                    previous = held_by if held_by is not None else released_by
                else:
                    return None
                conn.execute(
                    "UPDATE runs SET status = 'running', owner = ?, lease_expires_at = ?, "
                    "previous_owner = ?, updated_at = ?, epoch = epoch + 1 WHERE run_id = ?",
                    (owner, now + lease_s, previous, now, run_id),
                )
                claimed = conn.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
            return Claim(run=run_of_row(claimed), previous_owner=previous)

        return await self._run(job, reserve=True)  # to end a run, a claim may be needed

    # ------------------------------------------------------------ hosts' writes

    async def answer(self, run_id: str, answer: Answer) -> bool:
        def job(conn: sqlite3.Connection) -> bool:
            with _Transaction(conn):
                row = conn.execute(
                    "SELECT status, pending, answers FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
                if row is None or row[0] != "parked":
                    what = "no run" if row is None else f"a {row[0]} run, not a parked one"
                    raise KeyError(f"the run store has {what} {run_id!r} to answer")
                pending, answers = json.loads(row[1]), json.loads(row[2])
                if answer.call_id not in pending:
                    raise KeyError(
                        f"run {run_id!r} has no pending call {answer.call_id!r} "
                        f"(pending: {', '.join(pending) or 'none'})"
                    )
                if any(a[0] == answer.call_id for a in answers):
                    raise ValueError(f"call {answer.call_id!r} was already answered")
                answers.append([answer.call_id, answer.approved, answer.note])
                ready = len(answers) == len(pending)
                conn.execute(
                    "UPDATE runs SET answers = ?, status = ?, updated_at = ? WHERE run_id = ?",
                    (encode_json(answers), "ready" if ready else "parked", time.time(), run_id),
                )
            return ready

        return await self._run(job)

    async def request(self, run_id: str, *, cancel: str | None = None, stop: bool = False) -> None:
        def job(conn: sqlite3.Connection) -> None:
            with _Transaction(conn):
                row = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
                if row is None:
                    raise KeyError(f"the run store has no run {run_id!r}")
                if row[0] == "finished":
                    return
                conn.execute(
                    "UPDATE runs SET cancel = COALESCE(cancel, ?), stop = MAX(stop, ?), "
                    "status = CASE WHEN status = 'parked' AND ? IS NOT NULL THEN 'ready' "
                    "ELSE status END, updated_at = ? WHERE run_id = ?",
                    (cancel, int(stop), cancel, time.time(), run_id),
                )

        await self._run(job)

    # ----------------------------------------------------------------- reading

    async def events(self, run_id: str, *, start: int = 0) -> list[JSON]:
        def job(conn: sqlite3.Connection) -> list[str]:
            return [
                str(row[0])
                for row in conn.execute(
                    "SELECT event FROM run_events WHERE run_id = ? AND seq >= ? ORDER BY seq",
                    (run_id, start),
                )
            ]

        return [json.loads(text) for text in await self._run(job)]

    async def list_runs(
        self,
        *,
        agent: str | None = None,
        status: RunStatus | None = None,
        termination: str | None = None,
        since: float | None = None,
        until: float | None = None,
        order: Order = "newest",
        after: str | None = None,
        limit: int = 50,
        sort: Sort = "started",
    ) -> RunPage:
        """See :meth:`tether.runtime.ListableRunStore.list_runs`."""
        cursor = check_listing(status=status, order=order, limit=limit, after=after, sort=sort)
        tail, args = listing_sql(
            placeholder="?",
            termination_expr=_TERMINATION,
            sort_expr=_SORT_BY[sort],
            agent=agent,
            status=status,
            termination=termination,
            since=since,
            until=until,
            order=order,
            cursor=cursor,
            limit=limit,
        )

        def job(conn: sqlite3.Connection) -> list[RunSummary]:
            rows = conn.execute(f"SELECT {_SUMMARY} FROM runs{tail}", args).fetchall()
            return [summary_of_row(row) for row in rows]

        return page_of(await self._run(job), limit, sort)

    async def wait(self, run_id: str, *, seen: int, timeout_s: float) -> None:
        def job(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT events, status FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return row is not None and (int(row[0]) > seen or row[1] == "finished")

        with anyio.move_on_after(timeout_s):
            while True:
                if await self._run(job):
                    return
                await anyio.sleep(self.poll_s)  # polled: see the module docstring


def _rows(events: Sequence[Mapping[str, JSON]]) -> list[tuple[int, str]]:
    return [(int(e["seq"]), encode_json(e)) for e in events]


def _owned(conn: sqlite3.Connection, run_id: str, owner: str, now: float, epoch: int | None) -> int:
    """The run's event count, if ``owner`` holds a live lease on it (at ``epoch``, if
    given); else :class:`LeaseLost`."""
    row = conn.execute(
        "SELECT events, status, owner, lease_expires_at, epoch FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        raise LeaseLost(f"the run store has no run {run_id!r}")
    count, status, held_by, expires, stored = row
    if status != "running":
        why = f"it is {status}"
    elif held_by != owner:
        why = f"it is owned by {held_by!r}"
    elif epoch is not None and stored != epoch:
        why = f"its lease epoch is {stored}, not {epoch} (it was claimed again)"
    elif expires is None or expires <= now:
        why = "its lease expired"
    else:
        return int(count)
    raise LeaseLost(f"{owner!r} no longer owns run {run_id!r}: {why}")


def _append(conn: sqlite3.Connection, run_id: str, count: int, rows: list[tuple[int, str]]) -> None:
    """Insert ``rows`` as events ``count, count + 1, ...``; a ``ValueError`` otherwise."""
    for i, (seq, _) in enumerate(rows):
        if seq != count + i:
            raise ValueError(
                f"run {run_id!r}: event seq {seq} does not follow the {count + i} stored before it"
            )
    conn.executemany(
        "INSERT INTO run_events (run_id, seq, event) VALUES (?, ?, ?)",
        [(run_id, seq, text) for seq, text in rows],
    )


__all__ = ["POLL_S", "SCHEMA_VERSION", "SQLiteRunStore"]
