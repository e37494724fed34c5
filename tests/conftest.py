"""Shared fixtures."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bridge.store.sqlite import SQLiteStore
from devkit.fakes.openai_server import FakeOpenAI
from tests.pg import PostgresServer, postgres_server


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "bridge.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    """A real SQLite store under tmp_path, opened for the test and closed after it."""
    store = SQLiteStore(db_path)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the whole run (started on first use); `.database()` gives each
    test an empty database of its own."""
    with postgres_server() as server:
        yield server


@pytest.fixture(autouse=True)
def _loopback_without_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fake serves on 127.0.0.1, and httpx honours proxy variables even for loopback."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def isolated_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No BRIDGE_* variable of the outer environment and no ./config.toml of the repo leaks in (config
    tests use it with pytest.mark.usefixtures)."""
    for name in list(os.environ):
        if name.upper().startswith("BRIDGE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    """A started FakeOpenAI; script it with fake_llm.push(...) and point LLMSettings at .base_url."""
    async with FakeOpenAI() as server:
        yield server
