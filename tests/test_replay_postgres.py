"""Replay and fork of runs a PostgreSQL run store keeps (docs/guides/replay.md)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import Reply

from .pg import PgServer, need_psycopg
from .test_replay import FOUR, _Counting, _four_rounds, _lookup, lookup

pytestmark = pytest.mark.anyio

need_psycopg()

from tether.postgres import PostgresRunStore  # noqa: E402


async def test_replay_and_fork_from_postgres(
    pg_server: PgServer, pg_schema: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A run stored in PostgreSQL replays identical (the API and ``tether replay --store
    postgresql://... --schema``), and forks at round 2 without a model call for rounds 1-2."""
    from tether.cli._main import main

    counting = _Counting(FOUR)
    agent = _four_rounds(counting)
    store = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    try:
        async with tether.Runtime(store=store, agents=[agent]) as rt:
            original = await rt.run(agent, "go")
            assert (await tether.replay(store, agent, run_id=original.run_id)).identical
            live = _Counting([Reply(tool_calls=[_lookup("Z", "z1")]), Reply(text="A B Z")])
            forked_agent = tether.Agent(name="four", provider=live.inner, tools=[lookup])
            handle = await rt.fork(original.run_id, at_round=2, agent=forked_agent)
            forked = await handle.result()
    finally:
        await store.aclose()
    assert counting.count == 4
    assert live.count == 2
    assert forked.output == "A B Z"
    assert [e.at_round for e in forked.events if isinstance(e, ev.RunForked)] == [2]

    module = tmp_path / "four_agent.py"
    module.write_text(
        "import tether\n"
        "from tests.test_replay import FOUR, _Counting, _four_rounds\n"
        "agent = _four_rounds(_Counting(FOUR))\n"
    )
    argv = ["replay", "--store", pg_server.dsn, "--schema", pg_schema, original.run_id]
    argv += ["--agent", f"{module}:agent"]
    code = await anyio.to_thread.run_sync(main, argv)
    assert code == 0, capsys.readouterr()
    assert f"{original.run_id}: identical" in capsys.readouterr().out
