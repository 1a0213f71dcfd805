"""``python -m benchmarks.durable_pg [--runs 1000] [--rounds 5] [--backend asyncio|trio|both]``.

B10, the cost of durability on PostgreSQL: B2 (``--runs`` runs at once, R
rounds of one scripted model call and one async tool call, L=0) on a Runtime
without a store, then on one with a :class:`tether.postgres.PostgresRunStore`
(every run recorded, checkpointed at every round boundary with its events,
every tool result kept, the result stored), and the ratio. Each side runs
``--repeats`` times and keeps its best. The store's tables go to a fresh
schema on ``--dsn``, dropped afterwards. ``--synchronous-commit off`` measures
the store without a WAL flush per commit (see the README).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time

import anyio

import tether

from . import _workload as w


async def _batch(rt: tether.Runtime, agent: tether.Agent, n: int, rounds: int) -> float:
    w.TALLY.executions = 0
    start = time.perf_counter()
    handles = [rt.start(agent, w.QUESTION) for _ in range(n)]
    results = [await handle.result() for handle in handles]
    elapsed = time.perf_counter() - start
    problems = [p for p in (w.check_answered(r, rounds) for r in results) if p]
    if problems:
        raise SystemExit(f"B10: runs did not answer as B2's do: {problems[:3]}")
    return elapsed


async def measure(args: argparse.Namespace, schema: str) -> dict[str, float]:
    from tether.postgres import PostgresRunStore

    agent = w.agent(args.rounds, 0.0)
    best: dict[str, float] = {}
    sync = {"on": True, "off": False, "server": None}[args.synchronous_commit]
    for side in ("none", "postgres"):
        store = (
            PostgresRunStore(
                args.dsn,
                schema=schema,
                max_connections=args.max_connections,
                synchronous_commit=sync,
            )
            if side == "postgres"
            else None
        )
        async with tether.Runtime(provider_concurrency=max(64, args.runs), store=store) as rt:
            await _batch(rt, agent, 5, args.rounds)  # warm: imports, pool, schema
            times = [await _batch(rt, agent, args.runs, args.rounds) for _ in range(args.repeats)]
        best[side] = args.runs * args.rounds / min(times)
    return best


def _drop(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.durable_pg")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("TETHER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--max-connections", type=int, default=4)
    parser.add_argument("--synchronous-commit", choices=("on", "off", "server"), default="server")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON line per backend (python -m benchmarks)"
    )
    args = parser.parse_args(argv)
    backends = ("asyncio", "trio") if args.backend == "both" else (args.backend,)
    heading = (
        f"B10: B2 ({args.runs} runs at once, R={args.rounds}, L=0) without a store and with "
        f"PostgresRunStore (max_connections={args.max_connections}, "
        f"synchronous_commit={args.synchronous_commit}); rounds/s, best of {args.repeats}"
    )
    print(heading, file=sys.stderr if args.json else sys.stdout)
    for backend in backends:
        schema = f"tether_bench_{secrets.token_hex(4)}"
        try:
            best = anyio.run(measure, args, schema, backend=backend)
        finally:
            _drop(args.dsn, schema)
        ratio = best["postgres"] / best["none"]
        if args.json:
            print(json.dumps({"backend": backend, "rounds_per_s": best}))
            continue
        print(
            f"{backend:>8}: no store {best['none']:,.0f}  PostgreSQL {best['postgres']:,.0f}  "
            f"({ratio:.2f}x, {(ratio - 1) * 100:+.0f}%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
