"""Fixtures for store tests: a real SQLite file under tmp_path, opened and closed per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.store.base import SessionRow
from bridge.store.sqlite import SQLiteStore


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "bridge.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(db_path)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def session(store: SQLiteStore) -> SessionRow:
    """The active session of key 'main', with a run 'r1' that tool exchanges can belong to."""
    row = await store.ensure_active_session("main")
    await store.start_run("r1", row.id, "console", "hash")
    return row
