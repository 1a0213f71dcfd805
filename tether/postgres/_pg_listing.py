"""Listing the PostgreSQL run store's runs (:class:`tether.runtime.ListableRunStore`).

:class:`PostgresRunListing` is the part of :class:`~._pg_runs.PostgresRunStore`
that lists: keyset pages on the indexes that version 3 of the run tables adds
(:data:`RUNS_V3`). The summaries' counts are read out of the result's (or the
checkpoint's) JSON text on the server, so a page never carries messages.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from tether.runtime import (
    Order,
    RunPage,
    RunStatus,
    RunSummary,
    Sort,
    check_listing,
    listing_sql,
    page_of,
    summary_of_row,
)

from ._pg import PostgresDatabase

#: A finished run's termination, as the listing filters on it (and indexes it).
_TERMINATION = "{schema}.tether_json_at(result, 'termination')"

RUNS_V3 = (
    # A JSON path of a text column, NULL where PostgreSQL cannot read it: a value with
    # \u0000 (which the stores keep, as text) makes json's operators raise, and the
    # listing must neither fail on such a run nor refuse its write through the index.
    "CREATE FUNCTION {schema}.tether_json_at(doc text, VARIADIC path text[]) RETURNS text "
    "LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $f$ BEGIN RETURN doc::json #>> path; "
    "EXCEPTION WHEN others THEN RETURN NULL; END $f$",
    "CREATE INDEX runs_listed ON {schema}.runs (created_at, run_id)",
    "CREATE INDEX runs_by_agent ON {schema}.runs (agent, created_at, run_id)",
    "CREATE INDEX runs_by_status ON {schema}.runs (status, created_at, run_id)",
    f"CREATE INDEX runs_by_termination ON {{schema}}.runs ({_TERMINATION}, created_at, run_id)",
)


def _usage(key: str) -> str:
    return f"{{schema}}.tether_json_at(COALESCE(result, checkpoint), 'usage', '{key}')"


#: What a listing sorts by, in SQL (as :func:`tether.runtime.sort_value` computes it).
_SORT_BY = {
    "started": "created_at",
    "duration": "(CASE WHEN status = 'finished' THEN updated_at - created_at ELSE -1.0 END)",
    "tokens": (
        f"(CASE WHEN {_usage('input_tokens')} IS NULL AND {_usage('output_tokens')} IS NULL "
        f"THEN -1.0 ELSE COALESCE(({_usage('input_tokens')})::float8, 0) "
        f"+ COALESCE(({_usage('output_tokens')})::float8, 0) END)"
    ),
    "cost": (
        f"(CASE WHEN COALESCE({_usage('unpriced')}, 'false') NOT IN ('false', '0') THEN -1.0 "
        f"ELSE COALESCE(({_usage('cost_usd')})::float8, -1.0) END)"
    ),
    "rounds": f"COALESCE(({_usage('steps')})::float8, -1.0)",
}

#: The listing's row (:func:`tether.runtime.summary_of_row`): counts from the result,
#: else the checkpoint, read on the server so that the messages are never sent.
_SUMMARY = (
    "run_id, agent, status, parent_run_id, created_at, updated_at, events, "
    f"{_TERMINATION}, "
    + ", ".join(
        f"{{schema}}.tether_json_at(COALESCE(result, checkpoint), 'usage', '{key}')"
        for key in ("steps", "input_tokens", "output_tokens", "cost_usd", "unpriced")
    )
)


class PostgresRunListing(PostgresDatabase):
    """The listing of :class:`~._pg_runs.PostgresRunStore` (see the module docstring)."""

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
        """See :meth:`tether.runtime.ListableRunStore.list_runs`."""
        cursor = check_listing(status=status, order=order, limit=limit, after=after, sort=sort)
        tail, args = listing_sql(
            placeholder="%s",
            termination_expr=_TERMINATION,
            sort_expr=_SORT_BY[sort],
            agent=agent,
            status=status,
            termination=termination,
            since=since,
            until=until,
            order=order,
            cursor=cursor,
            limit=limit,
        )
        query = sql.SQL(f"SELECT {_SUMMARY} FROM {{runs}}{tail}").format(
            runs=self._t("runs"), schema=sql.Identifier(self.schema)
        )

        def job(conn: Any) -> list[RunSummary]:
            return [summary_of_row(row) for row in conn.execute(query, args).fetchall()]

        return page_of(await self._run(job), limit, sort)


__all__ = ["RUNS_V3", "PostgresRunListing"]
