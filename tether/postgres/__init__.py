"""PostgreSQL stores: what a fleet of services shares, in one database (docs/guides/postgres.md).

Install the extra (``pip install 'tether[postgres]'``: psycopg 3 and
psycopg-pool) and hand the stores a DSN::

    from tether.postgres import PostgresConversationStore, PostgresLessonStore

    dsn = "postgresql://app@db.internal:5432/app"
    memory = PostgresLessonStore(dsn)
    async with tether.Runtime(conversations=PostgresConversationStore(dsn)) as rt:
        ...

They keep the SQLite stores' semantics (the same recall order and scoping,
the same length-checked append refusing a concurrent one with
``ConversationConflict``), work from asyncio and from trio (sync psycopg in
worker threads), and put their tables in one PostgreSQL schema, ``tether``
unless ``schema=`` says otherwise, created on first use, with a versioned
layout: tables of a version this tether does not know, or tables of the same
names that tether did not create, are refused untouched.
"""

from __future__ import annotations

from ._pg import DEFAULT_SCHEMA as DEFAULT_SCHEMA
from ._pg_runs import PostgresRunStore as PostgresRunStore
from ._pg_stores import PostgresConversationStore as PostgresConversationStore
from ._pg_stores import PostgresLessonStore as PostgresLessonStore

__all__ = [
    "DEFAULT_SCHEMA",
    "PostgresConversationStore",
    "PostgresLessonStore",
    "PostgresRunStore",
]
