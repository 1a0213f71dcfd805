"""The run viewer on a PostgreSQL run store (docs/guides/viewer.md)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tether import web

from .pg import PgServer, need_psycopg
from .viewer_agents import fill

pytestmark = pytest.mark.anyio

need_psycopg()

from tether.postgres import PostgresRunStore  # noqa: E402


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://viewer")


async def test_a_postgres_store_is_listed_and_shown(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """The viewer on PostgreSQL: the same list, filters and run page as on SQLite."""
    store = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    try:
        await fill(store)
        async with client(web.app(store=store)) as c:
            assert (await c.get("/")).text.count("<tr data-run=") == 5
            finished = (await c.get("/?status=finished&termination=max_steps")).text
            assert finished.count("<tr data-run=") == 1
            assert 'data-run="loop-0"' in finished
            assert "The sum is 5." in (await c.get("/runs/calc-1")).text
    finally:
        await store.aclose()
