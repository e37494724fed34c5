"""A worker standing by for a platform connection keeps standing by while the database is out of reach
(a restart), so the platform is never left unread once the worker that listens ends."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from bridge.app import platforms
from bridge.errors import StoreError
from tests.waiting import eventually


@dataclass
class Store:
    """claim_worker fails while the database is down, then grants the lock."""

    down_for: int
    calls: int = 0
    watched: list[str] = field(default_factory=list)

    async def claim_worker(
        self, *, standby: asyncio.Event, name: str, what: str, fresh_grace: bool = False
    ) -> bool:
        self.calls += 1
        if self.calls <= self.down_for:
            raise StoreError("connection refused")
        return True

    async def watch_claim(self, lost: Any, name: str) -> None:
        self.watched.append(name)


@dataclass
class Presence:
    holds: str = "runs"
    updates: list[str] = field(default_factory=list)

    async def update(self, state: str, holds: str) -> None:
        self.updates.append(holds)


@dataclass
class Adapter:
    started: bool = False

    async def start(self, handler: Any) -> None:
        self.started = True


@dataclass
class Bridge:
    store: Store
    presence: Presence = field(default_factory=Presence)
    background: set[asyncio.Task[None]] = field(default_factory=set)
    settings: Any = None
    senders: list[Any] = field(default_factory=list)

    def add_sender(self, adapter: Any) -> None:
        self.senders.append(adapter)

    async def handle(self, inbound: Any) -> None:
        return None

    def on_claim_lost(self) -> None:
        raise AssertionError("a standby that could not reach the database must not stop the worker")


async def test_a_standby_that_cannot_reach_the_database_keeps_trying_and_takes_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(platforms, "STANDBY_POLL_S", 0.01)
    monkeypatch.setattr(platforms, "holding", lambda name, settings: "telegram polling")
    bridge, adapter = Bridge(Store(down_for=3)), Adapter()
    started: list[Any] = [adapter]
    stop = asyncio.Event()
    lock = "bridge.platform:telegram"
    await asyncio.wait_for(
        platforms._take_over(bridge, adapter, "telegram", lock, "the polling", stop, started),  # type: ignore[arg-type]
        5,
    )
    await asyncio.gather(*bridge.background)
    assert bridge.store.calls == 4 and adapter.started and bridge.store.watched == [lock]


async def test_a_stop_while_the_database_is_out_of_reach_ends_the_standby(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(platforms, "STANDBY_POLL_S", 0.01)
    bridge, adapter = Bridge(Store(down_for=10**6)), Adapter()
    stop = asyncio.Event()
    standby = asyncio.create_task(
        platforms._take_over(bridge, adapter, "telegram", "lock", "the polling", stop, []),  # type: ignore[arg-type]
    )
    await eventually(lambda: bridge.store.calls >= 2, "the standby to try the database again")
    stop.set()
    await asyncio.wait_for(standby, 5)
    assert not adapter.started
