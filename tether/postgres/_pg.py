"""The PostgreSQL stores' plumbing: a connection pool, worker threads, a versioned schema.

:class:`PostgresDatabase` is what :class:`~tether.postgres.PostgresConversationStore`,
:class:`~tether.postgres.PostgresLessonStore` and the run store share; each names
its component, its schema version, its tables and its error class, and writes
its own statements. Importing this module needs the ``postgres`` extra
(``psycopg[binary]`` and ``psycopg-pool``).

Decisions:

* **Threads, on both backends.** psycopg's async connection runs on asyncio
  only, so every database call is a sync psycopg call in a worker thread
  (``anyio.to_thread.run_sync``) under the store's own capacity limiter of
  ``max_connections`` threads, as the SQLite stores do: asyncio and trio alike,
  and the event loop never blocks.
* **Connections.** A ``psycopg_pool.ConnectionPool`` of at most
  ``max_connections`` connections in autocommit mode, opened lazily on first
  use; a job borrows one for its length and opens its own transaction when it
  writes more than one row. Each connection is checked on checkout
  (:func:`_check_connection`: free for a healthy one); one that broke is
  given back at once (the pool replaces it) and the next one is taken, without
  a pause. (The pool's own ``check=`` sleeps a backoff of a second or more
  after each broken connection it finds, in the worker thread: after the server
  dropped every idle connection, a job stayed seconds in the check loop,
  one broken connection a second, and runs under a short lease lost it.)
  A fault that may pass (a lost connection, no connection in
  time, a statement timeout) raises the store's ``transient_error``, which
  the runtime retries (the run store's: ``RunStoreUnavailable``).
* **Schema.** Everything a store creates lives in one PostgreSQL schema
  (``schema="tether"`` by default; tests give each their own). The schema's
  ``tether_versions`` table holds one row per component (``conversations``,
  ``lessons``, ``runs``) with the version of its tables. On first use a store
  takes a transaction-level advisory lock (so two processes creating the
  tables at once do not race), creates or migrates its tables and records its
  version. A component at a version this tether does not know is refused, and
  so are tables of the store's names that tether did not record: nothing is
  changed in either case.
* **Cancellation.** Jobs run with ``abandon_on_cancel=False``: a cancelled
  caller waits for its job to end, so no thread is left running on a
  connection nobody owns, and a started write commits or rolls back whole.
  Each statement is bounded by ``statement_timeout_s``.
* **Durability of a commit.** ``synchronous_commit=None`` keeps the server's
  setting (PostgreSQL's default, ``on``: a write that returned survives a
  server crash, at the price of a WAL flush, milliseconds on a plain disk).
  ``False`` sets ``synchronous_commit=off`` for the store's connections: a
  *server* crash may lose the last few hundred milliseconds of writes (never
  corrupting anything); a crash of the process using the store loses nothing
  it committed either way. The lesson store defaults to ``False`` (as the
  SQLite lesson store's ``synchronous=NORMAL``), the others to ``None``.
* **Secrets.** A DSN's password never appears in a repr or an error.
* **Lifetime.** :meth:`PostgresDatabase.aclose` closes the pool; a later call
  opens a new one, so a store may outlive a ``Runtime``.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NoReturn, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

try:
    import psycopg
    import psycopg.conninfo
    import psycopg_pool
    from psycopg import sql
except ImportError as exc:  # pragma: no cover - exercised without the extra only
    raise ImportError(
        "tether.postgres needs psycopg 3: install the extra with "
        "pip install 'tether[postgres]' (psycopg[binary] and psycopg-pool)"
    ) from exc

from tether.providers import TetherError

_T = TypeVar("_T")

#: Connections (and worker threads) one store uses at most, unless told otherwise.
MAX_CONNECTIONS = 4

#: Where tether's tables go unless a store is told otherwise.
DEFAULT_SCHEMA = "tether"

#: The longest name PostgreSQL keeps (NAMEDATALEN - 1 bytes).
_MAX_NAME_BYTES = 63


def redact(dsn: str) -> str:
    """The DSN as it may be shown: without its password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    params.pop("password", None)
    host = params.pop("host", None) or "localhost"
    port = params.pop("port", None) or 5432
    user = params.pop("user", None)
    dbname = params.pop("dbname", None) or user or ""
    who = f"{user}@" if user else ""
    return f"postgresql://{who}{host}:{port}/{dbname}"


