"""httpx clients for the HTTP providers (imported on first use, never by ``import tether``).

- :data:`DEFAULT_TIMEOUT`, :data:`DEFAULT_LIMITS`: what an :class:`~._pool.HttpPool`
  and a temporary client use unless told otherwise.
- :func:`new_client`: one client with those settings and the shared TLS context.
- :func:`client_for`: the pool's client for a request, or a temporary one.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from collections.abc import AsyncIterator
from typing import cast

import anyio
import httpx

from ._types import HttpPoolLike

#: Connect quickly or fail; a model may think for minutes before its next byte.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=60.0)
DEFAULT_LIMITS = httpx.Limits(
    max_connections=200, max_keepalive_connections=50, keepalive_expiry=30.0
)


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One default TLS context for every client (building one costs ~30 ms)."""
    return httpx.create_ssl_context()


def new_client(
    timeout: httpx.Timeout | None = None, limits: httpx.Limits | None = None
) -> httpx.AsyncClient:
    """A client with ``timeout`` and ``limits`` (the defaults where ``None``)."""
    return httpx.AsyncClient(
        timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
        limits=DEFAULT_LIMITS if limits is None else limits,
        verify=ssl_context(),
    )


@contextlib.asynccontextmanager
async def client_for(http: HttpPoolLike | None, base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The pool's client for ``base_url``, or a temporary one closed on exit."""
    if http is not None:
        yield cast(httpx.AsyncClient, http.client(base_url))
        return
    client = new_client()
    try:
        yield client
    finally:
        with anyio.move_on_after(5.0, shield=True):
            await client.aclose()


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT",
    "client_for",
    "new_client",
    "ssl_context",
]
