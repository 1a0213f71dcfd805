"""kill -9 mid-run leaves the SQLite conversation as it was.

A child process runs a turn on a conversation (a ``ScriptedProvider`` with
latency, or a slow tool), says where it is on stdout, and is killed with
SIGKILL there. The parent reopens the file: the conversation is exactly what
it was before that run, and the next run goes on from it.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

import tether
from tether.providers import Reply, ScriptedProvider

from .helpers import assert_consistent

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"),
]

CHILD = textwrap.dedent(
    """
    import sys, time
    import anyio
    import tether
    from tether import events as ev
    from tether.providers import Reply, ScriptedProvider, ToolCall

    path, backend, where = sys.argv[1], sys.argv[2], sys.argv[3]

    @tether.tool
    def slow(x: int) -> int:
        \"\"\"A tool that takes its time.\"\"\"
        time.sleep(3600)
        return x

    if where == "model":
        script = [Reply(text="never")]
        provider = ScriptedProvider(script, latency_s=3600)
    else:
        script = [Reply(tool_calls=[ToolCall(name="slow", arguments={"x": 1})]), Reply(text="x")]
        provider = ScriptedProvider(script)
    agent = tether.Agent(name="child", provider=provider, tools=[slow])
    mark = ev.ModelCallStarted if where == "model" else ev.ToolCallStarted

    async def main() -> None:
        store = tether.SQLiteConversationStore(path)
        async with tether.Runtime(conversations=store) as rt:
            handle = rt.start(agent, "turn 2", conversation="c")
            async for event in handle.events():
                if isinstance(event, mark):
                    print("mid-run", flush=True)
            print("finished?!", flush=True)

    anyio.run(main, backend=backend)
    """
)


@pytest.mark.parametrize("where", ["model", "tool"])
async def test_kill_9_mid_run_leaves_the_conversation_as_it_was(
    where: str, tmp_path: Path, anyio_backend: str
) -> None:
    """SIGKILL during the model call or a tool call: the stored conversation is unchanged."""
    path = tmp_path / "chats.db"
    store = tether.SQLiteConversationStore(path)
    first = tether.Agent(name="first", provider=ScriptedProvider([Reply(text="turn 1 answer")]))
    async with tether.Runtime(conversations=store) as rt:
        assert_consistent(await rt.run(first, "turn 1", conversation="c"))
    before = await store.load("c")
    assert [m.text for m in before] == ["turn 1", "turn 1 answer"]
    await store.aclose()

    command = [sys.executable, "-c", CHILD, str(path), anyio_backend, where]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with anyio.fail_after(60):
        async with await anyio.open_process(command, env=env) as child:
            assert child.stdout is not None
            out = b""
            try:
                while b"\n" not in out:
                    out += await child.stdout.receive()
            except anyio.EndOfStream:
                pass
            if out != b"mid-run\n":
                child.kill()
                await child.wait()
                raise AssertionError(f"the child said {out!r}")
            child.send_signal(signal.SIGKILL)
            await child.wait()
    assert child.returncode == -signal.SIGKILL

    reopened = tether.SQLiteConversationStore(path)
    try:
        assert await reopened.load("c") == before
        third = tether.Agent(name="third", provider=ScriptedProvider([Reply(text="turn 3 answer")]))
        async with tether.Runtime(conversations=reopened) as rt:
            result = await rt.run(third, "turn 3", conversation="c")
        assert [m.text for m in result.messages] == [
            "turn 1",
            "turn 1 answer",
            "turn 3",
            "turn 3 answer",
        ]
        assert await reopened.load("c") == list(result.messages)
    finally:
        await reopened.aclose()
