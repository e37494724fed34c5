"""The PostgreSQL store ([storage] url): the same table code as SQLite's, on psycopg 3.

`engine.py` runs the tables' transactions (a writer thread, read threads, pipeline mode), `dialect.py`
turns the shared SQL into psycopg's, `migrations.py` is the schema, and `leases.py` a worker's own
connections: its leases (advisory locks) and the notifications it listens for.
"""

from __future__ import annotations

from bridge.errors import StoreError, first_line
from bridge.store.cache import ActiveSessions
from bridge.store.postgres.engine import PostgresEngine
from bridge.store.search import TSVECTOR
from bridge.store.tables import DatabaseStore

__all__ = ["PostgresEngine", "PostgresStore"]


class PostgresStore(DatabaseStore):
    """The Store on a PostgreSQL server ([storage] url), shared by every worker started with it."""

    search_dialect = TSVECTOR

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        sessions: ActiveSessions | None = None,
        application_name: str = "bridge",
    ) -> None:
        self.url = url
        super().__init__(
            PostgresEngine(url, pool_size=pool_size, application_name=application_name), sessions=sessions
        )

    async def end_worker_connections(self, worker_id: str) -> int:
        """End every connection of another worker (its pool's, its claims', its leases' and its
        listener's, all named `bridge-<worker id>...`): the server drops the locks they hold at once.
        How many were ended. StoreError if the server refuses (a worker connected as another role
        that this one may not signal)."""
        import psycopg

        name = f"bridge-{worker_id}"
        try:
            ended = await self._scalar(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE (application_name = ? OR starts_with(application_name, ?)) "
                "AND pid != pg_backend_pid()",
                (name, f"{name}-"),
            )
        except psycopg.Error as exc:  # a refusal (InsufficientPrivilege) is no server error
            raise StoreError(
                f"{self.engine.label} refused to end worker {worker_id}'s connections: {first_line(exc)}",
                remedy="connect every worker as one PostgreSQL role, or grant theirs pg_signal_backend",
            ) from exc
        return int(ended)
