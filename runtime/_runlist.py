"""Listing a run store's runs, a page at a time (the run viewer's list; docs/guides/viewer.md).

:class:`ListableRunStore` is the listing part of the run store protocol:
:meth:`~ListableRunStore.list_runs` returns one :class:`RunPage` of
:class:`RunSummary` rows, filtered and sorted (by the time each run started,
or by its duration, tokens, cost or rounds), with **keyset pagination**: a
page ends with an opaque :attr:`RunPage.next` cursor (the last row's sort
value and run id), and the next page is the rows strictly after it in the
same order. A page costs the same however deep it is (no ``OFFSET``): the SQL
stores keep an index per filter that matches the order by start
(``created_at, run_id``; ``agent, ...``; ``status, ...``); the other sorts
read the counts out of each matching row (a scan: about 10 ms per 10,000 runs
on SQLite, ``benchmarks/viewer_list.py``). A value not known yet (a run still
running has no duration) sorts as -1: last when descending.

It is a protocol of its own, beside :class:`~._runstore.RunStore`, so that a
store written before it (or a wrapper around one) is still a ``RunStore``:
``SQLiteRunStore``, ``tether.postgres.PostgresRunStore`` and the test
suite's in-memory store implement both, and pass the same listing contract
(``tests/runstore_contract.py``).

A summary is read from the run's row alone: the result once finished, else
the last checkpoint (``None`` before the first: a run that just started has
no counts yet).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from ._runstore import JSON, RunStatus, RunStore

#: The statuses a listing can filter on (:data:`~._runstore.RunStatus`).
RUN_STATUSES: tuple[str, ...] = ("running", "parked", "ready", "finished")
#: The largest page :meth:`ListableRunStore.list_runs` returns.
MAX_PAGE = 500

#: ``newest``: descending (the latest start, the longest, the most tokens first);
#: ``oldest``: ascending.
Order = Literal["newest", "oldest"]
#: What a listing sorts by: the start, or the summary's duration, tokens, cost, rounds.
Sort = Literal["started", "duration", "tokens", "cost", "rounds"]
SORTS: tuple[str, ...] = ("started", "duration", "tokens", "cost", "rounds")


@attrs.frozen(kw_only=True)
class RunSummary:
    """One run as a listing shows it: what its row says, without its events."""

    run_id: str
    agent: str
    status: RunStatus
    parent_run_id: str | None
    #: When the run started, and when its row last changed (its end, once finished);
    #: seconds since the epoch, the store's clock.
    created_at: float
    updated_at: float
    #: The termination reason once finished, else ``None``.
    termination: str | None
    #: From the result's usage once finished, else from the last checkpoint's
    #: (``None`` before the first checkpoint). ``cost_usd`` is ``None`` when unpriced.
    rounds: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    #: How many events are stored.
    events: int

    @property
    def tokens(self) -> int | None:
        """Input plus output tokens (``None`` when not known yet)."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    @property
    def duration_s(self) -> float | None:
        """From start to end for a finished run, else ``None``."""
        return self.updated_at - self.created_at if self.status == "finished" else None


@attrs.frozen(kw_only=True)
class RunPage:
    """One page of :meth:`ListableRunStore.list_runs`."""

    runs: tuple[RunSummary, ...]
    #: The cursor of the next page (pass it as ``after=``), ``None`` on the last page.
    next: str | None


@runtime_checkable
class ListableRunStore(RunStore, Protocol):
    """A run store that can list its runs (see the module docstring)."""

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
        """Up to ``limit`` runs (1 to :data:`MAX_PAGE`) sorted by ``sort`` (their
        start, duration, tokens, cost or rounds; ``newest`` descending, ``oldest``
        ascending; ties by run id), with every filter given: of ``agent``, with
        ``status``, ended with ``termination``, started at or after ``since`` and
        before ``until``. ``after``: a :attr:`RunPage.next` cursor of the same
        query (the page after it). A ``ValueError`` for a bad status, order, sort,
        limit or cursor.
        """
        ...


