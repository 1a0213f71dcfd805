"""Where the viewer reads runs from: a run store (:class:`StoreSource`) or a JSONL trace
(:class:`TraceSource`). Both answer the same three questions: a page of the list, one
run's record, and its events from a ``seq`` on."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import attrs

from tether.runtime import (
    ListableRunStore,
    Order,
    RunPage,
    RunStatus,
    RunSummary,
    Runtime,
    Sort,
    StoredRun,
    TrailReader,
    page_in_memory,
    summary_of,
)


@attrs.frozen(kw_only=True)
class Filters:
    """The list's query: every field optional."""

    agent: str | None = None
    status: RunStatus | None = None
    termination: str | None = None
    since: float | None = None
    until: float | None = None
    order: Order = "newest"
    after: str | None = None
    limit: int = 50
    sort: Sort = "started"


class Source(Protocol):
    live: bool

    async def news(self, run: StoredRun, seen: int) -> tuple[int, str]: ...

    async def page(self, filters: Filters) -> RunPage: ...

    async def run(self, run_id: str) -> StoredRun | None: ...

    async def events(self, run_id: str, start: int = 0) -> list[Any]: ...

    async def wait(self, run_id: str, seen: int, timeout_s: float) -> None: ...


class StoreSource:
    """A run store that can list its runs."""

    live = True

    def __init__(self, store: ListableRunStore) -> None:
        self.store = store

    async def page(self, filters: Filters) -> RunPage:
        return await self.store.list_runs(**attrs.asdict(filters))

    async def run(self, run_id: str) -> StoredRun | None:
        return await self.store.get(run_id)

    async def events(self, run_id: str, start: int = 0) -> list[Any]:
        return list(await self.store.events(run_id, start=start))

    async def wait(self, run_id: str, seen: int, timeout_s: float) -> None:
        await self.store.wait(run_id, seen=seen, timeout_s=timeout_s)

    async def news(self, run: StoredRun, seen: int) -> tuple[int, str]:
        """How many events the run has now, and its status."""
        await anyio.lowlevel.checkpoint()
        return run.events, run.status


class LiveSource(StoreSource):
    """A store and the Runtime that runs some of its runs: a run in flight there is
    read from its trail in memory, which has every event at once (the store has them
    as of the last round boundary); any other from the store."""

    def __init__(self, store: ListableRunStore, runtime: Runtime) -> None:
        super().__init__(store)
        self.runtime = runtime

    def _trail(self, run_id: str, start: int) -> TrailReader | None:
        handle = self.runtime.in_flight(run_id)
        return None if handle is None else handle.reader("events", start=start)

    async def events(self, run_id: str, start: int = 0) -> list[Any]:
        stored = await super().events(run_id, start)
        reader = self._trail(run_id, start)
        if reader is None:
            return stored
        try:
            by_seq = {int(e["seq"]): e for e in stored}
            while batch := reader.drain():
                by_seq.update((int(e["seq"]), e) for e in batch)
        finally:
            reader.close()
        return [by_seq[seq] for seq in sorted(by_seq)]

    async def news(self, run: StoredRun, seen: int) -> tuple[int, str]:
        reader = self._trail(run.run_id, max(seen, 0))
        if reader is None:
            return await super().news(run, seen)
        try:
            count = max(seen, 0)
            while batch := reader.drain():
                count += len(batch)
        finally:
            reader.close()
        await anyio.lowlevel.checkpoint()
        return max(count, run.events), run.status

    async def wait(self, run_id: str, seen: int, timeout_s: float) -> None:
        reader = self._trail(run_id, max(seen, 0))
        if reader is None:
            await super().wait(run_id, seen, timeout_s)
            return
        try:
            with anyio.move_on_after(timeout_s):
                if not reader.drain() and not reader.finished:
                    await reader.wait_change()
        finally:
            reader.close()


class TraceSource:
    """A JSONL trace (``JsonlSink``'s file), read once when the app starts serving.

    Runs are made from their events: a run with ``RunFinished`` is finished (its
    usage and termination from that event), any other is shown as running.
    """

    live = False

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"no trace file at {str(self.path)!r}")
        self._events: dict[str, list[dict[str, Any]]] = {}
        self._runs: dict[str, StoredRun] = {}
        self._summaries: list[RunSummary] = []
        self._loaded = False

    def _load(self) -> None:
        by_run: dict[str, list[dict[str, Any]]] = {}
        with self.path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise ValueError(f"{self.path}: line {number} is not JSON ({exc})") from None
                if isinstance(event, dict) and isinstance(event.get("run_id"), str):
                    by_run.setdefault(event["run_id"], []).append(event)
        for run_id, events in by_run.items():
            events.sort(key=lambda e: int(e.get("seq", 0)))
            started = next((e for e in events if e.get("type") == "RunStarted"), events[0])
            finished = next((e for e in events if e.get("type") == "RunFinished"), None)
            result = None
            if finished is not None:
                result = {
                    "termination": finished.get("termination"),
                    "usage": finished.get("usage") or {},
                    "output": finished.get("output"),
                    "error": finished.get("error"),
                }
            created = float(started.get("at", 0.0))
            updated = float(events[-1].get("at", created))
            status: RunStatus = "finished" if finished is not None else "running"
            self._events[run_id] = events
            self._runs[run_id] = StoredRun(
                run_id=run_id,
                agent=str(started.get("agent", "?")),
                input=str(started.get("input", "")),
                messages=[],
                parent_run_id=started.get("parent_run_id"),
                created_at=created,
                status=status,
                owner=None,
                lease_expires_at=None,
                previous_owner=None,
                checkpoint=None,
                events=len(events),
                result=result,
                cancel=None,
                stop=False,
            )
            self._summaries.append(
                summary_of(
                    run_id=run_id,
                    agent=str(started.get("agent", "?")),
                    status=status,
                    parent_run_id=started.get("parent_run_id"),
                    created_at=created,
                    updated_at=updated,
                    events=len(events),
                    result=result,
                    checkpoint=None,
                )
            )
        self._loaded = True

    async def _ready(self) -> None:
        if not self._loaded:
            await anyio.to_thread.run_sync(self._load)
        else:
            await anyio.lowlevel.checkpoint()

    async def page(self, filters: Filters) -> RunPage:
        await self._ready()
        f = filters
        return page_in_memory(self._summaries, **attrs.asdict(f))

    async def run(self, run_id: str) -> StoredRun | None:
        await self._ready()
        return self._runs.get(run_id)

    async def events(self, run_id: str, start: int = 0) -> list[Any]:
        await self._ready()
        return [e for e in self._events.get(run_id, []) if int(e.get("seq", 0)) >= start]

    async def wait(self, run_id: str, seen: int, timeout_s: float) -> None:
        await anyio.sleep(timeout_s)  # a trace does not grow while it is served

    async def news(self, run: StoredRun, seen: int) -> tuple[int, str]:
        await anyio.lowlevel.checkpoint()
        return run.events, run.status


def usage_of(run: StoredRun) -> Mapping[str, Any]:
    """The run's usage: the result's once finished, else the last checkpoint's."""
    source = run.result if run.result is not None else run.checkpoint
    usage = (source or {}).get("usage") if isinstance(source, dict) else None
    return usage if isinstance(usage, dict) else {}


__all__ = ["Filters", "LiveSource", "Source", "StoreSource", "TraceSource", "usage_of"]
