"""A run store in memory, on the event loop's clock, with replies that can come late.

:class:`MemoryRunStore` keeps the :class:`tether.RunStore` contract for one
event loop (no threads, no files), with its leases on ``anyio.current_time()``:
under trio's autojump ``MockClock`` a lease expires exactly when its virtual
time says so. For the writes of the run's first owner (its creator) only:
``late[method] = [seconds, ...]`` makes that method's replies come back that
much later, one delay per call in turn (then on time); the write is applied
when it arrives, at once, as a store that answers slowly would, so the store's
lease starts before the owner hears of it. ``hang`` holds every reply of the
methods named in it until :attr:`released` is set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from tether import LeaseLost
from tether.runtime import (
    Answer,
    Claim,
    Control,
    NewRun,
    Order,
    RunPage,
    RunStatus,
    Sort,
    StoredRun,
    ToolRecord,
    page_in_memory,
    summary_of,
)


@attrs.define
class _Row:
    run: NewRun
    status: str = "running"
    owner: str | None = None
    expires: float | None = None
    previous: str | None = None
    checkpoint: Any = None
    events: list[Any] = attrs.field(factory=list)
    result: Any = None
    cancel: str | None = None
    stop: bool = False
    pending: tuple[str, ...] = ()
    answers: tuple[Answer, ...] = ()
    epoch: int = 1
    tools: list[ToolRecord] = attrs.field(factory=list)
    #: The loop's clock at create and at the last change (for the listing's updated_at).
    born: float = 0.0
    changed: float = 0.0


class MemoryRunStore:
    """See the module docstring."""

    def __init__(self) -> None:
        self.rows: dict[str, _Row] = {}
        self.late: dict[str, list[float]] = {}
        self.hang: set[str] = set()
        self.creator: str | None = None
        self.released = anyio.Event()
        #: Every write as (method, run id, owner, epoch), in arrival order.
        self.writes: list[tuple[str, str, str, int | None]] = []

    async def _reply(self, method: str, owner: str) -> None:
        if owner != self.creator:
            await anyio.lowlevel.checkpoint()
            return
        if method in self.hang:
            await self.released.wait()
        delays = self.late.get(method)
        await anyio.sleep(delays.pop(0) if delays else 0)

    def _owned(self, method: str, run_id: str, owner: str, epoch: int | None) -> _Row:
        self.writes.append((method, run_id, owner, epoch))
        row = self.rows.get(run_id)
        now = anyio.current_time()
        if (
            row is None
            or row.status != "running"
            or row.owner != owner
            or (epoch is not None and epoch != row.epoch)
            or row.expires is None
            or row.expires <= now
        ):
            raise LeaseLost(f"{owner!r} no longer owns run {run_id!r}")
        return row

    def _stored(self, run_id: str, row: _Row) -> StoredRun:
        run = row.run
        return StoredRun(
            run_id=run_id,
            agent=run.agent,
            input=run.input,
            messages=run.messages,
            parent_run_id=run.parent_run_id,
            created_at=run.created_at,
            status=row.status,  # type: ignore[arg-type]
            owner=row.owner,
            lease_expires_at=row.expires,
            previous_owner=row.previous,
            checkpoint=row.checkpoint,
            events=len(row.events),
            result=row.result,
            cancel=row.cancel,
            stop=row.stop,
            pending=row.pending,
            answers=row.answers,
            epoch=row.epoch,
        )

    @staticmethod
    def _append(row: _Row, events: Sequence[Mapping[str, Any]]) -> None:
        for i, e in enumerate(events):
            if e["seq"] != len(row.events) + i:
                raise ValueError(f"event seq {e['seq']} does not follow")
        row.events += [dict(e) for e in events]

    async def create(self, run: NewRun, *, owner: str, lease_s: float) -> None:
        if run.run_id in self.rows:
            raise ValueError(f"the run store already has a run {run.run_id!r}")
        self.writes.append(("create", run.run_id, owner, 1))
        if self.creator is None:
            self.creator = owner
        now = anyio.current_time()
        self.rows[run.run_id] = _Row(
            run=run, owner=owner, expires=now + lease_s, born=now, changed=now
        )
        await self._reply("create", owner)

    async def get(self, run_id: str) -> StoredRun | None:
        await anyio.lowlevel.checkpoint()
        row = self.rows.get(run_id)
        return None if row is None else self._stored(run_id, row)

    async def commit(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, Any]],
        checkpoint: Mapping[str, Any] | None,
        lease_s: float,
        epoch: int | None = None,
    ) -> Control:
        row = self._owned("commit", run_id, owner, epoch)
        self._append(row, events)
        if checkpoint is not None:
            row.checkpoint = dict(checkpoint)
        row.expires = anyio.current_time() + lease_s
        control = Control(run_id=run_id, cancel=row.cancel, stop=row.stop)
        await self._reply("commit", owner)
        return control

    async def record_tool(
        self, run_id: str, *, owner: str, record: ToolRecord, epoch: int | None = None
    ) -> None:
        row = self._owned("record_tool", run_id, owner, epoch)
        row.tools = [r for r in row.tools if (r.round, r.call_id) != (record.round, record.call_id)]
        row.tools.append(record)
        await self._reply("record_tool", owner)

    async def tool_records(self, run_id: str, round: int | None = None) -> list[ToolRecord]:
        await anyio.lowlevel.checkpoint()
        row = self.rows.get(run_id)
        tools = [] if row is None else row.tools
        return [r for r in tools if round is None or r.round == round]

    async def park(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, Any]],
        checkpoint: Mapping[str, Any],
        pending: Sequence[str],
        epoch: int | None = None,
    ) -> None:
        row = self._owned("park", run_id, owner, epoch)
        self._append(row, events)
        row.checkpoint, row.pending, row.answers = dict(checkpoint), tuple(pending), ()
        row.status = "parked" if row.cancel is None else "ready"
        row.owner = row.expires = None
        await self._reply("park", owner)

    async def answer(self, run_id: str, answer: Answer) -> bool:
        await anyio.lowlevel.checkpoint()
        row = self.rows.get(run_id)
        if row is None or row.status != "parked" or answer.call_id not in row.pending:
            raise KeyError(run_id)
        if any(a.call_id == answer.call_id for a in row.answers):
            raise ValueError(answer.call_id)
        row.answers += (answer,)
        if len(row.answers) == len(row.pending):
            row.status = "ready"
            return True
        return False

    async def finish(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, Any]],
        result: Mapping[str, Any],
        epoch: int | None = None,
    ) -> None:
        row = self._owned("finish", run_id, owner, epoch)
        self._append(row, events)
        row.result, row.status, row.owner, row.expires = dict(result), "finished", None, None
        row.pending, row.tools = (), []
        row.changed = anyio.current_time()
        await self._reply("finish", owner)

    async def renew(
        self,
        owner: str,
        run_ids: Sequence[str],
        *,
        lease_s: float,
        epochs: Sequence[int] | None = None,
    ) -> list[Control]:
        fences: list[int | None] = [None] * len(run_ids) if epochs is None else list(epochs)
        controls = []
        for run_id, epoch in zip(run_ids, fences, strict=True):
            try:
                row = self._owned("renew", run_id, owner, epoch)
            except LeaseLost:
                controls.append(Control(run_id=run_id, lost=True))
                continue
            row.expires = anyio.current_time() + lease_s
            controls.append(Control(run_id=run_id, cancel=row.cancel, stop=row.stop))
        await self._reply("renew", owner)
        return controls

    async def release(self, run_id: str, *, owner: str) -> None:
        await anyio.lowlevel.checkpoint()
        row = self.rows.get(run_id)
        if row is not None and row.owner == owner and row.status == "running":
            row.owner, row.expires, row.previous = None, None, owner

    def _claimable(self, row: _Row) -> bool:
        now = anyio.current_time()
        expired = row.expires is None or row.expires <= now
        return row.status == "ready" or (row.status == "running" and expired)

    async def claimable(self, *, limit: int = 100) -> list[str]:
        await anyio.lowlevel.checkpoint()
        return [i for i, row in self.rows.items() if self._claimable(row)][:limit]

    async def claim(self, run_id: str, *, owner: str, lease_s: float) -> Claim | None:
        await anyio.lowlevel.checkpoint()
        row = self.rows.get(run_id)
        if row is None or not self._claimable(row):
            return None
        previous = None if row.status == "ready" else row.owner or row.previous
        row.status, row.owner, row.previous = "running", owner, previous
        row.expires = anyio.current_time() + lease_s
        row.epoch += 1
        self.writes.append(("claim", run_id, owner, row.epoch))
        return Claim(run=self._stored(run_id, row), previous_owner=previous)

    async def request(self, run_id: str, *, cancel: str | None = None, stop: bool = False) -> None:
        await anyio.lowlevel.checkpoint()
        row = self.rows[run_id]
        if row.status == "finished":
            return
        row.cancel = row.cancel or cancel
        row.stop = row.stop or stop
        if row.status == "parked" and cancel is not None:
            row.status = "ready"

    async def events(self, run_id: str, *, start: int = 0) -> list[Any]:
        await anyio.lowlevel.checkpoint()
        row = self.rows.get(run_id)
        return [] if row is None else row.events[start:]

    async def wait(self, run_id: str, *, seen: int, timeout_s: float) -> None:
        with anyio.move_on_after(timeout_s):
            while True:
                row = self.rows.get(run_id)
                if row is not None and (len(row.events) > seen or row.status == "finished"):
                    return
                await anyio.sleep(0.05)

    async def list_runs(
        self,
        *,
        agent: str | None = None,
        status: RunStatus | None = None,
        termination: str | None = None,
        since: float | None = None,
        until: float | None = None,
        order: Order = "newest",
        after: str | None = None,
        limit: int = 50,
        sort: Sort = "started",
    ) -> RunPage:
        """The listing (``tether.runtime.ListableRunStore``), by a scan: a test store."""
        await anyio.lowlevel.checkpoint()
        summaries = [
            summary_of(
                run_id=run_id,
                agent=row.run.agent,
                status=row.status,  # type: ignore[arg-type]
                parent_run_id=row.run.parent_run_id,
                created_at=row.run.created_at,
                updated_at=row.run.created_at + (row.changed - row.born),
                events=len(row.events),
                result=row.result,
                checkpoint=row.checkpoint,
            )
            for run_id, row in self.rows.items()
        ]
        return page_in_memory(
            summaries,
            agent=agent,
            status=status,
            termination=termination,
            since=since,
            until=until,
            order=order,
            after=after,
            limit=limit,
            sort=sort,
        )

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
