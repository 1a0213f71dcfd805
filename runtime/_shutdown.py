"""What a Runtime closes as it exits, once its runs are over (``Runtime.__aexit__``)."""

from __future__ import annotations

import anyio

from ._budget import Budget
from ._conversations import ConversationStore
from ._keeper import Keeper
from ._services import RuntimeServices
from ._sinks import SinkThread


async def close_shared(
    services: RuntimeServices,
    budget: Budget | None,
    sink_thread: SinkThread | None,
    grace_s: float,
    conversations: ConversationStore | None,
    keeper: Keeper | None,
) -> None:
    """Close what the runs shared, shielded, each step bounded: the HTTP clients, the
    budget's ledger contact, the event sink (``grace_s`` to drain), the conversation
    store's and the run store's connections."""
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(5):
            await services.http.aclose()
        if budget is not None:
            with anyio.move_on_after(5):
                await budget.aclose()
        if sink_thread is not None:
            await sink_thread.aclose(grace_s)
        if conversations is not None:
            with anyio.move_on_after(5):
                await conversations.aclose()
        if keeper is not None:
            with anyio.move_on_after(5):
                await keeper.store.aclose()


__all__ = ["close_shared"]
