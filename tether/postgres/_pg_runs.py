"""The PostgreSQL run store: durable runs shared by many machines (see docs/guides/postgres.md).

:class:`PostgresRunStore` implements :class:`~tether.runtime.RunStore` (its
docstring is the contract) on the
plumbing the other PostgreSQL stores share (:mod:`._pg`): a connection pool
used from worker threads (asyncio and trio alike), a versioned schema.

* **Tables.** ``runs`` (one row per run: record, status, lease, checkpoint,
  result, requests, parked calls), ``run_events`` (one row per event, keyed by
  ``(run_id, seq)``) and ``run_tools`` (finished tool calls of unfinished runs).
  JSON is kept as text, exactly as written (``jsonb`` would refuse ``\\u0000``).
* **The owner check is the write.** An owner's write (commit, park, finish) is
  one ``UPDATE runs ... WHERE owner = %s AND status = 'running' AND
  lease_expires_at > now AND epoch = <its epoch> AND events = <first seq>``
  (the epoch is the fencing token: no write of an earlier ownership lands)
  that locks the row, then the event rows, in one transaction; when it
  matches nothing, a ``SELECT`` says why (:class:`~tether.runtime.LeaseLost`
  or a ``seq`` ``ValueError``) and nothing is written. A claim is one
  ``UPDATE ... WHERE`` *claimable* ``RETURNING`` (which raises the epoch):
  under READ COMMITTED a second claimer waits for the first
  one's row lock, re-reads the row, finds a live lease and matches nothing, so
  of any number of claimers, on any number of machines, exactly one wins.
* **One clock.** Leases are on the server's clock
  (``clock_timestamp()``), never the hosts': machines whose clocks disagree
  still agree on whose lease expired.
* **Followers are woken, not polled.** Every write that appends events or
  changes a run's status sends ``NOTIFY`` with the run id (payloads stay far
  below PostgreSQL's 8,000 bytes: ids only, the rows are read) on a channel of
  the store's schema, delivered when the transaction commits. A store that
  follows a run (:meth:`PostgresRunStore.wait`) keeps one ``LISTEN``
  connection on a thread of its own, which wakes the waiting tasks in their
  event loops; ``wait`` re-reads the run after each wake. If the listening
  connection breaks, it reconnects and wakes every waiter to re-read, and a
  waiter re-reads at the latest every ``recheck_s`` (60 s by default) in
  any case, as a safety net, never as the way it learns of new events.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NoReturn

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import psycopg
from psycopg import sql

from tether.runtime import (
    JSON,
    RUN_COLUMNS,
    TOOL_COLUMNS,
    Answer,
    Claim,
    Control,
    LeaseLost,
    NewRun,
    RunStoreError,
    RunStoreUnavailable,
    StoredRun,
    ToolRecord,
    encode_json,
    renewal_epochs,
    run_of_row,
    tool_record_of_row,
)

from ._pg import DEFAULT_SCHEMA, MAX_CONNECTIONS, PostgresDatabase
from ._pg_listen import Listener, ListenerSlot
from ._pg_listing import RUNS_V3 as _RUNS_V3
from ._pg_listing import PostgresRunListing

_Conn = psycopg.Connection[tuple[Any, ...]]

#: The run tables' schema version (``tether_versions``, component ``runs``): 2 added
#: the lease epoch (version-1 tables are migrated on first use; their runs get epoch 0),
#: 3 the listing's indexes (:meth:`PostgresRunStore.list_runs`).
RUNS_SCHEMA_VERSION = 3

_RUNS_V1 = (
    """
    CREATE TABLE {schema}.runs (
        run_id            text PRIMARY KEY,
        ord               bigserial,
        agent             text NOT NULL,
        input             text NOT NULL,
        messages          text NOT NULL,
        parent_run_id     text,
        created_at        double precision NOT NULL,
        status            text NOT NULL,
        owner             text,
        lease_expires_at  double precision,
        previous_owner    text,
        checkpoint        text,
        events            integer NOT NULL DEFAULT 0,
        result            text,
        cancel            text,
        stop              boolean NOT NULL DEFAULT false,
        pending           text NOT NULL DEFAULT '[]',
        answers           text NOT NULL DEFAULT '[]',
        updated_at        double precision NOT NULL
    )
    """,
    "CREATE INDEX runs_claimable ON {schema}.runs (status, lease_expires_at)",
    """
    CREATE TABLE {schema}.run_events (
        run_id  text NOT NULL,
        seq     integer NOT NULL,
        event   text NOT NULL,
        PRIMARY KEY (run_id, seq)
    )
    """,
    """
    CREATE TABLE {schema}.run_tools (
        run_id     text NOT NULL,
        round      integer NOT NULL,
        call_id    text NOT NULL,
        name       text NOT NULL,
        arguments  text NOT NULL,
        result     text NOT NULL,
        recorded   bigserial,
        PRIMARY KEY (run_id, round, call_id)
    )
    """,
)

_RUNS_V2 = ("ALTER TABLE {schema}.runs ADD COLUMN epoch integer NOT NULL DEFAULT 0",)

#: The server's clock, in seconds since the epoch: every lease is on it.
_NOW = "extract(epoch FROM clock_timestamp())::float8"


#: How long a follower waits between re-reads when no notification comes (seconds).
RECHECK_S = 60.0

#: NOTIFY payloads are at most 8,000 bytes; a longer run id notifies "" (wake all).
_MAX_PAYLOAD = 7_000


def _event_rows(run_id: str, events: Sequence[Mapping[str, JSON]]) -> list[tuple[int, str]]:
    """The events as ``(seq, json)``, checked to follow one another (the first is checked
    against the store in the transaction)."""
    rows = [(int(e["seq"]), encode_json(e)) for e in events]
    for (before, _), (seq, _) in itertools.pairwise(rows):
        if seq != before + 1:
            raise ValueError(f"run {run_id!r}: event seq {seq} does not follow seq {before}")
    return rows


def _refuse(
    conn: _Conn,
    runs: sql.Composed,
    run_id: str,
    owner: str,
    first: int | None,
    epoch: int | None,
) -> NoReturn:
    """Why an owner's write matched no row: :class:`LeaseLost`, or a ``seq`` ``ValueError``."""
    row = conn.execute(
        sql.SQL(
            f"SELECT events, status, owner, lease_expires_at > {_NOW}, epoch FROM {{}} "
            "WHERE run_id = %s"
        ).format(runs),
        (run_id,),
    ).fetchone()
    if row is None:
        raise LeaseLost(f"the run store has no run {run_id!r}")
    count, status, held_by, live, stored = row
    if status != "running":
        why = f"it is {status}"
    elif held_by != owner:
        why = f"it is owned by {held_by!r}"
    elif epoch is not None and stored != epoch:
        why = f"its lease epoch is {stored}, not {epoch} (it was claimed again)"
    elif not live:
        why = "its lease expired"
    else:
        raise ValueError(
            f"run {run_id!r}: event seq {first} does not follow the {count} stored before it"
        )
    raise LeaseLost(f"{owner!r} no longer owns run {run_id!r}: {why}")


