"""Fixtures for store tests: a real SQLite file under tmp_path, opened and closed per test."""

from __future__ import annotations

import pytest

from bridge.store.base import SessionRow
from bridge.store.sqlite import SQLiteStore


@pytest.fixture
async def session(store: SQLiteStore) -> SessionRow:
    """The active session of key 'main', with a run 'r1' that tool exchanges can belong to."""
    row = await store.ensure_active_session("main")
    await store.start_run("r1", row.id, "console", "hash")
    return row
