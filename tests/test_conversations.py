"""Conversations: stores, ``Runtime(conversations=)``, turns, cancels (docs/guides/history.md)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import (
    Fault,
    InvalidRequest,
    Message,
    Reply,
    ScriptedProvider,
    TextBlock,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.runtime import ConversationConflict, ConversationStoreError
from tether.runtime._conversations import APPLICATION_ID

from .helpers import add, assert_consistent, of

pytestmark = pytest.mark.anyio

Store = tether.ConversationStore

TURN = (
    Message.user("1 + 2?"),
    Message(
        role="assistant",
        content=(TextBlock(text="adding"), ToolUseBlock(id="t1", name="add", input={"a": 1})),
    ),
    Message(role="user", content=(ToolResultBlock(tool_use_id="t1", content="3", is_error=True),)),
    Message.assistant("3"),
)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[Store]:
    """The store under test, closed afterwards (PostgreSQL: in a schema of the test's own)."""
    made: Store
    if request.param == "memory":
        made = tether.InMemoryConversationStore()
    elif request.param == "sqlite":
        made = tether.SQLiteConversationStore(tmp_path / "chats.db")
    else:
        from tether.postgres import PostgresConversationStore

        made = PostgresConversationStore(
            request.getfixturevalue("pg_dsn"), schema=request.getfixturevalue("pg_schema")
        )
    yield made
    await made.aclose()


# --- the stores ------------------------------------------------------------------------


async def test_store_appends_and_loads_in_order(store: Store) -> None:
    """A new conversation is empty; appends come back in order, every block type intact."""
    assert await store.load("c") == []
    await store.append("c", TURN[:2])
    await store.append("c", TURN[2:], expected_length=2)
    assert await store.load("c") == list(TURN)
    assert await store.load("other") == []


async def test_store_refuses_a_stale_append_whole(store: Store) -> None:
    """An append expecting another length raises ConversationConflict and writes nothing."""
    await store.append("c", TURN[:1])
    with pytest.raises(ConversationConflict, match="another run appended"):
        await store.append("c", TURN[1:], expected_length=0)
    assert await store.load("c") == list(TURN[:1])


async def test_store_refuses_a_bad_id(store: Store) -> None:
    """An empty conversation id is a ValueError."""
    with pytest.raises(ValueError, match="non-empty str"):
        await store.load("")


async def test_sqlite_store_schema_wal_and_two_stores_on_one_file(tmp_path: Path) -> None:
    """WAL, a versioned schema, tether's application_id; two stores on one file see each other."""
    path = tmp_path / "chats.db"
    one, two = tether.SQLiteConversationStore(path), tether.SQLiteConversationStore(path)
    try:
        await one.append("c", TURN[:2])
        assert await two.load("c") == list(TURN[:2])
        with pytest.raises(ConversationConflict):
            await two.append("c", TURN[2:], expected_length=0)
        await two.append("c", TURN[2:], expected_length=2)
        assert await one.load("c") == list(TURN)
    finally:
        await one.aclose()
        await two.aclose()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    finally:
        conn.close()


async def test_sqlite_store_refuses_a_foreign_file_untouched(tmp_path: Path) -> None:
    """A SQLite file of something else (here: a lessons file) is refused and left as it was."""
    path = tmp_path / "lessons.db"
    lessons = tether.SQLiteLessonStore(path)
    await lessons.add(scope="s", question="q", feedback="f")
    await lessons.aclose()
    before = path.read_bytes()
    store = tether.SQLiteConversationStore(path)
    with pytest.raises(ConversationStoreError, match="not a tether conversation store") as info:
        await store.load("c")
    assert str(path) in str(info.value)
    await store.aclose()
    assert path.read_bytes() == before


async def test_sqlite_store_needs_a_file() -> None:
    """':memory:' is refused with a pointer to the in-memory store."""
    with pytest.raises(ValueError, match="InMemoryConversationStore"):
        tether.SQLiteConversationStore(":memory:")


# --- runs on conversations ------------------------------------------------------------


def by_length(replies: dict[int, Reply | Fault]) -> ScriptedProvider:
    """A provider answering by the length of the transcript it is sent."""
    return ScriptedProvider(lambda req, ctx: replies[len(req.messages)], record=True)


async def test_runs_on_a_conversation_load_and_extend_it(store: Store) -> None:
    """Each run starts from the stored transcript and appends its own new messages."""
    a = tether.Agent(
        name="chat",
        provider=by_length(
            {
                1: Reply(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2}, id="k1")]),
                3: Reply(text="3"),
                5: Reply(text="you are welcome"),
            }
        ),
        tools=[add],
    )
    async with tether.Runtime(conversations=store) as rt:
        first = await rt.run(a, "1 + 2?", conversation="u1")
        second = await rt.run(a, "thanks", conversation="u1")
    for res in (first, second):
        assert_consistent(res)
        assert res.termination is tether.Termination.ANSWERED
    assert second.messages[:4] == first.messages
    assert await store.load("u1") == list(second.messages)
    loaded = [e.messages for r in (first, second) for e in of(r.events, ev.ConversationLoaded)]
    appended = [e.messages for r in (first, second) for e in of(r.events, ev.ConversationAppended)]
    assert (loaded, appended) == ([0, 4], [4, 2])
    # The appended event comes before RunFinished: the store is extended before the result.
    names = [type(e).__name__ for e in second.events]
    assert names.index("ConversationAppended") < names.index("RunFinished")


