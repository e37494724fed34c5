"""The SQLite store: the embedded default, one file at [storage] path.

`engine.py` runs the tables' transactions (writes and quick reads on the event loop, the rest on a
thread of its own, `batch.py`), and `migrations.py` is the schema, which PostgreSQL's follows.
"""

from __future__ import annotations

from pathlib import Path

from bridge.store.cache import ActiveSessions
from bridge.store.search import FTS5
from bridge.store.sqlite.engine import SQLiteEngine
from bridge.store.tables import DatabaseStore

__all__ = ["SQLiteEngine", "SQLiteStore"]


class SQLiteStore(DatabaseStore):
    """The Store in one SQLite file."""

    search_dialect = FTS5

    def __init__(self, path: Path | str, *, sessions: ActiveSessions | None = None) -> None:
        self.path = Path(path)
        super().__init__(SQLiteEngine(path), sessions=sessions)
