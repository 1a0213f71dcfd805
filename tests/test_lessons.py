from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from tether.runtime._lessons import (
    _MIGRATIONS,
    APPLICATION_ID,
    InMemoryLessonStore,
    Lesson,
    LessonStore,
    LessonStoreError,
    SQLiteLessonStore,
)

pytestmark = pytest.mark.anyio

Store = LessonStore
StoreFactory = Callable[..., Store]


def _ticking(start: float = 1_000.0, step: float = 1.0) -> Callable[[], float]:
    now = [start - step]

    def clock() -> float:
        now[0] += step
        return now[0]

    return clock


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[StoreFactory]:
    """A factory for the store under test; every store made is closed afterwards.

    The PostgreSQL stores of one test share a schema of the test's own, as the
    SQLite ones share a file.
    """
    made: list[Store] = []
    schema = request.getfixturevalue("pg_schema") if request.param == "postgres" else ""

    def factory(**kwargs: object) -> Store:
        store: Store
        if request.param == "memory":
            store = InMemoryLessonStore(**kwargs)  # type: ignore[arg-type]
        elif request.param == "sqlite":
            store = SQLiteLessonStore(tmp_path / "lessons.db", **kwargs)  # type: ignore[arg-type]
        else:
            from tether.postgres import PostgresLessonStore

            store = PostgresLessonStore(
                request.getfixturevalue("pg_dsn"),
                schema=schema,
                **kwargs,  # type: ignore[arg-type]
            )
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.aclose()


@pytest.fixture
async def sqlite_stores(
    tmp_path: Path, anyio_backend: str
) -> AsyncIterator[list[SQLiteLessonStore]]:
    """A list to put SQLite stores in; all are closed afterwards."""
    stores: list[SQLiteLessonStore] = []
    yield stores
    for store in stores:
        await store.aclose()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "lessons.db"


