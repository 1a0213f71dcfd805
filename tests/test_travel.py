"""What travels to another process (a Ray host, a child process): providers without
their keys, stores as their settings (each copy opens its own connections)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest

import tether
from tether.providers import AnthropicProvider, GeminiProvider, OpenAIProvider


@pytest.mark.parametrize("cls", [AnthropicProvider, OpenAIProvider, GeminiProvider])
def test_a_pickled_provider_carries_no_key_and_reads_its_own_environment(
    cls: type[AnthropicProvider] | type[OpenAIProvider] | type[GeminiProvider],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key given in this process is not in the pickle; the copy reads the env var."""
    monkeypatch.delenv(cls.api_key_env, raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    provider = cls("some-model", api_key="sk-secret-given-here", base_url="http://127.0.0.1:9/v1")
    data = pickle.dumps(provider)
    assert b"sk-secret-given-here" not in data
    assert pickle.loads(data).api_key is None
    monkeypatch.setenv(cls.api_key_env, "sk-from-the-hosts-env")
    copied = pickle.loads(data)
    assert copied.api_key == "sk-from-the-hosts-env"
    assert copied.base_url == provider.base_url
    assert copied.model == provider.model


def test_a_copy_in_the_same_process_keeps_the_key() -> None:
    """copy/deepcopy are not travel: the key stays."""
    provider = AnthropicProvider("claude-x", api_key="sk-ant-kept", stream=False, cache="auto")
    for copied in (copy.copy(provider), copy.deepcopy(provider)):
        assert copied.api_key == "sk-ant-kept"
        assert copied.streaming is False
        assert copied.cache == "auto"


@pytest.mark.anyio
async def test_a_pickled_sqlite_store_opens_its_own_connections(tmp_path: Path) -> None:
    """A used store pickles (no connection or lock inside) and its copy reads the same file."""
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.2)
    assert await store.claimable(limit=1) == []  # opens a connection
    copied = pickle.loads(pickle.dumps(store))
    assert copied.poll_s == 0.2
    assert copied.path == store.path
    assert await copied.claimable(limit=1) == []
    await copied.aclose()
    await store.aclose()


@pytest.mark.anyio
async def test_a_pickled_postgres_store_opens_its_own_pool(pg_dsn: str, pg_schema: str) -> None:
    from tether.postgres import PostgresRunStore

    store = PostgresRunStore(pg_dsn, schema=pg_schema, recheck_s=2.0)
    assert await store.claimable(limit=1) == []  # opens the pool
    copied = pickle.loads(pickle.dumps(store))
    assert copied.recheck_s == 2.0
    assert copied.schema == pg_schema
    assert await copied.claimable(limit=1) == []
    await copied.aclose()
    await store.aclose()
