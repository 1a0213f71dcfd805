"""``tether replay``: re-run an agent's code against a recorded run; say where it diverges."""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio

from tether.cli._common import EXIT_OK, UsageError, _err, _out, open_store
from tether.runtime import (
    Agent,
    Divergence,
    Replay,
    RunStore,
    TrailError,
    replay,
)

#: ``tether replay``'s exit code when the replay diverged.
EXIT_DIVERGED = 1


def _cmd_replay(args: argparse.Namespace) -> int:
    from tether.cli._run_cmd import load_agent

    agent = load_agent(args.agent)
    try:
        if args.store is not None:
            run_id = args.file or args.run
            if run_id is None:
                raise UsageError("--store URL needs the run's id: tether replay --store URL RUN_ID")
            store = open_store(args.store, args.schema)
            found = anyio.run(
                _from_store, store, run_id, agent, args.live_tools, backend=args.backend
            )
        elif args.file is None:
            raise UsageError("give a trail: FILE.jsonl, or --store URL RUN_ID")
        else:
            found = anyio.run(
                _from_file, args.file, args.run, agent, args.live_tools, backend=args.backend
            )
    except TrailError as exc:  # no such file or run, several runs, not a trail
        raise UsageError(str(exc)) from None
    return _report(found)


async def _from_file(path: str, run_id: str | None, agent: Agent, live_tools: bool) -> Replay:
    return await replay(path, agent, run_id=run_id, live_tools=live_tools)


async def _from_store(store: RunStore, run_id: str, agent: Agent, live_tools: bool) -> Replay:
    try:
        return await replay(store, agent, run_id=run_id, live_tools=live_tools)
    finally:
        await store.aclose()


def _report(found: Replay) -> int:
    for note in found.notes:
        _err(f"note: the trail lacks {note}")
    divergence = found.divergence
    if divergence is None:
        _out(f"{found.run_id}: identical ({len(found.recorded)} events)")
        return EXIT_OK
    _out(f"{found.run_id}: diverged at {_where(divergence)}")
    _out(f"  recorded: {_show(divergence.expected)}")
    _out(f"  replayed: {_show(divergence.got)}")
    if divergence.expected is not None and divergence.got is not None:
        _out(f"  differs in: {', '.join(divergence.fields)}")
    return EXIT_DIVERGED


def _where(divergence: Divergence) -> str:
    stage = f", stage {divergence.stage}" if divergence.stage else ""
    seq = f" (recorded seq {divergence.seq})" if divergence.seq is not None else ""
    return f"round {divergence.round}{stage}{seq}"


def _show(data: Any) -> str:
    if data is None:
        return "nothing: the run had ended"
    return json.dumps(data, ensure_ascii=False, default=str)


def add_parser(commands: Any) -> None:
    """The ``replay`` subcommand of ``tether``."""
    parser = commands.add_parser(
        "replay",
        help="re-run an agent against a recorded run; report the first divergence",
        description=(
            "Re-run AGENT's code (its tools' argument checks, policies, judge, typed output) "
            "against a recorded run: the model's responses and the tools' results come from "
            "the trail, so no model is called and no tool executed (unless --live-tools). "
            "Prints 'identical', or where the run first did otherwise (round, stage, the "
            "recorded event and the replayed one). The trail is a FILE.jsonl written by "
            "JsonlSink (--run ID when it holds several runs), or a run in a store "
            "(--store URL RUN_ID: a SQLite file or a postgresql:// URL). Exit code 0: "
            "identical; 1: diverged; 64: a bad argument or trail."
        ),
    )
    parser.add_argument("file", metavar="FILE.jsonl | RUN_ID", nargs="?")
    parser.add_argument(
        "--agent", metavar="MODULE:AGENT", required=True, help="the agent, as 'tether run' takes it"
    )
    parser.add_argument(
        "--run", metavar="ID", help="the run of FILE.jsonl (or the store) to replay"
    )
    parser.add_argument("--store", metavar="URL", help="replay run RUN_ID from this run store")
    parser.add_argument(
        "--schema", metavar="NAME", help="the PostgreSQL store's schema (default: tether's)"
    )
    parser.add_argument(
        "--live-tools", action="store_true", help="execute the tools instead of their results"
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.set_defaults(handler=_cmd_replay)