@pytest.fixture
def locker(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A second plain sqlite3 connection to the same file, closed afterwards."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


async def test_store_satisfies_protocol(make_store: StoreFactory) -> None:
    """Both stores are LessonStores."""
    assert isinstance(make_store(), LessonStore)


async def test_add_recall_round_trip(make_store: StoreFactory) -> None:
    """A stored lesson comes back equal, every field intact."""
    store = make_store()
    added = await store.add(
        scope="researcher",
        question="What is 2+2?",
        feedback="- accuracy: wrong sum",
        answer=None,
        run_id="run-1",
    )
    assert added.scope == "researcher"
    assert added.feedback == "- accuracy: wrong sum"
    assert added.answer is None
    assert added.run_id == "run-1"
    assert await store.recall("researcher", 5) == [added]


async def test_answer_stored_as_given(make_store: StoreFactory) -> None:
    """Without feedback the failed answer the caller passed is kept."""
    store = make_store()
    added = await store.add(scope="a", question="q", feedback=None, answer="bad answer")
    [back] = await store.recall("a", 1)
    assert back == added
    assert back.answer == "bad answer"
    assert back.feedback is None
    assert back.run_id is None


async def test_recall_newest_first(make_store: StoreFactory) -> None:
    """Recall orders by created_at, newest first."""
    store = make_store(clock=_ticking())
    added = [await store.add(scope="s", question=f"q{i}", feedback="f") for i in range(5)]
    assert await store.recall("s", 10) == added[::-1]


async def test_recall_ties_broken_by_id(make_store: StoreFactory) -> None:
    """Lessons sharing a created_at come back in reverse insertion order (by id)."""
    store = make_store(clock=lambda: 1_700_000_000.0)
    added = [await store.add(scope="s", question=f"q{i}", feedback="f") for i in range(6)]
    assert [lesson.id for lesson in added] == sorted(lesson.id for lesson in added)
    recalled = await store.recall("s", 10)
    assert [lesson.question for lesson in recalled] == [f"q{i}" for i in reversed(range(6))]


async def test_recall_fixed_count(make_store: StoreFactory) -> None:
    """Recall returns at most `limit` lessons; 0 gives none; a negative limit is refused."""
    store = make_store(clock=_ticking())
    for i in range(10):
        await store.add(scope="s", question=f"q{i}", feedback="f")
    assert [lesson.question for lesson in await store.recall("s", 3)] == ["q9", "q8", "q7"]
    assert await store.recall("s", 0) == []
    with pytest.raises(ValueError, match="limit"):
        await store.recall("s", -1)


async def test_scope_isolation(make_store: StoreFactory) -> None:
    """Another scope's lessons are never recalled."""
    store = make_store(clock=_ticking())
    mine = await store.add(scope="alpha", question="q-alpha", feedback="f")
    await store.add(scope="beta", question="q-beta", feedback="f")
    await store.add(scope="alphabet", question="q-alphabet", feedback="f")
    assert await store.recall("alpha", 10) == [mine]
    assert await store.recall("gamma", 10) == []


async def test_thousand_lessons_newest_k(make_store: StoreFactory) -> None:
    """With 1,000 lessons stored, recall gives exactly the newest k, in order."""
    store = make_store(clock=_ticking())
    for i in range(1000):
        await store.add(scope="s", question=f"q{i}", feedback=None, answer=f"a{i}")
        if i % 100 == 0:
            await store.add(scope="other", question=f"o{i}", feedback="f")
    recalled = await store.recall("s", 7)
    assert [lesson.question for lesson in recalled] == [f"q{i}" for i in range(999, 992, -1)]


async def test_concurrent_adds_lose_nothing(make_store: StoreFactory) -> None:
    """200 concurrent adds are all stored, with distinct ids."""
    store = make_store()
    results: list[Lesson] = []

    async def add(i: int) -> None:
        results.append(await store.add(scope="s", question=f"q{i}", feedback="f"))

    async with anyio.create_task_group() as tg:
        for i in range(200):
            tg.start_soon(add, i)
    recalled = await store.recall("s", 1000)
    assert len(recalled) == 200
    assert {lesson.id for lesson in recalled} == {lesson.id for lesson in results}
    assert {lesson.question for lesson in recalled} == {f"q{i}" for i in range(200)}


async def test_store_reusable_after_aclose(make_store: StoreFactory) -> None:
    """aclose releases resources; a later call opens them again."""
    store = make_store()
    first = await store.add(scope="s", question="q", feedback="f")
    await store.aclose()
    assert await store.recall("s", 5) == [first]


async def test_as_prompt_prefers_feedback() -> None:
    """as_prompt carries the question and feedback, and not the answer when feedback exists."""
    lesson = Lesson(
        id="1",
        scope="s",
        question="Who wrote Hamlet?",
        feedback="- accuracy: named the wrong author",
        answer="Marlowe",
        created_at=1.0,
    )
    text = lesson.as_prompt()
    assert "Who wrote Hamlet?" in text
    assert "named the wrong author" in text
    assert "Marlowe" not in text


async def test_as_prompt_uses_answer_without_feedback() -> None:
    """Without feedback, as_prompt shows the rejected answer."""
    lesson = Lesson(
        id="1",
        scope="s",
        question="Who wrote Hamlet?",
        feedback=None,
        answer="Marlowe",
        created_at=1.0,
    )
    text = lesson.as_prompt()
    assert "Who wrote Hamlet?" in text
    assert "Marlowe" in text


async def test_as_prompt_cuts_long_fields() -> None:
    """as_prompt stays short when a field is huge."""
    lesson = Lesson(
        id="1", scope="s", question="q", feedback="x" * 50_000, answer=None, created_at=1.0
    )
    assert len(lesson.as_prompt()) < 2_100


# --- SQLite only --------------------------------------------------------------------


async def test_sqlite_schema_wal_and_index(
    db_path: Path, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """First use creates the versioned schema, the recall index and WAL mode."""
    store = SQLiteLessonStore(db_path)
    sqlite_stores.append(store)
    assert not await anyio.Path(db_path).exists()  # opened lazily
    await store.recall("s", 1)
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        index_sql = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'lessons_recall'"
        ).fetchone()[0]
        assert "scope, created_at DESC, id DESC" in index_sql
    finally:
        conn.close()


async def test_sqlite_two_instances_share_a_file(
    db_path: Path, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """Two stores on one file see each other's writes."""
    one, two = SQLiteLessonStore(db_path), SQLiteLessonStore(db_path)
    sqlite_stores += [one, two]
    a = await one.add(scope="s", question="from one", feedback="f")
    b = await two.add(scope="s", question="from two", feedback="f")
    assert await one.recall("s", 10) == [b, a]
    assert await two.recall("s", 10) == [b, a]


async def test_sqlite_second_process_writes(
    db_path: Path, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """A lesson written by another process is recalled here."""
    store = SQLiteLessonStore(db_path)
    sqlite_stores.append(store)
    mine = await store.add(scope="s", question="here", feedback="f")
    script = textwrap.dedent(
        """
        import sys
        import anyio
        from tether.runtime._lessons import SQLiteLessonStore

        async def main() -> None:
            store = SQLiteLessonStore(sys.argv[1])
            try:
                await store.add(scope="s", question="there", feedback="from afar")
            finally:
                await store.aclose()

        anyio.run(main)
        """
    )
    proc = await anyio.run_process(
        [sys.executable, "-c", script, str(db_path)], check=False, stderr=subprocess.STDOUT
    )
    assert proc.returncode == 0, proc.stdout.decode()
    recalled = await store.recall("s", 10)
    assert [lesson.question for lesson in recalled] == ["there", "here"]
    assert recalled[1] == mine


async def test_sqlite_corrupt_file(db_path: Path, sqlite_stores: list[SQLiteLessonStore]) -> None:
    """A file that is not a database raises LessonStoreError naming the path."""
    await anyio.Path(db_path).write_bytes(b"definitely not a database\n" * 500)
    store = SQLiteLessonStore(db_path)
    sqlite_stores.append(store)
    with pytest.raises(LessonStoreError, match="not a usable SQLite database") as info:
        await store.add(scope="s", question="q", feedback="f")
    assert str(db_path) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    with pytest.raises(LessonStoreError):
        await store.recall("s", 1)


async def test_sqlite_unopenable_path(
    tmp_path: Path, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """A path in a missing directory raises LessonStoreError saying it cannot open it."""
    path = tmp_path / "missing" / "dir" / "lessons.db"
    store = SQLiteLessonStore(path)
    sqlite_stores.append(store)
    with pytest.raises(LessonStoreError, match="cannot open lesson store") as info:
        await store.recall("s", 1)
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.Error)


async def test_sqlite_locked_database(
    db_path: Path, locker: sqlite3.Connection, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """A write blocked past the busy timeout raises LessonStoreError saying it is locked."""
    store = SQLiteLessonStore(db_path, busy_timeout_s=0.1)
    sqlite_stores.append(store)
    kept = await store.add(scope="s", question="before", feedback="f")
    locker.execute("BEGIN EXCLUSIVE")
    with pytest.raises(LessonStoreError, match=r"is locked.*busy timeout \(0\.1 s\)") as info:
        await store.add(scope="s", question="during", feedback="f")
    assert str(db_path) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    locker.execute("ROLLBACK")
    assert await store.recall("s", 10) == [kept]


async def test_sqlite_locked_before_first_use(
    db_path: Path, locker: sqlite3.Connection, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """A file locked while the store sets it up raises LessonStoreError, and works once freed."""
    locker.execute("BEGIN EXCLUSIVE")
    store = SQLiteLessonStore(db_path, busy_timeout_s=0.1)
    sqlite_stores.append(store)
    with pytest.raises(LessonStoreError, match="is locked"):
        await store.recall("s", 1)
    locker.execute("ROLLBACK")
    added = await store.add(scope="s", question="q", feedback="f")
    assert await store.recall("s", 1) == [added]


async def test_sqlite_newer_schema_refused(
    db_path: Path, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """A file with a newer schema version is refused with a clear error and left untouched."""
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("PRAGMA user_version = 99")
        conn.commit()
    finally:
        conn.close()
    store = SQLiteLessonStore(db_path)
    sqlite_stores.append(store)
    with pytest.raises(LessonStoreError, match=r"schema version 99.*supports up to 1"):
        await store.add(scope="s", question="q", feedback="f")
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 99
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    finally:
        conn.close()


def test_sqlite_refuses_memory_path() -> None:
    """':memory:' is refused: pooled connections would each see an empty database."""
    with pytest.raises(ValueError, match="InMemoryLessonStore"):
        SQLiteLessonStore(":memory:")


def _foreign_db(path: Path, *pragmas: str) -> bytes:
    """A SQLite file of some other program (a ``users`` table, rollback journal); its bytes."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
        for pragma in pragmas:
            conn.execute(pragma)
        conn.execute("CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
        conn.commit()
    finally:
        conn.close()
    return path.read_bytes()


def _stamped_db(path: Path) -> bytes:
    """An empty SQLite file with another program's application_id; its bytes."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA application_id = 1234")
        conn.commit()
    finally:
        conn.close()
    return path.read_bytes()


def _assert_untouched(path: Path, before: bytes) -> None:
    """The file is byte for byte as it was, still in rollback-journal mode, with no WAL files."""
    for suffix in ("-wal", "-shm", "-journal"):
        assert not Path(f"{path}{suffix}").exists(), suffix
    assert path.read_bytes() == before
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "pragmas",
    [
        (),
        ("PRAGMA user_version = 7",),
        ("PRAGMA user_version = 1",),
        ("PRAGMA application_id = 1234",),
    ],
    ids=["other-tables", "other-version", "our-version", "other-application-id"],
)
async def test_sqlite_foreign_database_refused_untouched(
    db_path: Path, sqlite_stores: list[SQLiteLessonStore], pragmas: tuple[str, ...]
) -> None:
    """Another program's SQLite file is refused before anything in it changes."""
    before = _foreign_db(db_path, *pragmas)
    store = SQLiteLessonStore(db_path)
    sqlite_stores.append(store)
    with pytest.raises(LessonStoreError, match="not a tether lesson store") as info:
        await store.recall("s", 1)
    assert str(db_path) in str(info.value)
    with pytest.raises(LessonStoreError, match="not a tether lesson store"):
        await store.add(scope="s", question="q", feedback="f")
    await store.aclose()
    _assert_untouched(db_path, before)


async def test_sqlite_foreign_application_id_refused_even_when_empty(
    db_path: Path, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """An empty database stamped with another program's application_id is not adopted."""
    before = _stamped_db(db_path)
    store = SQLiteLessonStore(db_path)
    sqlite_stores.append(store)
    with pytest.raises(LessonStoreError, match="application_id 1234"):
        await store.recall("s", 1)
    await store.aclose()
    _assert_untouched(db_path, before)


def _legacy_store(path: Path) -> None:
    """A lessons file as tether made it before application_id was set (it stays 0)."""
    conn = sqlite3.connect(path)
    try:
        for statement in _MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        conn.commit()
    finally:
        conn.close()


async def test_sqlite_own_files_are_recognised(
    db_path: Path, tmp_path: Path, sqlite_stores: list[SQLiteLessonStore]
) -> None:
    """New files get tether's application_id; files from before it was set still open."""
    _legacy_store(db_path)
    legacy = SQLiteLessonStore(db_path)
    fresh_path = tmp_path / "fresh.db"
    fresh = SQLiteLessonStore(fresh_path)
    sqlite_stores += [legacy, fresh]
    for store in (legacy, fresh):
        added = await store.add(scope="s", question="q", feedback="f")
        assert await store.recall("s", 1) == [added]
    conn = sqlite3.connect(fresh_path)
    try:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    finally:
        conn.close()
