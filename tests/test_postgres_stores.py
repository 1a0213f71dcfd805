"""The PostgreSQL conversation and lesson stores: schema, isolation, races, errors.

What they share with the other stores (the protocols' semantics) runs in
tests/test_conversations.py and tests/test_lessons.py, parametrized over the
stores; this file holds what is PostgreSQL's own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import anyio
import pytest

import tether
from tether.providers import Message, Reply, ScriptedProvider
from tether.runtime import ConversationConflict, ConversationStoreError, LessonStoreError

from .pg import PgServer, need_psycopg

pytestmark = pytest.mark.anyio

need_psycopg()

import psycopg.conninfo  # noqa: E402

from tether.postgres import PostgresConversationStore, PostgresLessonStore  # noqa: E402


def _query(server: PgServer, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with server.connect() as conn:
        return list(conn.execute(query, args).fetchall())


def _execute(server: PgServer, statement: str) -> None:
    with server.connect() as conn:
        conn.execute(statement)


def _snapshot(server: PgServer, schema: str) -> list[tuple[Any, ...]]:
    """The tables of a schema and their row counts: what 'left untouched' compares."""
    tables = _query(
        server,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
        "ORDER BY table_name",
        schema,
    )
    return [
        (name, _query(server, f'SELECT COUNT(*) FROM "{schema}"."{name}"')[0][0])
        for (name,) in tables
    ]


async def test_schema_created_versioned_and_shared(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """First use creates the schema, its tables and version rows; two stores see each other."""
    one = PostgresConversationStore(pg_server.dsn, schema=pg_schema)
    two = PostgresConversationStore(pg_server.dsn, schema=pg_schema)
    lessons = PostgresLessonStore(pg_server.dsn, schema=pg_schema)
    try:
        await one.append("c", [Message.user("hi")])
        assert await two.load("c") == [Message.user("hi")]
        with pytest.raises(ConversationConflict):
            await two.append("c", [Message.assistant("late")], expected_length=0)
        await lessons.add(scope="s", question="q", feedback="f")
    finally:
        for store in (one, two, lessons):
            await store.aclose()
    rows = _query(
        pg_server,
        f'SELECT component, version FROM "{pg_schema}".tether_versions ORDER BY component',
    )
    assert rows == [("conversations", 1), ("lessons", 1)]
    assert [name for name, _ in _snapshot(pg_server, pg_schema)] == [
        "conversation_messages",
        "lessons",
        "tether_versions",
    ]


async def test_schemas_isolate_stores(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """A conversation in one schema is not seen from another."""
    other = pg_server.new_schema()
    here = PostgresConversationStore(pg_server.dsn, schema=pg_schema)
    there = PostgresConversationStore(pg_server.dsn, schema=other)
    try:
        await here.append("c", [Message.user("here")])
        assert await there.load("c") == []
    finally:
        await here.aclose()
        await there.aclose()
        pg_server.drop(other)


async def test_racing_appends_one_wins_none_interleave(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Eight stores (eight pools) append at once: checked, one wins; unchecked, none mix."""
    stores = [PostgresConversationStore(pg_server.dsn, schema=pg_schema) for _ in range(8)]
    won: list[int] = []
    lost: list[int] = []

    async def checked(i: int) -> None:
        try:
            await stores[i].append(
                "c", [Message.user(f"q{i}"), Message.assistant(f"a{i}")], expected_length=0
            )
            won.append(i)
        except ConversationConflict:
            lost.append(i)

    async def unchecked(i: int) -> None:
        await stores[i].append("d", [Message.user(f"q{i}"), Message.assistant(f"a{i}")])

    try:
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(checked, i)
                tg.start_soon(unchecked, i)
        assert len(won) == 1
        assert sorted(won + lost) == list(range(8))
        (winner,) = won
        assert [m.text for m in await stores[0].load("c")] == [f"q{winner}", f"a{winner}"]
        texts = [m.text for m in await stores[0].load("d")]
        assert len(texts) == 16
        pairs = {(texts[k], texts[k + 1]) for k in range(0, 16, 2)}
        assert pairs == {(f"q{i}", f"a{i}") for i in range(8)}
    finally:
        for store in stores:
            await store.aclose()


