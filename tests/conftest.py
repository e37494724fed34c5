"""Shared fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.store.sqlite import SQLiteStore
from tests.fakes.openai_server import FakeOpenAI


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


@pytest.fixture
async def fake_llm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOpenAI]:
    """A started FakeOpenAI; script it with fake_llm.push(...) and point LLMSettings at .base_url."""
    # httpx honours proxy variables even for loopback, so keep requests to the fake off any proxy.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    async with FakeOpenAI() as server:
        yield server
