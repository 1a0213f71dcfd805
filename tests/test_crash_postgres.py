"""The crash-and-resume test on PostgreSQL (docs/guides/postgres.md): SIGKILL twice, resume, check.

The same test as tests/test_crash_sqlite.py (:mod:`tests.crash_durable`), on a
:class:`tether.postgres.PostgresRunStore` in a schema of the test's own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tether

from .approval_crash import approval_crash
from .crash_durable import crash_and_resume
from .pg import PgServer, test_dsn


def postgres_store(schema: str) -> tether.RunStore:
    """The store of the workers and the check (``tests.test_crash_postgres:postgres_store``)."""
    from tether.postgres import PostgresRunStore

    return PostgresRunStore(test_dsn(), schema=schema)


@pytest.mark.timeout(240)
# A crash campaign: asyncio in the default tier, trio in the slow one (pytest -m slow).
@pytest.mark.parametrize("backend", ["asyncio", pytest.param("trio", marks=pytest.mark.slow)])
def test_postgres_survives_sigkill(
    pg_server: PgServer, pg_schema: str, tmp_path: Path, backend: str
) -> None:
    """200 runs killed twice mid-flight end once each, gap-free, paid in full, no call redone."""
    seed = int(os.environ.get("TETHER_CRASH_SEED", "0")) or int.from_bytes(os.urandom(4), "big")
    tally = crash_and_resume(
        "tests.test_crash_postgres:postgres_store", pg_schema, tmp_path, backend, seed
    )
    print(f"crash test on PostgreSQL ({backend}, seed {seed}): {tally}")
    assert tally.runs == 200


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_approved_call_runs_once_across_crashes_on_postgres(
    pg_server: PgServer, pg_schema: str, tmp_path: Path, backend: str
) -> None:
    """The approval-crash probe (tests/approval_crash.py) on PostgreSQL: each call ran once,
    one ApprovalRequested, one seam, seq gap-free, usage exact."""
    approval_crash("tests.test_crash_postgres:postgres_store", pg_schema, tmp_path, backend, 1)