async def test_an_append_from_another_process_makes_ours_stale(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """A turn appended by another process is seen here, and a stale append is refused."""
    store = PostgresConversationStore(pg_server.dsn, schema=pg_schema)
    script = textwrap.dedent(
        """
        import sys
        import anyio
        from tether.postgres import PostgresConversationStore
        from tether.providers import Message

        async def main() -> None:
            store = PostgresConversationStore(sys.argv[1], schema=sys.argv[2])
            try:
                await store.append("c", [Message.user("there")], expected_length=1)
            finally:
                await store.aclose()

        anyio.run(main, backend=sys.argv[3])
        """
    )
    try:
        await store.append("c", [Message.user("here")])
        proc = await anyio.run_process(
            [sys.executable, "-c", script, pg_server.dsn, pg_schema, anyio_backend],
            check=False,
            stderr=subprocess.STDOUT,
        )
        assert proc.returncode == 0, proc.stdout.decode()
        with pytest.raises(ConversationConflict, match="has 2 messages, not the 1"):
            await store.append("c", [Message.user("stale")], expected_length=1)
        assert [m.text for m in await store.load("c")] == ["here", "there"]
    finally:
        await store.aclose()


async def test_a_newer_schema_version_is_refused_untouched(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Tables of a newer tether (a higher version) are refused, saying so, and left as they were."""
    store = PostgresLessonStore(pg_server.dsn, schema=pg_schema)
    await store.add(scope="s", question="q", feedback="f")
    await store.aclose()
    _execute(
        pg_server,
        f"UPDATE \"{pg_schema}\".tether_versions SET version = 7 WHERE component = 'lessons'",
    )
    before = _snapshot(pg_server, pg_schema)
    again = PostgresLessonStore(pg_server.dsn, schema=pg_schema)
    with pytest.raises(LessonStoreError, match=r"schema version 7.*supports up to 1") as info:
        await again.recall("s", 5)
    assert "newer tether" in str(info.value)
    await again.aclose()
    assert _snapshot(pg_server, pg_schema) == before


async def test_foreign_tables_are_refused_untouched(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """A schema with a table of the store's name that tether did not record is refused."""
    _execute(pg_server, f'CREATE SCHEMA "{pg_schema}"')
    _execute(pg_server, f'CREATE TABLE "{pg_schema}".conversation_messages (x int)')
    _execute(pg_server, f'INSERT INTO "{pg_schema}".conversation_messages VALUES (1)')
    before = _snapshot(pg_server, pg_schema)
    store = PostgresConversationStore(pg_server.dsn, schema=pg_schema)
    with pytest.raises(ConversationStoreError, match="not a tether conversation store") as info:
        await store.load("c")
    assert "another schema=" in str(info.value)
    await store.aclose()
    assert _snapshot(pg_server, pg_schema) == before


# Processes racing: asyncio in the default tier, trio in the slow one (pytest -m slow).
@pytest.mark.parametrize("anyio_backend", ["asyncio", pytest.param("trio", marks=pytest.mark.slow)])
async def test_two_processes_create_the_tables_at_once(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Four processes opening a new schema at the same moment all succeed (one creates it)."""
    script = textwrap.dedent(
        """
        import sys
        import anyio
        from tether.postgres import PostgresLessonStore

        async def main() -> None:
            store = PostgresLessonStore(sys.argv[1], schema=sys.argv[2])
            try:
                await store.add(scope="s", question=sys.argv[3], feedback=None)
            finally:
                await store.aclose()

        anyio.run(main)
        """
    )
    codes: dict[int, tuple[int | None, str]] = {}

    async def one(i: int) -> None:
        args = [sys.executable, "-c", script, pg_server.dsn, pg_schema, f"p{i}"]
        proc = await anyio.run_process(args, check=False, stderr=subprocess.STDOUT)
        codes[i] = (proc.returncode, proc.stdout.decode())

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(one, i)
    assert [codes[i][0] for i in range(4)] == [0] * 4, codes
    store = PostgresLessonStore(pg_server.dsn, schema=pg_schema)
    try:
        assert sorted(lesson.question for lesson in await store.recall("s", 10)) == [
            "p0",
            "p1",
            "p2",
            "p3",
        ]
    finally:
        await store.aclose()


async def test_a_run_uses_postgres_conversations_and_lessons(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """A Runtime on PostgreSQL: a failed judgement's lesson is recalled, the turns are kept."""
    conversations = PostgresConversationStore(pg_server.dsn, schema=pg_schema)
    lessons = PostgresLessonStore(pg_server.dsn, schema=pg_schema)
    agent = tether.Agent(
        name="pg",
        provider=ScriptedProvider(lambda req, ctx: Reply(text="short")),
        judge=tether.RuleJudge({"long": lambda c: len(c.text) > 10}),
        memory=lessons,
        limits=tether.Limits(max_quality_retries=0),
    )
    try:
        async with tether.Runtime(conversations=conversations) as rt:
            first = await rt.run(agent, "q1", conversation="u")
            second = await rt.run(agent, "q2", conversation="u")
        assert first.termination is tether.Termination.QUALITY_EXHAUSTED
        recalled = [e for e in second.events if isinstance(e, tether.events.LessonsRecalled)]
        assert recalled
        assert len(recalled[0].lesson_ids) >= 1
        assert await conversations.load("u") == []  # runs that did not end ok append nothing
    finally:
        await conversations.aclose()
        await lessons.aclose()


async def test_synchronous_commit_is_set_per_store(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Lessons commit without a WAL flush by default; conversations keep the server's setting."""

    def show(conn: Any) -> str:
        return str(conn.execute("SHOW synchronous_commit").fetchone()[0])

    lessons = PostgresLessonStore(pg_server.dsn, schema=pg_schema)
    chats = PostgresConversationStore(pg_server.dsn, schema=pg_schema)
    flushed = PostgresLessonStore(pg_server.dsn, schema=pg_schema, synchronous_commit=True)
    try:
        assert await lessons._run(show) == "off"
        assert await chats._run(show) == _query(pg_server, "SHOW synchronous_commit")[0][0]
        assert await flushed._run(show) == "on"
    finally:
        for store in (lessons, chats, flushed):
            await store.aclose()
    with pytest.raises(TypeError, match="synchronous_commit"):
        PostgresLessonStore("postgresql://x/y", synchronous_commit="off")  # type: ignore[arg-type]


async def test_a_role_that_cannot_create_uses_tables_made_for_it(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Tables at this tether's version need no DDL: a role with only DML rights uses them."""
    setup = PostgresConversationStore(pg_server.dsn, schema=pg_schema)
    await setup.append("c", [Message.user("hi")])
    await setup.aclose()
    role = f"{pg_schema}_app"
    _execute(pg_server, f'CREATE ROLE "{role}" LOGIN')
    try:
        _execute(pg_server, f'GRANT USAGE ON SCHEMA "{pg_schema}" TO "{role}"')
        _execute(
            pg_server, f'GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA "{pg_schema}" TO "{role}"'
        )
        dsn = psycopg.conninfo.make_conninfo(pg_server.dsn, user=role)
        store = PostgresConversationStore(dsn, schema=pg_schema)
        try:
            await store.append("c", [Message.assistant("hello")], expected_length=1)
            assert [m.text for m in await store.load("c")] == ["hi", "hello"]
        finally:
            await store.aclose()
    finally:
        _execute(pg_server, f'DROP OWNED BY "{role}"')
        _execute(pg_server, f'DROP ROLE "{role}"')


async def test_an_unreachable_server_is_a_clear_store_error(anyio_backend: str) -> None:
    """A server that does not answer is the store's error, naming the DSN without its password."""
    store = PostgresConversationStore(
        "postgresql://me:s3cret@127.0.0.1:1/nowhere", connect_timeout_s=2
    )
    with pytest.raises(ConversationStoreError, match="cannot connect") as info:
        await store.load("c")
    assert "s3cret" not in str(info.value)
    assert "127.0.0.1:1/nowhere" in str(info.value)
    await store.aclose()


def test_bad_arguments_fail_at_construction() -> None:
    """A missing DSN, a bad schema or pool size is a TypeError/ValueError naming the fix."""
    with pytest.raises(TypeError, match="DSN"):
        PostgresConversationStore(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a PostgreSQL DSN"):
        PostgresLessonStore("host=a =b")
    with pytest.raises(ValueError, match="schema"):
        PostgresLessonStore("postgresql://x/y", schema="")
    with pytest.raises(ValueError, match="63-byte"):
        PostgresLessonStore("postgresql://x/y", schema="s" * 64)
    with pytest.raises(ValueError, match="max_connections"):
        PostgresLessonStore("postgresql://x/y", max_connections=0)


def test_repr_hides_the_password() -> None:
    """A store's repr names the database and schema, never the password."""
    text = repr(PostgresConversationStore("postgresql://me:s3cret@db:5433/app", schema="s"))
    assert text == "PostgresConversationStore('postgresql://me@db:5433/app', schema='s')"
    assert isinstance(PostgresConversationStore("postgresql://x/y"), tether.ConversationStore)
    assert isinstance(PostgresLessonStore("postgresql://x/y"), tether.LessonStore)


def test_import_without_the_extra_names_it() -> None:
    """tether imports without psycopg; tether.postgres then fails naming the extra."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None  # as if the extra were not installed
        import tether
        assert tether.Runtime
        try:
            import tether.postgres
        except ImportError as exc:
            print(exc)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=30
    )
    assert "pip install 'tether[postgres]'" in proc.stdout