async def test_a_failed_run_leaves_the_conversation_as_it_was(store: Store) -> None:
    """A run that does not end ok (provider_failed, max_steps) appends nothing."""
    await store.append("u", TURN)
    failing = tether.Agent(
        name="f", provider=ScriptedProvider([Fault(error=InvalidRequest("bad request"))])
    )
    looping = tether.Agent(
        name="l",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="add", arguments={})])]),
        tools=[add],
        limits=tether.Limits(max_steps=1),
    )
    async with tether.Runtime(conversations=store) as rt:
        r1 = await rt.run(failing, "q", conversation="u")
        r2 = await rt.run(looping, "q", conversation="u")
    assert r1.termination is tether.Termination.PROVIDER_FAILED
    assert r2.termination is tether.Termination.MAX_STEPS
    assert not of(r1.events, ev.ConversationAppended)
    assert await store.load("u") == list(TURN)
    assert r2.messages[:4] == TURN


async def test_runs_on_one_conversation_go_in_start_order() -> None:
    """Runs started at once on one conversation run one after another, in start order."""
    store = tether.InMemoryConversationStore()
    provider = ScriptedProvider(lambda req, ctx: Reply(text=f"seen {len(req.messages)}"))
    provider.latency_s = 0.01
    a = tether.Agent(name="chat", provider=provider)
    async with tether.Runtime(conversations=store) as rt:
        handles = [rt.start(a, f"q{i}", conversation="c") for i in range(4)]
        other = rt.start(a, "elsewhere", conversation="d")
        results = [await h.result() for h in handles]
        await other.result()
        assert rt._turns.waiting == 0
    assert [r.output for r in results] == ["seen 1", "seen 3", "seen 5", "seen 7"]
    stored = await store.load("c")
    assert [m.text for m in stored if m.role == "user"] == ["q0", "q1", "q2", "q3"]
    assert [m.text for m in await store.load("d")] == ["elsewhere", "seen 1"]


async def test_conversation_needs_a_store_and_no_history() -> None:
    """conversation= without a store, with history=, or not a str is a clear error at start."""
    a = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="x")]))
    async with tether.Runtime() as rt:
        with pytest.raises(ValueError, match="needs a conversation store"):
            rt.start(a, "q", conversation="c")
    async with tether.Runtime(conversations=tether.InMemoryConversationStore()) as rt:
        with pytest.raises(ValueError, match="not both"):
            rt.start(a, "q", conversation="c", history=list(TURN))
        with pytest.raises(TypeError, match="non-empty str"):
            rt.start(a, "q", conversation="")
        assert rt.running == 0
        assert rt._turns.waiting == 0
    with pytest.raises(TypeError, match="ConversationStore"):
        tether.Runtime(conversations=object())  # type: ignore[arg-type]


