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
