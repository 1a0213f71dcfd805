"""``tether serve``: the run viewer (:mod:`tether.web`) on a run store or a JSONL trace.

``--store`` takes ``sqlite:///path/runs.db`` (or a plain path) or a
``postgresql://`` DSN (extra ``postgres``). Served by uvicorn (extra ``web``)
on 127.0.0.1 unless ``--host`` says otherwise.

With a store, the actions (approve, reject, cancel) need bearer tokens from
``TETHER_API_TOKENS``: the viewer then runs a Runtime of its own on the store
(:func:`tether.web.standalone`; ``--agent MODULE:AGENT`` names the agents whose
approved runs resume here). Without tokens it refuses to start unless
``--read-only``. A trace is always read-only.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tether.cli._common import EXIT_OK, DataError, UsageError, _err, open_store


def _cmd_serve(args: argparse.Namespace) -> int:
    if (args.store is None) == (args.trace is None):
        raise UsageError("give one of --store URL or --trace FILE")
    try:
        import uvicorn
    except ImportError:
        raise UsageError("tether serve needs uvicorn: pip install 'tether[web]'") from None
    from tether import web

    read_only = args.read_only or args.trace is not None
    if args.agent and read_only:
        raise UsageError("--agent is for the actions: not with --read-only or --trace")
    tokens = None
    if not read_only:
        spec = os.environ.get(web.TOKENS_ENV, "").strip()
        if not spec:
            raise UsageError(
                f"the viewer's actions need bearer tokens: set {web.TOKENS_ENV} "
                "(client=token,...), or pass --read-only"
            )
        try:
            tokens = web.parse_tokens(spec)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    from tether.cli._run_cmd import load_agent

    agents = [load_agent(target) for target in args.agent]
    store = open_store(args.store) if args.store else None
    try:
        if read_only:
            viewer = web.app(store=store, trace=args.trace, read_only=True, redact=args.redact)
        else:
            assert store is not None  # a trace is read-only
            viewer = web.standalone(store=store, agents=agents, tokens=tokens, redact=args.redact)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    where = f"http://{args.host}:{args.port}/"
    mode = "read-only" if read_only else "actions need a bearer token"
    _err(f"tether serve: the run viewer at {where} ({mode}; Ctrl-C stops it)")
    uvicorn.run(viewer, host=args.host, port=args.port, log_level="warning", lifespan="on")
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
            "The actions (approve or reject a held call, cancel) need bearer tokens from "
            "TETHER_API_TOKENS (client=token,...): without them, pass --read-only. With a "
            "store and tokens the viewer runs a Runtime of its own on the store; --agent "
            "MODULE:AGENT (repeatable) names agents whose approved runs resume there."
        ),
    )
    serve.add_argument("--store", metavar="URL")
    serve.add_argument("--trace", metavar="FILE.jsonl")
    serve.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    serve.add_argument("--port", type=int, default=8321, metavar="N", help="default: 8321")
    serve.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="MODULE:AGENT",
        help="an agent whose approved runs resume in the viewer's Runtime (repeatable)",
    )
    serve.add_argument("--read-only", action="store_true", help="no actions, and no tokens needed")
    serve.add_argument("--redact", action="store_true", help="hide message contents")
    serve.set_defaults(handler=_cmd_serve)