class PostgresRunStore(PostgresRunListing):
    """The run store for many machines: PostgreSQL, with LISTEN/NOTIFY for followers.

    ``PostgresRunStore(dsn, schema="tether")``; see the module docstring for
    how it behaves and :class:`tether.runtime.RunStore` for what every method
    guarantees. ``recheck_s`` bounds how long a follower goes without
    re-reading the run if a notification were lost (it is woken at once
    otherwise).
    """

    kind = "run store"
    error = RunStoreError
    transient_error = RunStoreUnavailable
    component = "runs"
    schema_version = RUNS_SCHEMA_VERSION
    migrations: ClassVar[Mapping[int, Sequence[str]]] = {0: _RUNS_V1, 1: _RUNS_V2, 2: _RUNS_V3}
    tables = frozenset({"runs", "run_events", "run_tools"})

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        max_connections: int = MAX_CONNECTIONS,
        connect_timeout_s: float = 10.0,
        statement_timeout_s: float = 30.0,
        synchronous_commit: bool | None = None,
        recheck_s: float = RECHECK_S,
    ) -> None:
        super().__init__(
            dsn,
            schema=schema,
            max_connections=max_connections,
            connect_timeout_s=connect_timeout_s,
            statement_timeout_s=statement_timeout_s,
            synchronous_commit=synchronous_commit,
        )
        if not isinstance(recheck_s, int | float) or not recheck_s > 0:
            raise ValueError(f"PostgresRunStore(recheck_s=...) must be > 0, got {recheck_s!r}")
        self.recheck_s = float(recheck_s)
        digest = hashlib.sha1(self.schema.encode(), usedforsecurity=False).hexdigest()[:16]
        #: The NOTIFY channel of this schema's runs.
        self.channel = f"tether_runs_{digest}"

    _local = PostgresDatabase._local | {"_listener"}

    def _fresh(self) -> None:
        super()._fresh()
        self._listener = ListenerSlot()

    # --- tables ----------------------------------------------------------------------

    @property
    def _runs(self) -> sql.Composed:
        return self._t("runs")

    def _notify(self, conn: _Conn, run_id: str) -> None:
        """NOTIFY in a job's own transaction (delivered when it commits)."""
        payload = run_id if len(run_id.encode()) <= _MAX_PAYLOAD else ""
        conn.execute("SELECT pg_notify(%s, %s)", (self.channel, payload))

    def _owner_write(
        self,
        conn: _Conn,
        run_id: str,
        owner: str,
        rows: list[tuple[int, str]],
        assignments: str,
        params: Mapping[str, Any],
        *,
        returning: str = "1",
        notify: bool = False,
        also: str = "",
        epoch: int | None = None,
    ) -> tuple[Any, ...]:
        """One statement, so one round trip and its own transaction: ``UPDATE runs SET
        <assignments>`` if ``owner`` holds a live lease (at ``epoch``, if given) and the
        first event follows the stored ones, the event rows, the NOTIFY, and ``also``
        (more CTEs, run only when the update matched). When it matched nothing,
        :func:`_refuse` says why."""
        first = rows[0][0] if rows else None
        notifying = ", pg_notify(%(channel)s, %(payload)s) IS NULL" if notify else ""
        query = sql.SQL(
            f"WITH up AS (UPDATE {{runs}} SET events = events + %(n)s, {assignments}, "
            f"updated_at = {_NOW} WHERE run_id = %(run_id)s AND owner = %(owner)s "
            f"AND status = 'running' AND lease_expires_at > {_NOW}"
            + (" AND events = %(first)s" if first is not None else "")
            + (" AND epoch = %(epoch)s" if epoch is not None else "")
            + f" RETURNING {returning}{notifying}), "
            # The events go as one JSON array of their texts: json (not jsonb) keeps
            # each element's text as written, and one text parameter is cheap to send.
            "ins AS (INSERT INTO {events} (run_id, seq, event) "
            "SELECT %(run_id)s, %(first)s::integer + t.n - 1, t.event "
            "FROM json_array_elements(%(texts)s::json) WITH ORDINALITY AS t(event, n) "
            "WHERE EXISTS (SELECT 1 FROM up))" + also + " SELECT * FROM up"
        ).format(runs=self._runs, events=self._t("run_events"), tools=self._t("run_tools"))
        args = {
            **params,
            "n": len(rows),
            "run_id": run_id,
            "owner": owner,
            "first": first,
            "epoch": epoch,
            "texts": "[" + ",".join(text for _, text in rows) + "]",
            "channel": self.channel,
            "payload": run_id if len(run_id.encode()) <= _MAX_PAYLOAD else "",
        }
        row = conn.execute(query, args).fetchone()
        if row is None:
            _refuse(conn, self._runs, run_id, owner, first, epoch)
        assert row is not None
        return row

    # --- records ---------------------------------------------------------------------

    async def create(self, run: NewRun, *, owner: str, lease_s: float) -> None:
        messages = encode_json(run.messages)

        def job(conn: _Conn) -> None:
            row = conn.execute(
                sql.SQL(
                    "INSERT INTO {} (run_id, agent, input, messages, parent_run_id, created_at, "
                    f"status, owner, lease_expires_at, updated_at, epoch) VALUES (%s, %s, %s, "
                    f"%s, %s, %s, 'running', %s, {_NOW} + %s, {_NOW}, 1) "
                    "ON CONFLICT (run_id) DO NOTHING RETURNING 1"
                ).format(self._runs),
                (
                    run.run_id,
                    run.agent,
                    run.input,
                    messages,
                    run.parent_run_id,
                    run.created_at,
                    owner,
                    lease_s,
                ),
            ).fetchone()
            if row is None:
                raise ValueError(f"the run store already has a run {run.run_id!r}")

        await self._run(job)

    async def get(self, run_id: str) -> StoredRun | None:
        def job(conn: _Conn) -> StoredRun | None:
            row = conn.execute(
                sql.SQL(f"SELECT {RUN_COLUMNS} FROM {{}} WHERE run_id = %s").format(self._runs),
                (run_id,),
            ).fetchone()
            return None if row is None else run_of_row(row)

        return await self._run(job)

    # --- owner's writes --------------------------------------------------------------

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
        def job(conn: _Conn) -> Control:
            # Encoded in the worker thread, not on the event loop.
            rows = _event_rows(run_id, events)
            state = None if checkpoint is None else encode_json(checkpoint)
            row = self._owner_write(
                conn,
                run_id,
                owner,
                rows,
                "checkpoint = COALESCE(%(state)s, checkpoint), "
                f"lease_expires_at = {_NOW} + %(lease)s",
                {"state": state, "lease": lease_s},
                returning="cancel, stop",
                notify=bool(rows),
                epoch=epoch,
            )
            return Control(run_id=run_id, cancel=row[0], stop=bool(row[1]))

        return await self._run(job)

    async def record_tool(
        self, run_id: str, *, owner: str, record: ToolRecord, epoch: int | None = None
    ) -> None:
        result = encode_json(record.result)

        def job(conn: _Conn) -> None:
            self._owner_write(
                conn,
                run_id,
                owner,
                [],
                "owner = owner",
                {
                    "round": record.round,
                    "call_id": record.call_id,
                    "name": record.name,
                    "arguments": record.arguments,
                    "result": result,
                },
                also=(
                    ", tool AS (INSERT INTO {tools} (run_id, round, call_id, name, arguments, "
                    "result) SELECT %(run_id)s, %(round)s, %(call_id)s, %(name)s, %(arguments)s, "
                    "%(result)s WHERE EXISTS (SELECT 1 FROM up) "
                    "ON CONFLICT (run_id, round, call_id) DO UPDATE SET name = EXCLUDED.name, "
                    "arguments = EXCLUDED.arguments, result = EXCLUDED.result, "
                    "recorded = EXCLUDED.recorded)"
                ),
                epoch=epoch,
            )

        await self._run(job)

    async def tool_records(self, run_id: str, round: int | None = None) -> list[ToolRecord]:
        def job(conn: _Conn) -> list[ToolRecord]:
            where = "" if round is None else " AND round = %(round)s"
            return [
                tool_record_of_row(row)
                for row in conn.execute(
                    sql.SQL(
                        f"SELECT {TOOL_COLUMNS} FROM {{}} "
                        f"WHERE run_id = %(run_id)s{where} ORDER BY recorded"
                    ).format(self._t("run_tools")),
                    {"run_id": run_id, "round": round},
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

        def job(conn: _Conn) -> None:
            rows = _event_rows(run_id, events)
            state, calls = encode_json(checkpoint), encode_json(list(pending))
            self._owner_write(
                conn,
                run_id,
                owner,
                rows,
                "checkpoint = %(state)s, pending = %(calls)s, answers = '[]', "
                "status = CASE WHEN cancel IS NULL THEN 'parked' ELSE 'ready' END, "
                "owner = NULL, lease_expires_at = NULL",
                {"state": state, "calls": calls},
                notify=True,
                epoch=epoch,
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
        def job(conn: _Conn) -> None:
            rows = _event_rows(run_id, events)
            value = encode_json(result)
            self._owner_write(
                conn,
                run_id,
                owner,
                rows,
                "result = %(result)s, status = 'finished', owner = NULL, "
                "lease_expires_at = NULL, pending = '[]'",
                {"result": value},
                notify=True,
                also=(
                    ", gone AS (DELETE FROM {tools} WHERE run_id = %(run_id)s "
                    "AND EXISTS (SELECT 1 FROM up))"
                ),
                epoch=epoch,
            )

        await self._run(job)

    # --- leases ----------------------------------------------------------------------

    async def renew(
        self,
        owner: str,
        run_ids: Sequence[str],
        *,
        lease_s: float,
        epochs: Sequence[int] | None = None,
    ) -> list[Control]:
        ids = list(run_ids)
        fences = renewal_epochs(ids, epochs)
        if not ids:
            await anyio.lowlevel.checkpoint()
            return []
        # With epochs: the (run id, epoch) pairs, one array each; a row matches its own pair.
        fenced = (
            "run_id = ANY(%(ids)s)"
            if fences is None
            else "(run_id, epoch) IN (SELECT * FROM unnest(%(ids)s::text[], %(epochs)s::int[]))"
        )

        def job(conn: _Conn) -> list[Control]:
            found = {
                row[0]: Control(run_id=row[0], cancel=row[1], stop=bool(row[2]))
                for row in conn.execute(
                    sql.SQL(
                        f"UPDATE {{}} SET lease_expires_at = {_NOW} + %(lease)s WHERE {fenced} "
                        f"AND owner = %(owner)s AND status = 'running' "
                        f"AND lease_expires_at > {_NOW} RETURNING run_id, cancel, stop"
                    ).format(self._runs),
                    {"lease": lease_s, "ids": ids, "owner": owner, "epochs": fences},
                )
            }
            return [found.get(run_id) or Control(run_id=run_id, lost=True) for run_id in ids]

        return await self._run(job)

    async def release(self, run_id: str, *, owner: str) -> None:
        def job(conn: _Conn) -> None:
            with conn.transaction():
                row = conn.execute(
                    sql.SQL(
                        "UPDATE {} SET owner = NULL, lease_expires_at = NULL, previous_owner = %s, "
                        f"updated_at = {_NOW} WHERE run_id = %s AND owner = %s "
                        "AND status = 'running' RETURNING 1"
                    ).format(self._runs),
                    (owner, run_id, owner),
                ).fetchone()
                if row is not None:
                    self._notify(conn, run_id)

        await self._run(job)

    async def claimable(self, *, limit: int = 100) -> list[str]:
        def job(conn: _Conn) -> list[str]:
            return [
                str(row[0])
                for row in conn.execute(
                    sql.SQL(
                        "SELECT run_id FROM {} WHERE status = 'ready' OR (status = 'running' "
                        f"AND (lease_expires_at IS NULL OR lease_expires_at <= {_NOW})) "
                        "ORDER BY created_at, ord LIMIT %s"
                    ).format(self._runs),
                    (limit,),
                )
            ]

        return await self._run(job)

    async def claim(self, run_id: str, *, owner: str, lease_s: float) -> Claim | None:
        def job(conn: _Conn) -> Claim | None:
            # One statement: a concurrent claimer waits for this row lock, then re-reads
            # the row, finds the live lease set here and matches nothing.
            row = conn.execute(
                sql.SQL(
                    "UPDATE {} SET status = 'running', owner = %s, epoch = epoch + 1, "
                    f"lease_expires_at = {_NOW} + %s, previous_owner = CASE WHEN status = "
                    "'ready' THEN NULL ELSE COALESCE(owner, previous_owner) END, "
                    f"updated_at = {_NOW} WHERE run_id = %s AND (status = 'ready' OR "
                    "(status = 'running' AND (lease_expires_at IS NULL OR "
                    f"lease_expires_at <= {_NOW}))) RETURNING {RUN_COLUMNS}"
                ).format(self._runs),
                (owner, lease_s, run_id),
            ).fetchone()
            if row is None:
                return None
            run = run_of_row(row)
            return Claim(run=run, previous_owner=run.previous_owner)

        return await self._run(job)

    # --- hosts' writes ---------------------------------------------------------------

    async def answer(self, run_id: str, answer: Answer) -> bool:
        def job(conn: _Conn) -> bool:
            with conn.transaction():
                row = conn.execute(
                    sql.SQL(
                        "SELECT status, pending, answers FROM {} WHERE run_id = %s FOR UPDATE"
                    ).format(self._runs),
                    (run_id,),
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
                    sql.SQL(
                        f"UPDATE {{}} SET answers = %s, status = %s, updated_at = {_NOW} "
                        "WHERE run_id = %s"
                    ).format(self._runs),
                    (encode_json(answers), "ready" if ready else "parked", run_id),
                )
                if ready:
                    self._notify(conn, run_id)
            return ready

        return await self._run(job)

    async def request(self, run_id: str, *, cancel: str | None = None, stop: bool = False) -> None:
        def job(conn: _Conn) -> None:
            with conn.transaction():
                row = conn.execute(
                    sql.SQL("SELECT status FROM {} WHERE run_id = %s FOR UPDATE").format(
                        self._runs
                    ),
                    (run_id,),
                ).fetchone()
                if row is None:
                    raise KeyError(f"the run store has no run {run_id!r}")
                if row[0] == "finished":
                    return
                conn.execute(
                    sql.SQL(
                        "UPDATE {} SET cancel = COALESCE(cancel, %s), stop = stop OR %s, "
                        "status = CASE WHEN status = 'parked' AND %s::text IS NOT NULL "
                        f"THEN 'ready' ELSE status END, updated_at = {_NOW} WHERE run_id = %s"
                    ).format(self._runs),
                    (cancel, stop, cancel, run_id),
                )
                self._notify(conn, run_id)

        await self._run(job)

    # --- reading ---------------------------------------------------------------------

    async def events(self, run_id: str, *, start: int = 0) -> list[JSON]:
        def job(conn: _Conn) -> list[str]:
            return [
                str(row[0])
                for row in conn.execute(
                    sql.SQL(
                        "SELECT event FROM {} WHERE run_id = %s AND seq >= %s ORDER BY seq"
                    ).format(self._t("run_events")),
                    (run_id, start),
                )
            ]

        return [json.loads(text) for text in await self._run(job)]

    async def wait(self, run_id: str, *, seen: int, timeout_s: float) -> None:
        def news(conn: _Conn) -> bool:
            row = conn.execute(
                sql.SQL("SELECT events, status FROM {} WHERE run_id = %s").format(self._runs),
                (run_id,),
            ).fetchone()
            return row is not None and (int(row[0]) > seen or row[1] == "finished")

        with anyio.move_on_after(timeout_s):
            listener = await self._listening()
            with listener.watch(run_id) as wake:
                while True:
                    wake.arm()  # before the read: a NOTIFY after it is not missed
                    if await self._run(news):
                        return
                    with anyio.move_on_after(self.recheck_s):
                        await wake.wait()

    # --- the listener ----------------------------------------------------------------

    async def _listening(self) -> Listener:
        listener = self._listener.get(
            lambda: Listener(self._dsn, self.channel, self._connect_kwargs(), self.where)
        )
        if not listener.listening:
            await self._run(lambda conn: None)  # the schema first (and a clear error if down)
            await anyio.to_thread.run_sync(listener.start, abandon_on_cancel=True)
        return listener

    def close(self) -> None:
        self._listener.close()
        super().close()

    async def aclose(self) -> None:
        await self._listener.aclose()
        await super().aclose()


__all__ = ["RECHECK_S", "PostgresRunStore"]