class GatedStore(tether.InMemoryConversationStore):
    """A store whose load or append waits for the test (or fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = {"load": anyio.Event(), "append": anyio.Event()}
        self.release = {"load": anyio.Event(), "append": anyio.Event()}
        self.hold: set[str] = set()
        self.fail: set[str] = set()

    async def _gate(self, op: str) -> None:
        if op in self.fail:
            raise ConversationStoreError(f"{op} failed")
        if op in self.hold:
            self.reached[op].set()
            await self.release[op].wait()

    async def load(self, conversation: str) -> list[Message]:
        await self._gate("load")
        return await super().load(conversation)

    async def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        expected_length: int | None = None,
        run_id: str | None = None,
    ) -> None:
        with anyio.CancelScope(shield=True):  # an append, once begun, completes (as SQLite's)
            await self._gate("append")
        await super().append(conversation, messages, expected_length=expected_length, run_id=run_id)


async def _in_runtime(store: GatedStore, body: Callable[[tether.Runtime], Any]) -> tether.RunResult:
    before = {t.id for t in anyio.get_running_tasks()}
    with anyio.fail_after(20):
        async with tether.Runtime(conversations=store) as rt:
            result: tether.RunResult = await body(rt)
            assert rt._turns.waiting == 0, "a turn leaked"
    assert {t.id for t in anyio.get_running_tasks()} == before, "a task outlived the Runtime"
    assert_consistent(result)
    return result


def _agent() -> tether.Agent:
    return tether.Agent(name="c", provider=ScriptedProvider([Reply(text="answer")]))


async def test_cancel_while_loading() -> None:
    """A run cancelled while its conversation loads ends cancelled and appends nothing."""
    store = GatedStore()
    store.hold.add("load")

    async def body(rt: tether.Runtime) -> tether.RunResult:
        handle = rt.start(_agent(), "q", conversation="c")
        await store.reached["load"].wait()
        handle.cancel("swept")
        return await handle.result()

    result = await _in_runtime(store, body)
    assert result.termination is tether.Termination.CANCELLED
    store.hold.clear()
    assert await store.load("c") == []


async def test_cancel_while_waiting_for_the_turn() -> None:
    """A run cancelled in the queue for its conversation leaks no turn; the next run goes on."""
    store = GatedStore()
    store.hold.add("append")

    async def body(rt: tether.Runtime) -> tether.RunResult:
        agent = _agent()
        first = rt.start(agent, "first", conversation="c")
        waiting = rt.start(agent, "never", conversation="c")
        third = rt.start(agent, "third", conversation="c")
        await store.reached["append"].wait()
        await anyio.wait_all_tasks_blocked()
        assert not waiting.done
        waiting.cancel("swept")
        cancelled = await waiting.result()
        store.hold.clear()
        store.release["append"].set()
        assert (await first.result()).termination is tether.Termination.ANSWERED
        assert (await third.result()).termination is tether.Termination.ANSWERED
        return cancelled

    result = await _in_runtime(store, body)
    assert result.termination is tether.Termination.CANCELLED
    assert not of(result.events, ev.ConversationLoaded)
    assert [m.text for m in await store.load("c") if m.role == "user"] == ["first", "third"]


async def test_cancel_while_appending_keeps_result_and_store_together() -> None:
    """A cancel that lands during the append cannot split them: answered, and appended."""
    store = GatedStore()
    store.hold.add("append")

    async def body(rt: tether.Runtime) -> tether.RunResult:
        handle = rt.start(_agent(), "q", conversation="c")
        await store.reached["append"].wait()
        handle.cancel("swept")
        await anyio.wait_all_tasks_blocked()
        store.release["append"].set()
        return await handle.result()

    result = await _in_runtime(store, body)
    assert result.termination is tether.Termination.ANSWERED
    assert await store.load("c") == list(result.messages)


async def test_shutdown_while_appending_still_appends() -> None:
    """The Runtime shutting down in the middle of an append lets it finish."""
    store = GatedStore()
    store.hold.add("append")

    async def body(rt: tether.Runtime) -> tether.RunResult:
        rt.shutdown_grace_s = 0
        handle = rt.start(_agent(), "q", conversation="c")
        await store.reached["append"].wait()
        for run in list(rt._runs.values()):
            run.cancel("runtime shutdown")
        store.release["append"].set()
        return await handle.result()

    result = await _in_runtime(store, body)
    assert result.termination is tether.Termination.ANSWERED
    assert len(await store.load("c")) == 2


async def test_a_store_that_fails_to_load_ends_the_run() -> None:
    """A conversation that cannot be loaded ends the run crashed, with the store's error."""
    store = GatedStore()
    store.fail.add("load")

    async def body(rt: tether.Runtime) -> tether.RunResult:
        return await rt.run(_agent(), "q", conversation="c")

    result = await _in_runtime(store, body)
    assert result.termination is tether.Termination.CRASHED
    assert result.error is not None
    assert "could not be loaded" in result.error
    (failed,) = of(result.events, ev.ConversationFailed)
    assert failed.operation == "load"
    assert result.usage.model_calls == 0


