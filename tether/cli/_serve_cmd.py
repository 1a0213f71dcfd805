"""``tether serve``: the run viewer (:mod:`tether.web`) on a run store or a JSONL trace.

``--store`` takes ``sqlite:///path/runs.db`` (or a plain path) or a
``postgresql://`` DSN (extra ``postgres``). Served by uvicorn (extra ``web``)
on 127.0.0.1 unless ``--host`` says otherwise. The command line serves no
Runtime, so it has no actions; a service mounts ``tether.web.app(store=...,
runtime=rt, tokens=...)`` for approve, reject and cancel.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tether.cli._common import EXIT_OK, DataError, UsageError, _err


def open_store(url: str) -> Any:
    """A run store for ``--store URL``: ``sqlite:///path``, a path, or ``postgresql://...``."""
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from tether.postgres import PostgresRunStore
        except ImportError as exc:
            raise UsageError(
                "a PostgreSQL store needs the 'postgres' extra: "
                f"pip install 'tether[postgres]' ({exc})"
            ) from None
        return PostgresRunStore(url)
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    if "://" in path:
        raise UsageError(f"--store: not a sqlite:/// path or postgresql:// DSN: {url!r}")
    if not os.path.exists(path):
        raise DataError(f"--store: no run store file at {path!r}")
    import tether

    return tether.SQLiteRunStore(path)


def _cmd_serve(args: argparse.Namespace) -> int:
    if (args.store is None) == (args.trace is None):
        raise UsageError("give one of --store URL or --trace FILE")
    try:
        import uvicorn
    except ImportError:
        raise UsageError("tether serve needs uvicorn: pip install 'tether[web]'") from None
    from tether import web

    store = open_store(args.store) if args.store else None
    try:
        viewer = web.app(store=store, trace=args.trace, read_only=True, redact=args.redact)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    where = f"http://{args.host}:{args.port}/"
    _err(f"tether serve: the run viewer at {where} (read-only; Ctrl-C stops it)")
    uvicorn.run(viewer, host=args.host, port=args.port, log_level="warning", lifespan="off")
    return EXIT_OK


def add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="a browser view of the runs in a run store or a JSONL trace",
        description=(
            "Serve the run viewer (tether.web) on a run store (--store sqlite:///runs.db or "
            "a postgresql:// DSN) or a JSONL trace (--trace FILE): the runs, filtered and "
            "paged; each run's timeline of rounds, model calls, tool calls and judgements; "
            "live while a run goes on. Bound to 127.0.0.1 unless --host says otherwise. "
            "The command line holds no Runtime, so it serves read-only (--read-only is "
            "implied); mount tether.web.app(store=..., runtime=rt) in a service for the "
            "approve, reject and cancel actions (bearer tokens from TETHER_API_TOKENS)."
        ),
    )
    serve.add_argument("--store", metavar="URL")
    serve.add_argument("--trace", metavar="FILE.jsonl")
    serve.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    serve.add_argument("--port", type=int, default=8321, metavar="N", help="default: 8321")
    serve.add_argument(
        "--read-only", action="store_true", help="no actions (the command line's only mode)"
    )
    serve.add_argument("--redact", action="store_true", help="hide message contents")
    serve.set_defaults(handler=_cmd_serve)
