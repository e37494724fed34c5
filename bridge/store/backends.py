"""Which store a config asks for: the SQLite file at [storage] path, or the PostgreSQL at [storage] url."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bridge.config.storage import StorageSettings
from bridge.errors import StoreError
from bridge.store.tables import DatabaseStore


def store_for(storage: StorageSettings, *, worker_id: str | None = None) -> DatabaseStore:
    """The store [storage] names, not yet opened. `worker_id`: a `bridge run` worker's, which its
    PostgreSQL connections carry in their names."""
    if storage.url is not None:
        from bridge.store.postgres import PostgresStore

        name = "bridge" if worker_id is None else f"bridge-{worker_id}"
        return PostgresStore(storage.url, pool_size=storage.pool_size, application_name=name)
    from bridge.store.sqlite import SQLiteStore

    return SQLiteStore(storage.path)


@contextlib.asynccontextmanager
async def existing_store(storage: StorageSettings) -> AsyncIterator[DatabaseStore]:
    """The bot's database for a read-only command; StoreError when there is no SQLite file (none is
    created). A PostgreSQL database is opened as it is (and its schema brought up to date)."""
    if not storage.postgres and not storage.path.is_file():
        raise StoreError(f"no database at {storage.path}")
    store = store_for(storage)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
