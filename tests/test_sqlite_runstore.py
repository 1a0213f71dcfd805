"""SQLiteRunStore: the run store contract, and what is SQLite's own (files, schema, processes)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import anyio
import pytest

import tether
from tests.runstore_contract import *  # noqa: F403
from tests.runstore_contract import MakeStore, new_run
from tether.runtime._sqliteruns import _SCHEMA_V1, APPLICATION_ID, SCHEMA_VERSION

pytestmark = pytest.mark.anyio


@pytest.fixture
def make_store(tmp_path: Path) -> MakeStore:
    """A new SQLiteRunStore object on one fresh file each time it is called."""
    return lambda: tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01)


async def test_refuses_a_foreign_file_untouched(tmp_path: Path) -> None:
    """A SQLite file of another program is refused with a clear error and left as it was."""
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE things (x)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    store = tether.SQLiteRunStore(path)
    with pytest.raises(tether.RunStoreError, match="not a tether run store"):
        await store.get("r1")
    await store.aclose()
    assert _untouched(path, before)


def _untouched(path: Path, before: bytes) -> bool:
    return path.read_bytes() == before and not Path(f"{path}-wal").exists()


async def test_a_conversation_file_is_not_a_run_store(tmp_path: Path) -> None:
    """Another tether store's file is refused too (its application_id differs)."""
    path = tmp_path / "chats.db"
    chats = tether.SQLiteConversationStore(path)
    await chats.load("c")
    await chats.aclose()
    store = tether.SQLiteRunStore(path)
    with pytest.raises(tether.RunStoreError, match="application_id"):
        await store.create(new_run(), owner="A", lease_s=60)
    await store.aclose()


async def test_schema_is_versioned_and_wal(tmp_path: Path) -> None:
    """A new file gets the schema version, the application id and WAL."""
    path = tmp_path / "runs.db"
    store = tether.SQLiteRunStore(path)
    await store.create(new_run(), owner="A", lease_s=60)
    await store.aclose()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA application_id").fetchone()[0] == 0x54746852
    conn.close()


async def test_a_version_1_file_is_migrated_to_epochs(tmp_path: Path) -> None:
    """A file from before lease epochs opens: its runs keep their data at epoch 0, the
    next claim gives epoch 1, and the claimer's fenced writes land."""
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    for statement in _SCHEMA_V1:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO runs (run_id, agent, input, messages, created_at, status, owner, "
        "lease_expires_at, updated_at) VALUES ('old', 'planner', 'hi', '[]', 1, 'running', "
        "'gone', 0, 1)"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = tether.SQLiteRunStore(path)
    try:
        old = await store.get("old")
        assert old is not None
        assert (old.owner, old.epoch, old.input) == ("gone", 0, "hi")
        claim = await store.claim("old", owner="A", lease_s=60)
        assert claim is not None
        assert claim.epoch == 1
        await store.commit(
            "old", owner="A", events=[], checkpoint={"round": 1}, lease_s=60, epoch=1
        )
    finally:
        await store.aclose()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3  # migrated to the newest
    conn.close()


def test_bad_arguments_are_clear(tmp_path: Path) -> None:
    """An in-memory path or a non-positive poll interval is a ValueError at construction."""
    with pytest.raises(ValueError, match="needs a file path"):
        tether.SQLiteRunStore(":memory:")
    with pytest.raises(ValueError, match="poll_s"):
        tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0)


CLAIMER = """
import json, os, sys, time
import anyio
import tether

path, go, owner = sys.argv[1:4]

async def main() -> None:
    store = tether.SQLiteRunStore(path)
    won = []
    while not os.path.exists(go):
        time.sleep(0.001)
    for i in range(40):
        if await store.claim(f"r{i}", owner=owner, lease_s=60) is not None:
            won.append(f"r{i}")
    await store.aclose()
    print(json.dumps(won))

anyio.run(main)
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the claimers are processes either way
async def test_concurrent_claimers_in_processes_one_wins(tmp_path: Path) -> None:
    """Six processes race to claim each of 40 expired runs: each run has exactly one winner."""
    path = tmp_path / "runs.db"
    store = tether.SQLiteRunStore(path)
    for i in range(40):
        await store.create(new_run(f"r{i}"), owner="dead", lease_s=0)
    await store.aclose()
    go = tmp_path / "go"
    procs = [
        await anyio.open_process(
            [sys.executable, "-c", CLAIMER, str(path), str(go), f"p{n}"], stderr=None
        )
        for n in range(6)
    ]
    await anyio.sleep(0.5)  # let them start; then all at once
    await anyio.Path(go).touch()
    wins: list[str] = []
    for proc in procs:
        assert proc.stdout is not None
        async with proc:
            out = b"".join([chunk async for chunk in proc.stdout])
            assert await proc.wait() == 0
        wins += json.loads(out)
    assert sorted(wins) == sorted(f"r{i}" for i in range(40))