async def test_a_store_that_fails_to_append_says_so() -> None:
    """An append that fails keeps the run's termination and names the error."""
    store = GatedStore()
    store.fail.add("append")

    async def body(rt: tether.Runtime) -> tether.RunResult:
        return await rt.run(_agent(), "q", conversation="c")

    result = await _in_runtime(store, body)
    assert result.termination is tether.Termination.ANSWERED
    assert result.error is not None
    assert "not appended" in result.error
    assert not result.ok
    assert result.conversation_error == "ConversationStoreError: append failed"
    (failed,) = of(result.events, ev.ConversationFailed)
    assert failed.operation == "append"
    store.fail.clear()
    assert await store.load("c") == []


def _corrupt(path: Path, how: str) -> None:
    """Damage a conversation file as a disk or another program might."""
    if how == "schema":  # invalid UTF-8 in the schema text: SQLite's own error is undecodable
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        data = bytearray(path.read_bytes())
        at = data.index(b"CREATE TABLE")
        data[at + 10] = 0xFD  # TABLE becomes TAB\xfdE
        path.write_bytes(bytes(data))
        return
    text = {
        "utf8": "CAST(x'7b22ff223a317d' AS TEXT)",
        "json": '\'{"role": "user", \'',
        "deep": "'" + "[" * 5000 + "]" * 5000 + "'",
    }[how]
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE conversation_messages SET message = {text} WHERE position = 0")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("how", ["schema", "utf8", "json", "deep"])
async def test_a_corrupt_conversation_file_is_a_store_error(tmp_path: Path, how: str) -> None:
    """A damaged file (invalid UTF-8 in its schema or a message, bad or too deep JSON) is a
    ConversationStoreError naming the file, and ends a run on it crashed with that error."""
    path = tmp_path / "chats.db"
    store = tether.SQLiteConversationStore(path)
    await store.append("c", TURN)
    await store.aclose()
    _corrupt(path, how)
    with pytest.raises(ConversationStoreError, match=r"chats\.db"):
        await store.load("c")
    await store.aclose()
    async with tether.Runtime(conversations=store) as rt:
        result = await rt.run(_agent(), "q", conversation="c")
    assert result.termination is tether.Termination.CRASHED
    assert result.error is not None
    assert "ConversationStoreError" in result.error
    assert "chats.db" in result.error
    (failed,) = of(result.events, ev.ConversationFailed)
    assert failed.operation == "load"


async def test_a_refused_turn_is_not_ok(tmp_path: Path) -> None:
    """Two concurrent turns on one conversation, from two Runtimes on one file: both load
    the same messages, the first append wins, and the refused one says so where a caller
    looks: ``ok`` is False and ``conversation_error`` names the ConversationConflict (its
    termination and output are kept: the model did answer)."""
    path = tmp_path / "chats.db"
    met = 0
    both = anyio.Event()

    @tether.tool
    async def meet() -> str:
        """Wait for the other turn."""
        nonlocal met
        met += 1
        if met == 2:
            both.set()
        await both.wait()
        return "met"

    def script(request: Any, ctx: Any) -> Reply:
        if request.messages[-1].role == "user" and request.messages[-1].text == "q":
            return Reply(tool_calls=[ToolCall(name="meet", arguments={})])
        return Reply(text="answer")

    agent = tether.Agent(name="c", provider=ScriptedProvider(script), tools=[meet])
    results: list[tether.RunResult] = []
    # The file made first: two stores opening one new file at once is not what this tests.
    first = tether.SQLiteConversationStore(path)
    assert await first.load("c") == []
    await first.aclose()

    async def turn() -> None:
        async with tether.Runtime(conversations=tether.SQLiteConversationStore(path)) as rt:
            results.append(await rt.run(agent, "q", conversation="c"))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            tg.start_soon(turn)
    for result in results:
        assert_consistent(result)
        assert result.termination is tether.Termination.ANSWERED
        assert result.output == "answer"
    won, lost = sorted(results, key=lambda r: not r.ok)
    assert won.ok
    assert won.conversation_error is None
    assert not lost.ok
    assert lost.conversation_error is not None
    assert lost.conversation_error.startswith("ConversationConflict:")
    assert lost.error is not None
    assert "not appended" in lost.error
    assert of(won.events, ev.ConversationAppended)
    assert not of(lost.events, ev.ConversationAppended)
    # The result as stored (a durable run's, a RayRuntime's) says the same after a round trip.
    assert tether.RunResult.load(lost.dump()).conversation_error == lost.conversation_error
    store = tether.SQLiteConversationStore(path)
    assert len(await store.load("c")) == 4  # one turn: q, the call, its result, the answer
    await store.aclose()
