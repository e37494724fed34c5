"""The PostgreSQL store ([storage] url): the same table code as SQLite's, on psycopg 3.

`engine.py` runs the tables' transactions (a writer thread, read threads, pipeline mode), `dialect.py`
turns the shared SQL into psycopg's, `migrations.py` is the schema, and `leases.py` a worker's own
connections: its leases (advisory locks) and the notifications it listens for.
"""

from __future__ import annotations

from bridge.store.cache import ActiveSessions
from bridge.store.postgres.engine import PostgresEngine
from bridge.store.search import TSVECTOR
from bridge.store.tables import DatabaseStore

__all__ = ["PostgresEngine", "PostgresStore"]


class PostgresStore(DatabaseStore):
    """The Store on a PostgreSQL server ([storage] url), shared by every worker started with it."""

    search_dialect = TSVECTOR

    def __init__(self, url: str, *, pool_size: int = 10, sessions: ActiveSessions | None = None) -> None:
        self.url = url
        super().__init__(PostgresEngine(url, pool_size=pool_size), sessions=sessions)
