"""A run store's operations tried again through faults that may pass (DESIGN §22).

A store raises :class:`~._runstore.RunStoreUnavailable` for a fault that may
pass: a connection the server dropped, no connection in time, a SQLite file
busy, locked, or full. :func:`retried` tries the operation again, with
exponential backoff and jitter (50 ms doubling to 1 s), until it returns, raises
anything else, or the fault has lasted ``within_s`` (a run's ``lease_s``:
past it, the lease the writes hold has lapsed too, and the run ends
``store_failed``, see :mod:`._durable`); then the last fault is raised.

**A write whose outcome is unknown.** A fault can land after the store
committed the write and before the answer came back (a connection lost at
``COMMIT``). Trying it again is then refused: a commit's, park's or finish's
first event ``seq`` is taken (``ValueError``), a finished or parked run is
not the writer's (:class:`~._runstore.LeaseLost`), a created run exists
(``ValueError``). Decision: the *store* stays strict (each write checks the
``seq`` and the lease, as the contract says), and the runtime settles the
doubt: after a fault, such a refusal calls ``landed()``, which reads the
store and says whether the earlier attempt is what it holds (the same events,
compared as JSON, at the same ``seq``; the same result; the same owner) and,
if so, what the write would have returned. It counts as done then; otherwise
the refusal stands. Content equality is sound here because every event carries
its time and the writer's ``seq``: another writer's events are never equal to
this one's. A :meth:`~._runstore.RunStore.record_tool` replaces the record of
its call and :meth:`~._runstore.RunStore.renew` sets a lease: both are
idempotent as they are, and reads are.

Nothing here runs unless a store call failed: a run whose store answers pays
one ``try`` per write.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import attrs

from ._log import store_fault
from ._runstore import JSON, LeaseLost, RunStore, RunStoreUnavailable

T = TypeVar("T")

#: The first pause before trying again, and the longest (seconds).
FIRST_PAUSE_S = 0.05
LONGEST_PAUSE_S = 1.0


async def retried(
    op: Callable[[], Awaitable[T]],
    *,
    within_s: float,
    landed: Callable[[], Awaitable[T | None]] | None = None,
    until: float | None = None,
    run_id: str | None = None,
) -> T:
    """``await op()``, tried again through :class:`RunStoreUnavailable` for ``within_s``
    from the first fault, or (``until``) up to that moment of ``anyio.current_time()``.

    The fault is logged (WARNING on the ``tether`` logger, for ``run_id``) when it
    first happens and when it is given up on, not at every try.

    After a fault, a ``ValueError`` or :class:`LeaseLost` from a later try asks
    ``landed()`` whether the faulted try took effect; its answer (not ``None``)
    is then the result (see the module docstring).
    """
    deadline = until
    faulted = False
    pause = FIRST_PAUSE_S
    while True:
        try:
            return await op()
        except RunStoreUnavailable as exc:
            now = anyio.current_time()
            if deadline is None:
                deadline = now + within_s
            if not faulted:
                faulted = True
                store_fault(run_id, exc, gave_up=False)
            if now >= deadline:
                store_fault(run_id, exc, gave_up=True)
                raise
            # Jitter: the runs of one Runtime hit by one fault do not come back in step.
            await anyio.sleep(min(pause * random.uniform(0.5, 1.0), deadline - now))
            pause = min(pause * 2, LONGEST_PAUSE_S)
        except (ValueError, LeaseLost):
            if not faulted or landed is None:
                raise
            settled = await retried(landed, within_s=within_s, until=until, run_id=run_id)
            if settled is None:
                raise
            return settled


@attrs.define
class Faults:
    """When one Runtime's store last failed past a retry (``anyio.current_time()``): its
    runs' writes and its keeper's renewals share one. A lease found lapsed soon after
    lapsed *because* the store failed (see ``Durable._write``)."""

    last: float | None = None

    def seen(self) -> None:
        self.last = anyio.current_time()

    def recent(self, within_s: float) -> bool:
        return self.last is not None and anyio.current_time() - self.last < within_s


def same(stored: JSON, written: JSON) -> bool:
    """Whether ``stored`` (read back) is what ``written`` was, as JSON."""
    return _canonical(stored) == _canonical(json.loads(json.dumps(written)))


async def holds_events(store: RunStore, run_id: str, events: Sequence[Mapping[str, JSON]]) -> bool:
    """Whether the store holds ``events`` (at their own ``seq``), as they were written."""
    if not events:
        return True
    first = int(events[0]["seq"])
    stored = await store.events(run_id, start=first)
    return len(stored) >= len(events) and all(
        same(s, e) for s, e in zip(stored, events, strict=False)
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


__all__ = ["Faults", "holds_events", "retried", "same"]
