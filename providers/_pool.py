"""The HTTP clients of the HTTP providers.

- :class:`HttpPool`: one ``httpx.AsyncClient`` per endpoint, for a Runtime.
- :func:`client_for`: the pool's client for a request, or a temporary one.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from collections.abc import AsyncIterator
from typing import cast

import anyio
import attrs
import httpx

from ._types import HttpPoolLike

#: Connect quickly or fail; a model may think for minutes before its next byte.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=60.0)
DEFAULT_LIMITS = httpx.Limits(
    max_connections=200, max_keepalive_connections=50, keepalive_expiry=30.0
)


@attrs.define(eq=False)
class HttpPool:
    """One ``httpx.AsyncClient`` per endpoint, created on first use.

    A Runtime owns one and passes it to providers as ``ProviderContext.http``;
    ``aclose()`` closes every client. A provider used outside a Runtime gets
    ``http=None`` and opens a temporary client per request instead.
    """

    timeout: httpx.Timeout = attrs.field(default=DEFAULT_TIMEOUT)
    limits: httpx.Limits = attrs.field(default=DEFAULT_LIMITS)
    _clients: dict[str, httpx.AsyncClient] = attrs.field(init=False, factory=dict, repr=False)
    _closed: bool = attrs.field(init=False, default=False)

    def client(self, base_url: str) -> httpx.AsyncClient:
        """The shared client for ``base_url`` (requests use absolute URLs)."""
        if self._closed:
            raise RuntimeError("HttpPool is closed")
        key = base_url.rstrip("/")
        client = self._clients.get(key)
        if client is None:
            client = httpx.AsyncClient(
                timeout=self.timeout, limits=self.limits, verify=ssl_context()
            )
            self._clients[key] = client
        return client

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Close every client; idempotent."""
        self._closed = True
        clients = list(self._clients.values())
        self._clients.clear()
        first: BaseException | None = None
        for client in clients:
            try:
                await client.aclose()
            except Exception as exc:  # close the others all the same
                first = first or exc
        if first is not None:
            raise first

    async def __aenter__(self) -> HttpPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One default TLS context for every client (building one costs ~30 ms)."""
    return httpx.create_ssl_context()


@contextlib.asynccontextmanager
async def client_for(http: HttpPoolLike | None, base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The pool's client for ``base_url``, or a temporary one closed on exit."""
    if http is not None:
        yield cast(httpx.AsyncClient, http.client(base_url))
        return
    client = httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS, verify=ssl_context())
    try:
        yield client
    finally:
        with anyio.move_on_after(5.0, shield=True):
            await client.aclose()


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT",
    "HttpPool",
    "client_for",
]
