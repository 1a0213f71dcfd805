"""The shared HTTP clients of the HTTP providers, for a Runtime.

:class:`HttpPool` holds one ``httpx.AsyncClient`` per endpoint. httpx itself
is imported when the first client is made (:mod:`tether.providers._clients`),
not when a Runtime builds its pool: a run on the scripted provider, a CLI
call or a worker's cold start never pays for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    import httpx


@attrs.define(eq=False)
class HttpPool:
    """One ``httpx.AsyncClient`` per endpoint, created on first use.

    A Runtime owns one and passes it to providers as ``ProviderContext.http``;
    ``aclose()`` closes every client. A provider used outside a Runtime gets
    ``http=None`` and opens a temporary client per request instead.
    ``timeout`` and ``limits`` left ``None`` are ``_clients.DEFAULT_TIMEOUT``
    and ``_clients.DEFAULT_LIMITS``.
    """

    timeout: httpx.Timeout | None = attrs.field(default=None)
    limits: httpx.Limits | None = attrs.field(default=None)
    _clients: dict[str, httpx.AsyncClient] = attrs.field(init=False, factory=dict, repr=False)
    _closed: bool = attrs.field(init=False, default=False)

    def client(self, base_url: str) -> httpx.AsyncClient:
        """The shared client for ``base_url`` (requests use absolute URLs)."""
        if self._closed:
            raise RuntimeError("HttpPool is closed")
        key = base_url.rstrip("/")
        client = self._clients.get(key)
        if client is None:
            from ._clients import new_client

            client = new_client(self.timeout, self.limits)
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


__all__ = ["HttpPool"]
