"""Fixtures for store tests: each contract test runs on a SQLite file and on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.store.base import SessionRow
from bridge.store.postgres import PostgresStore
from bridge.store.sqlite import SQLiteStore
from bridge.store.tables import DatabaseStore
from tests.pg import PostgresServer

BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses `store` runs on both backends, but those marked sqlite_only (file
    formats, pragmas, SQLite's query plans)."""
    if "backend" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("sqlite_only")
        metafunc.parametrize("backend", ["sqlite"] if only else list(BACKENDS))


@pytest.fixture
def backend() -> str:
    return "sqlite"  # replaced by pytest_generate_tests' parameter


@pytest.fixture
async def store(backend: str, db_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[DatabaseStore]:
    """A store on `backend`, opened for the test and closed after it: a file under tmp_path, or a
    fresh database on the session's PostgreSQL server."""
    if backend == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres")
        opened: DatabaseStore = PostgresStore(server.database(), pool_size=4)
    else:
        opened = SQLiteStore(db_path)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def session(store: DatabaseStore) -> SessionRow:
    """The active session of key 'main', with a run 'r1' that tool exchanges can belong to."""
    row = await store.ensure_active_session("main")
    await store.start_run("r1", row.id, "console", "hash")
    return row
