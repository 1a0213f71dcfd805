from __future__ import annotations

import pytest

from .helpers import calls


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs on both anyio backends."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    """The shared call counter starts empty in every test."""
    calls.clear()


# Browser tests: page, a headless Chromium page (tests/browser.py).
from .browser import page as page  # noqa: E402

# PostgreSQL: pg_server, pg_dsn, pg_schema (tests/pg.py).
from .pg import pg_dsn as pg_dsn  # noqa: E402
from .pg import pg_schema as pg_schema  # noqa: E402
from .pg import pg_server as pg_server  # noqa: E402

# Ray: ray_cluster, one local cluster per session (tests/ray_cluster.py).
from .ray_cluster import ray_cluster as ray_cluster  # noqa: E402
