"""The run viewer's list at 10,000 runs: server time of its first page and of a deep one.

    python benchmarks/viewer_list.py [--runs 10000] [--repeat 20] [--pg DSN]

Fills a SQLite run store with ``--runs`` finished runs (rows written directly
through the store's own methods: create, then finish with a result), then times
``GET /`` (the first page of 50), filtered pages, the page after 100 pages
of cursors, and pages sorted by tokens or duration (the first, and the 101st),
through the ASGI app in process (httpx's ASGI transport: server time, no
network). Prints the median and the worst of ``--repeat`` requests each.
``--pg DSN`` does the same on ``tether.postgres.PostgresRunStore`` (in a schema of
its own, dropped afterwards).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx

import tether
from tether import web
from tether.runtime import NewRun


async def fill(store: Any, runs: int) -> None:
    agents = ("planner", "researcher", "writer", "critic")
    ends = ("answered", "answered", "answered", "max_steps", "cancelled")
    for i in range(runs):
        run_id = f"run-{i:06d}"
        await store.create(
            NewRun(run_id=run_id, agent=agents[i % 4], input=f"q{i}", created_at=1.7e9 + i),
            owner="bench",
            lease_s=600,
        )
        event = {"type": "RunFinished", "run_id": run_id, "seq": 0, "round": 2, "at": 1.7e9 + i}
        usage = {"steps": 2, "input_tokens": 120, "output_tokens": 40, "cost_usd": 0.001}
        await store.finish(
            run_id,
            owner="bench",
            events=[event],
            result={"termination": ends[i % 5], "usage": usage, "output": "x" * 200},
        )


async def timed(client: httpx.AsyncClient, url: str, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = await client.get(url)
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text
    return statistics.median(times) * 1000, max(times) * 1000


async def main(runs: int, repeat: int, pg: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        schema = f"viewer_bench_{uuid.uuid4().hex[:8]}"
        if pg:
            from tether.postgres import PostgresRunStore

            store: Any = PostgresRunStore(pg, schema=schema)
        else:
            store = tether.SQLiteRunStore(Path(tmp) / "runs.db")
        try:
            await bench(store, runs, repeat)
        finally:
            await store.aclose()
            if pg:
                import psycopg

                with psycopg.connect(pg, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def bench(store: Any, runs: int, repeat: int) -> None:
    started = time.perf_counter()
    await fill(store, runs)
    print(f"filled {runs:,} runs in {time.perf_counter() - started:.1f} s")
    viewer = web.app(store=store)
    transport = httpx.ASGITransport(app=viewer)
    async with httpx.AsyncClient(transport=transport, base_url="http://viewer") as client:
        page = await store.list_runs()
        for _ in range(100):
            assert page.next is not None
            page = await store.list_runs(after=page.next)
        deep = f"/?after={page.next}"
        page = await store.list_runs(sort="tokens")
        for _ in range(100):
            assert page.next is not None
            page = await store.list_runs(sort="tokens", after=page.next)
        deep_tokens = f"/?sort=tokens&after={page.next}"
        for label, url in (
            ("first page", "/"),
            ("agent=writer", "/?agent=writer"),
            ("termination=max_steps", "/?termination=max_steps"),
            ("status=finished, oldest", "/?status=finished&order=oldest"),
            ("page 101 (keyset)", deep),
            ("sort=tokens", "/?sort=tokens"),
            ("sort=duration, oldest", "/?sort=duration&order=oldest"),
            ("sort=tokens, page 101", deep_tokens),
        ):
            median, worst = await timed(client, url, repeat)
            print(f"{label:26} median {median:6.1f} ms   worst {worst:6.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--pg", metavar="DSN", help="on PostgreSQL (extra 'postgres')")
    args = parser.parse_args()
    anyio.run(main, args.runs, args.repeat, args.pg)
