"""SQLiteRunStore: the run store contract, and what is SQLite's own (files, schema, processes)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import tether
from tests.runstore_contract import *  # noqa: F403
from tests.runstore_contract import MakeStore, new_run

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
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA application_id").fetchone()[0] == 0x54746852
    conn.close()


def test_bad_arguments_are_clear(tmp_path: Path) -> None:
    """An in-memory path or a non-positive poll interval is a ValueError at construction."""
    with pytest.raises(ValueError, match="needs a file path"):
        tether.SQLiteRunStore(":memory:")
    with pytest.raises(ValueError, match="poll_s"):
        tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0)