def check_listing(
    *, status: str | None, order: str, limit: int, after: str | None, sort: str = "started"
) -> tuple[float, str] | None:
    """Validate :meth:`~ListableRunStore.list_runs`' arguments; the decoded cursor."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}; got {sort!r}")
    if status is not None and status not in RUN_STATUSES:
        raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}; got {status!r}")
    if order not in ("newest", "oldest"):
        raise ValueError(f"order must be 'newest' or 'oldest', got {order!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be an int from 1 to {MAX_PAGE}, got {limit!r}")
    return None if after is None else decode_cursor(after)


def encode_cursor(created_at: float, run_id: str) -> str:
    """The opaque cursor of the row ``(created_at, run_id)``."""
    text = json.dumps([created_at, run_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The row a cursor names; a ``ValueError`` for anything :func:`encode_cursor` did not make."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created_at, run_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if isinstance(created_at, bool) or not isinstance(created_at, int | float):
            raise TypeError
        if not isinstance(run_id, str):
            raise TypeError
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a run listing cursor: {cursor!r}") from exc
    return float(created_at), run_id


def sort_value(summary: RunSummary, sort: str) -> float:
    """The value a listing sorts ``summary`` by (-1 where it is not known yet); the SQL
    stores compute the same in SQL (their ``sort_expr``), and a cursor carries it."""
    if sort == "started":
        return summary.created_at
    known = {
        "duration": summary.duration_s,
        "tokens": summary.tokens,
        "cost": summary.cost_usd,
        "rounds": summary.rounds,
    }[sort]
    return -1.0 if known is None else float(known)


def listing_sql(
    *,
    placeholder: str,
    termination_expr: str,
    sort_expr: str = "created_at",
    agent: str | None,
    status: str | None,
    termination: str | None,
    since: float | None,
    until: float | None,
    order: Order,
    cursor: tuple[float, str] | None,
    limit: int,
) -> tuple[str, list[Any]]:
    """The ``WHERE ... ORDER BY ... LIMIT`` of a listing on the SQL stores (``placeholder``:
    ``?`` or ``%s``); one more row than the page, to know whether another follows."""
    p = placeholder
    where: list[str] = []
    args: list[Any] = []
    if agent is not None:
        where.append(f"agent = {p}")
        args.append(agent)
    if status is not None:
        where.append(f"status = {p}")
        args.append(status)
    if termination is not None:
        where.append(f"{termination_expr} = {p}")
        args.append(termination)
    if since is not None:
        where.append(f"created_at >= {p}")
        args.append(float(since))
    if until is not None:
        where.append(f"created_at < {p}")
        args.append(float(until))
    direction = "DESC" if order == "newest" else "ASC"
    if cursor is not None:
        where.append(f"({sort_expr}, run_id) {'<' if order == 'newest' else '>'} ({p}, {p})")
        args.extend(cursor)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    args.append(limit + 1)
    return (
        f"{clause} ORDER BY {sort_expr} {direction}, run_id {direction} LIMIT {p}",
        args,
    )


def page_of(rows: Sequence[RunSummary], limit: int, sort: str = "started") -> RunPage:
    """A page of the first ``limit`` of ``rows`` (``limit + 1`` were asked for)."""
    shown = tuple(rows[:limit])
    more = len(rows) > limit
    last = shown[-1] if shown else None
    return RunPage(
        runs=shown,
        next=encode_cursor(sort_value(last, sort), last.run_id)
        if more and last is not None
        else None,
    )


def page_in_memory(
    summaries: Sequence[RunSummary],
    *,
    agent: str | None = None,
    status: str | None = None,
    termination: str | None = None,
    since: float | None = None,
    until: float | None = None,
    order: Order = "newest",
    after: str | None = None,
    limit: int = 50,
    sort: Sort = "started",
) -> RunPage:
    """:meth:`ListableRunStore.list_runs` over summaries held in memory (a scan): for a
    store or a trace that keeps no index."""
    cursor = check_listing(status=status, order=order, limit=limit, after=after, sort=sort)
    newest = order == "newest"
    keyed = sorted(
        ((sort_value(s, sort), s.run_id, s) for s in summaries),
        key=lambda row: row[:2],
        reverse=newest,
    )
    chosen = [
        s
        for value, run_id, s in keyed
        if (agent is None or s.agent == agent)
        and (status is None or s.status == status)
        and (termination is None or s.termination == termination)
        and (since is None or s.created_at >= since)
        and (until is None or s.created_at < until)
        and (cursor is None or ((value, run_id) < cursor if newest else (value, run_id) > cursor))
    ]
    return page_of(chosen[: limit + 1], limit, sort)


def summary_of(
    *,
    run_id: str,
    agent: str,
    status: RunStatus,
    parent_run_id: str | None,
    created_at: float,
    updated_at: float,
    events: int,
    result: Mapping[str, JSON] | None,
    checkpoint: Mapping[str, JSON] | None,
) -> RunSummary:
    """A summary from a run's result (if finished) or checkpoint (a store in memory)."""
    source = result if result is not None else checkpoint
    usage = (source or {}).get("usage") or {}
    unpriced = bool(usage.get("unpriced"))
    cost = usage.get("cost_usd")
    return RunSummary(
        run_id=run_id,
        agent=agent,
        status=status,
        parent_run_id=parent_run_id,
        created_at=float(created_at),
        updated_at=float(updated_at),
        termination=None if result is None else result.get("termination"),
        rounds=_int(usage.get("steps")),
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cost_usd=None if unpriced or cost is None else float(cost),
        events=int(events),
    )


def summary_of_row(row: Sequence[Any]) -> RunSummary:
    """A summary from the SQL stores' listing row: run_id, agent, status, parent_run_id,
    created_at, updated_at, events, termination, steps, input tokens, output tokens,
    cost, unpriced (the last six read out of the result or checkpoint JSON)."""
    unpriced = row[12] not in (None, 0, False, "false")
    return RunSummary(
        run_id=row[0],
        agent=row[1],
        status=row[2],
        parent_run_id=row[3],
        created_at=float(row[4]),
        updated_at=float(row[5]),
        events=int(row[6]),
        termination=row[7],
        rounds=_int(row[8]),
        input_tokens=_int(row[9]),
        output_tokens=_int(row[10]),
        cost_usd=None if unpriced or row[11] is None else float(row[11]),
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


__all__ = [
    "MAX_PAGE",
    "RUN_STATUSES",
    "SORTS",
    "ListableRunStore",
    "Order",
    "RunPage",
    "RunSummary",
    "Sort",
    "check_listing",
    "decode_cursor",
    "encode_cursor",
    "listing_sql",
    "page_in_memory",
    "page_of",
    "sort_value",
    "summary_of",
    "summary_of_row",
]
