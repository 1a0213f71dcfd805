"""The PostgreSQL server the tests use: fixtures that isolate each test in a schema of its own.

The server is ``postgresql://postgres@127.0.0.1:5432/test`` (``TETHER_TEST_POSTGRES``
overrides it). A test that needs it takes ``pg_dsn`` and ``pg_schema``: a fresh
schema, dropped after the test; every schema of the session shares one prefix
and whatever a failed teardown left is dropped when the session ends.

Without a server (or without the ``postgres`` extra) those tests are skipped,
saying why; under CI (the ``CI`` environment variable set, as ``.ci/run`` runs
on the project's machines) they fail instead, since CI must test PostgreSQL.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def test_dsn() -> str:
    """The DSN of the test server."""
    return os.environ.get("TETHER_TEST_POSTGRES", DEFAULT_DSN)


test_dsn.__test__ = False  # type: ignore[attr-defined]  # not a test: pytest collects test_*


class PgServer:
    """The reachable test server and the schemas this session made on it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.prefix = f"tether_test_{os.getpid()}_{secrets.token_hex(3)}"
        self._count = 0

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)

    def new_schema(self) -> str:
        self._count += 1
        return f"{self.prefix}_{self._count}"

    def drop(self, schema: str | None = None) -> None:
        """Drop one schema, or (``None``) every schema this session made."""
        with self.connect() as conn:
            if schema is None:
                names = [
                    row[0]
                    for row in conn.execute(
                        "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                        (f"{self.prefix}_",),
                    )
                ]
            else:
                names = [schema]
            for name in names:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is needed under CI and {why}", pytrace=False)
    pytest.skip(f"no PostgreSQL for the tests: {why} (CI fails here instead of skipping)")


def need_psycopg() -> None:
    """At a test module's top: skip the module without psycopg (fail it under CI)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        why = "psycopg is not installed (pip install -e '.[dev]' installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is needed under CI and {why}", pytrace=False)
        pytest.skip(f"no PostgreSQL for the tests: {why}", allow_module_level=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The test server, or a skip (a failure under CI) when it cannot be reached."""
    dsn = test_dsn()
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[dev]' installs it)")
    server = PgServer(dsn)
    try:
        with server.connect() as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        _unavailable(f"{dsn} does not answer ({str(exc).strip().splitlines()[0]})")
    yield server
    server.drop()


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    """The DSN of the test server."""
    return pg_server.dsn


@pytest.fixture
def pg_schema(pg_server: PgServer) -> Iterator[str]:
    """A schema of this test's own on the test server, dropped afterwards."""
    schema = pg_server.new_schema()
    yield schema
    pg_server.drop(schema)
