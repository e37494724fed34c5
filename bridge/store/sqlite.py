"""The SQLite store: the embedded default, one file at [storage] path."""

from __future__ import annotations

from pathlib import Path

from bridge.store.cache import ActiveSessions
from bridge.store.messages import dumps
from bridge.store.search import FTS5
from bridge.store.sessions import new_id
from bridge.store.sqlite_engine import SQLiteEngine
from bridge.store.tables import DatabaseStore

# dumps and new_id are imported from here by the agent and the gateway; they live with their tables.
__all__ = ["SQLiteStore", "dumps", "new_id"]


class SQLiteStore(DatabaseStore):
    """The Store in one SQLite file."""

    search_dialect = FTS5

    def __init__(self, path: Path | str, *, sessions: ActiveSessions | None = None) -> None:
        self.path = Path(path)
        super().__init__(SQLiteEngine(path), sessions=sessions)