def check_schema_name(schema: object) -> str:
    if not isinstance(schema, str) or not schema:
        raise ValueError(f"schema must be a non-empty str, got {schema!r}")
    if len(schema.encode()) > _MAX_NAME_BYTES:
        raise ValueError(
            f"schema {schema!r} is longer than PostgreSQL's {_MAX_NAME_BYTES}-byte limit"
        )
    if "\x00" in schema:
        raise ValueError("schema must not contain NUL characters")
    return schema


class PostgresDatabase:
    """One store's share of a PostgreSQL database (see the module docstring).

    A subclass sets the class attributes below and runs its statements with
    :meth:`_run` (``job(connection)`` in a worker thread; the connection is in
    autocommit mode, so a job that writes more than one row opens its own
    ``with conn.transaction():``). Table names in statements are formatted
    with :meth:`_t` (the table, qualified by the store's schema).
    """

    #: How errors name the store ("lesson store").
    kind: ClassVar[str]
    error: ClassVar[type[TetherError]]
    #: The error for a fault that may pass (a lost connection, no connection in
    #: time, a statement timeout); ``error`` if unset.
    transient_error: ClassVar[type[TetherError] | None] = None
    #: The row of ``tether_versions`` this store owns ("lessons").
    component: ClassVar[str]
    schema_version: ClassVar[int]
    #: ``migrations[v]`` takes the component from version ``v`` to ``v + 1``;
    #: ``{schema}`` in a statement is the quoted schema name.
    migrations: ClassVar[Mapping[int, Sequence[str]]]
    #: The tables the component creates (checked before it creates them).
    tables: ClassVar[frozenset[str]]
    #: What :meth:`_fresh` makes anew in each process (never pickled).
    _local: ClassVar[frozenset[str]] = frozenset(
        {"_lock", "_pool", "_schema_ready", "_schema_lock", "_limiter_var"}
    )

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        max_connections: int = MAX_CONNECTIONS,
        connect_timeout_s: float = 10.0,
        statement_timeout_s: float = 30.0,
        synchronous_commit: bool | None = None,
    ) -> None:
        name = type(self).__name__
        if not isinstance(dsn, str) or not dsn:
            raise TypeError(f"{name} needs a PostgreSQL DSN str, e.g. 'postgresql://host/db'")
        try:
            psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"{name}: not a PostgreSQL DSN ({exc})") from None
        self.schema = check_schema_name(schema)
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ValueError(f"max_connections must be an int >= 1, got {max_connections!r}")
        for field, value in (
            ("connect_timeout_s", connect_timeout_s),
            ("statement_timeout_s", statement_timeout_s),
        ):
            if not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{field} must be a number > 0, got {value!r}")
        if synchronous_commit is not None and not isinstance(synchronous_commit, bool):
            raise TypeError(
                f"synchronous_commit must be True, False or None, got {synchronous_commit!r}"
            )
        self._dsn = dsn
        self.synchronous_commit = synchronous_commit
        self.max_connections = max_connections
        self.connect_timeout_s = float(connect_timeout_s)
        self.statement_timeout_s = float(statement_timeout_s)
        self._fresh()

    def _fresh(self) -> None:
        """The process-local machinery: no pool, lock or limiter is ever pickled."""
        name = type(self).__name__
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._limiter_var: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
            f"tether.{name}.limiter.{id(self)}"
        )

    @property
    def where(self) -> str:
        """The database and schema, as errors and reprs name them (no password)."""
        return f"{redact(self._dsn)} (schema {self.schema!r})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact(self._dsn)!r}, schema={self.schema!r})"

    # A store travels (to a Ray host, a child process) as its settings, the DSN
    # included (keep a password out of it: libpq reads PGPASSWORD or ~/.pgpass on
    # each machine); the copy opens its own pool when first used.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in self._local}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._fresh()

    async def aclose(self) -> None:
        """Close the store's connections (a later call opens new ones)."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.close, limiter=self._limiter())

    def close(self) -> None:
        """Close the pool now (synchronous; see :meth:`aclose`)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # --- plumbing --------------------------------------------------------------------

    def _t(self, table: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(table))

    def _limiter(self) -> anyio.CapacityLimiter:
        try:
            return self._limiter_var.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(self.max_connections)
            self._limiter_var.set(limiter)
            return limiter

    async def _run(self, job: Callable[[psycopg.Connection[tuple[object, ...]]], _T]) -> _T:
        return await anyio.to_thread.run_sync(
            self._with_connection, job, abandon_on_cancel=False, limiter=self._limiter()
        )

    def _connect_kwargs(self) -> dict[str, object]:
        options = f"-c statement_timeout={int(self.statement_timeout_s * 1000)}"
        if self.synchronous_commit is not None:
            options += f" -c synchronous_commit={'on' if self.synchronous_commit else 'off'}"
        return {
            "autocommit": True,
            "connect_timeout": max(1, round(self.connect_timeout_s)),
            "options": options,
        }

    def _get_pool(self) -> psycopg_pool.ConnectionPool:
        with self._lock:
            if self._pool is None:
                pool: psycopg_pool.ConnectionPool = psycopg_pool.ConnectionPool(
                    self._dsn,
                    min_size=1,
                    max_size=self.max_connections,
                    kwargs=self._connect_kwargs(),
                    timeout=self.connect_timeout_s,
                    open=False,
                    name=f"tether-{self.component}",
                )
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    def _with_connection(self, job: Callable[[psycopg.Connection[tuple[object, ...]]], _T]) -> _T:
        """In a worker thread: borrow a connection, run ``job``, give it back."""
        try:
            self._ensure_schema()
            pool = self._get_pool()
            conn = self._checkout(pool)
            try:
                with conn:  # as the pool's connection(): end the transaction, keep it open
                    return job(conn)
            finally:
                pool.putconn(conn)  # a broken one is discarded and replaced
        except psycopg_pool.PoolTimeout as exc:
            raise (self.transient_error or self.error)(
                f"{self.kind} at {self.where}: no connection within "
                f"{self.connect_timeout_s:g} s: is the server running and reachable? ({exc})"
            ) from exc
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    def _checkout(self, pool: psycopg_pool.ConnectionPool) -> psycopg.Connection[Any]:
        """A checked connection from ``pool`` within ``connect_timeout_s`` (else ``PoolTimeout``).

        A connection the server dropped (``pg_terminate_backend``, a restart) is
        given back, closed, for the pool to replace, and the next one is taken at
        once: after the server dropped them all, a job goes through the pool's
        idle connections in moments, not one per backoff pause (see the module
        docstring).
        """
        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            conn = pool.getconn(timeout=deadline - time.monotonic())
            try:
                _check_connection(conn)
            except psycopg.Error:
                conn.close()
                pool.putconn(conn)
                continue
            except BaseException:
                pool.putconn(conn)
                raise
            return conn

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if self._schema_ready:
                return
            try:
                conn = psycopg.connect(self._dsn, **self._connect_kwargs())  # type: ignore[arg-type]
            except psycopg.OperationalError as exc:
                raise self.error(
                    f"cannot connect to the {self.kind} at {self.where}: is the server "
                    f"running, and may this user connect? ({_first_line(exc)})"
                ) from exc
            with conn:
                self._set_up(conn)
            self._schema_ready = True

    def _set_up(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        schema = sql.Identifier(self.schema)
        versions = self._t("tether_versions")
        if self._current(conn):
            return  # no DDL, no lock: a role without CREATE may use tables made for it
        with conn.transaction():
            # One creator at a time per schema, across processes and machines.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"tether schema {self.schema}",),
            )
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (component text PRIMARY KEY, "
                    "version integer NOT NULL)"
                ).format(versions)
            )
            row = conn.execute(
                sql.SQL("SELECT version FROM {} WHERE component = %s").format(versions),
                (self.component,),
            ).fetchone()
            version = 0 if row is None else int(str(row[0]))
            if version > self.schema_version or version < 0:
                raise self.error(
                    f"{self.kind} at {self.where} has {self.component} tables of schema "
                    f"version {version}; this version of tether supports up to "
                    f"{self.schema_version} (were they written by a newer tether?). "
                    "Nothing was changed"
                )
            if version == 0:
                self._check_no_foreign_tables(conn)
            quoted = schema.as_string(conn)
            while version < self.schema_version:
                for statement in self.migrations[version]:
                    conn.execute(statement.format(schema=quoted).encode())
                version += 1
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (component, version) VALUES (%s, %s) "
                    "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version"
                ).format(versions),
                (self.component, version),
            )

    def _current(self, conn: psycopg.Connection[tuple[object, ...]]) -> bool:
        """Whether the component's tables are there at this tether's version (a read only)."""
        try:
            with conn.transaction():
                row = conn.execute(
                    sql.SQL("SELECT version FROM {} WHERE component = %s").format(
                        self._t("tether_versions")
                    ),
                    (self.component,),
                ).fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return False
        return row is not None and int(str(row[0])) == self.schema_version

    def _check_no_foreign_tables(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        found = sorted(
            str(row[0])
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = %s AND table_name = ANY(%s)",
                (self.schema, sorted(self.tables)),
            )
        )
        if found:
            self._refuse_foreign(
                f"it holds {', '.join(map(repr, found))} but no record of tether's "
                f"{self.component} tables in tether_versions"
            )

    def _refuse_foreign(self, why: str) -> NoReturn:
        raise self.error(
            f"{self.kind} at {self.where} is not a tether {self.kind}: {why}. It was left "
            f"untouched; give {type(self).__name__} another schema= or one that tether created"
        )

    def _translate(self, exc: psycopg.Error) -> TetherError:
        text = _first_line(exc)
        passing = self.transient_error or self.error
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return passing(
                f"{self.kind} at {self.where}: a statement ran past the statement timeout "
                f"({self.statement_timeout_s:g} s) ({text})"
            )
        if isinstance(exc, psycopg.OperationalError):
            return passing(
                f"{self.kind} at {self.where}: the connection failed; is the server "
                f"running? ({text})"
            )
        if isinstance(exc, psycopg.DataError):
            return self.error(f"{self.kind} at {self.where} cannot store this value ({text})")
        return self.error(f"{self.kind} at {self.where} failed: {text}")


def _check_connection(conn: psycopg.Connection[Any]) -> None:
    """The check on checkout (:meth:`PostgresDatabase._checkout`): raise if ``conn`` is
    not usable.

    An idle connection has nothing to read; something readable on its socket is
    the server speaking out of turn, which is how a terminated backend
    (``pg_terminate_backend``, a server restart) says goodbye, or the end of the
    stream. Only then is the connection tried with a round trip
    (``ConnectionPool.check_connection``), so a healthy connection costs no round
    trip, and a dropped one is replaced instead of failing the job it was given to.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    fd = conn.fileno()
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        readable = bool(poller.poll(0))
    else:  # pragma: no cover - Windows
        readable = bool(select.select([fd], [], [], 0)[0])
    if readable:
        psycopg_pool.ConnectionPool.check_connection(conn)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["DEFAULT_SCHEMA", "MAX_CONNECTIONS", "PostgresDatabase", "check_schema_name", "redact"]
