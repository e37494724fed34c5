"""Which store a config asks for: the SQLite file at [storage] path, or the PostgreSQL at [storage] url."""

from __future__ import annotations

from bridge.config.storage import StorageSettings
from bridge.store.tables import DatabaseStore


def store_for(storage: StorageSettings) -> DatabaseStore:
    """The store [storage] names, not yet opened."""
    if storage.url is not None:
        from bridge.store.postgres import PostgresStore

        return PostgresStore(storage.url, pool_size=storage.pool_size)
    from bridge.store.sqlite import SQLiteStore

    return SQLiteStore(storage.path)
