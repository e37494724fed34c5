"""Workers sharing a database split the chats a notification names: one claim a message, not one a worker."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge.app import Bridge
from bridge.events import Inbound
from bridge.gateway import sharing
from bridge.gateway.sharing import preferred
from bridge.store.intake import claim_sessions
from tests.gateway.test_work_share import answering_worker, drained
from tests.harness import OWNER, RecordingSender
from tests.pg import PostgresServer
from tests.waiting import eventually


def test_each_chat_has_one_preferred_worker_and_a_worker_joining_takes_chats_only_to_itself() -> None:
    chats = [hashlib.sha1(str(n).encode()).hexdigest() for n in range(2000)]
    three = ("a", "b", "c")
    before = {chat: preferred(three, chat) for chat in chats}
    # The order the workers are listed in changes nothing.
    assert before == {chat: preferred(("c", "a", "b"), chat) for chat in chats}
    shares = {worker: sum(1 for got in before.values() if got == worker) for worker in three}
    assert all(500 < share < 830 for share in shares.values()), shares
    after = {chat: preferred((*three, "d"), chat) for chat in chats}
    moved = [chat for chat in chats if after[chat] != before[chat]]
    assert moved and all(after[chat] == "d" for chat in moved)
    assert 350 < len(moved) < 650
    # And one leaving gives up only its own.
    without_b = {chat: preferred(("a", "c"), chat) for chat in chats}
    assert all(without_b[chat] == before[chat] for chat in chats if before[chat] != "b")


def chat(n: int) -> Inbound:
    """The owner's message "m<n>" to the bot in group chat number n (a chat, and a session, of its own)."""
    return Inbound(
        surface="test",
        chat_type="group",
        chat_id=str(1000 + n),
        sender_id=OWNER,
        text=f"m{n}",
        message_id=str(n),
        mentioned=True,
    )


@contextlib.asynccontextmanager
async def two_workers(
    tmp_path: Path, postgres: PostgresServer
) -> AsyncIterator[tuple[tuple[Bridge, RecordingSender, sharing.WorkShare], ...]]:
    """Two sharing workers on one database, once each knows the other is alive and alike."""
    url = postgres.database()
    async with (
        answering_worker(tmp_path / "a", postgres, url=url) as a,
        answering_worker(tmp_path / "b", postgres, url=url) as b,
    ):
        for bridge, _, _ in (a, b):
            # What its next beat would say, now that its sender is added.
            await bridge.presence.update("active", "runs")
        both = tuple(sorted(bridge.presence.id for bridge, _, _ in (a, b)))
        await eventually(lambda: a[2].peers() == both == b[2].peers(), "each worker to list both")
        yield a, b


def replies(*senders: RecordingSender) -> set[str]:
    return {text for sender in senders for text in sender.of("reply")}


async def test_a_notified_chat_is_claimed_by_its_preferred_worker_alone(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker hears every message's notification; only the chat's preferred worker tries it, so
    12 messages cost 12 tries of a chat with two workers, not 24. The looks over the whole queue are held
    off, so that only notifications can claim."""
    claims: list[tuple[str, frozenset[str]]] = []

    def recorded(conn: Any, limit: int, skip: Any, surfaces: Any, named: Any = None, **rest: Any) -> Any:
        if named is not None:
            claims.append((rest["me"], frozenset(named)))
        return claim_sessions(conn, limit, skip, surfaces, named, **rest)

    monkeypatch.setattr(sharing, "claim_sessions", recorded)
    monkeypatch.setattr(sharing, "PULL_EVERY_S", 3600.0)
    async with two_workers(tmp_path, postgres) as ((a, a_sent, share), (b, b_sent, _)):
        peers = share.peers()
        claims.clear()
        sessions: dict[str, str] = {}
        for n in range(12):
            # Worker a hears every message (it polls the platform), as one worker does in bridge run.
            sessions[(await a.sessions.active(chat(n))).id] = f"answer to: m{n}"
            await a.handle(chat(n))
        wanted = set(sessions.values())
        await eventually(lambda: replies(a_sent, b_sent) >= wanted, "every message answered")
        # Each chat tried once (a claim may try several chats named together), by its own worker.
        tried = [(me, session_id) for me, named in claims for session_id in named]
        assert sorted(session_id for _, session_id in tried) == sorted(sessions)
        assert all(me == preferred(peers, session_id) for me, session_id in tried)
        # Each answer went out once, from the worker that claimed its chat.
        assert sorted(a_sent.of("reply") + b_sent.of("reply")) == sorted(wanted)
        await drained(a)
        await drained(b)


async def test_a_chat_whose_preferred_worker_cannot_take_it_is_answered_by_another(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """Worker b has no free slot (as when all its runs are busy): a chat that is b's to try is left
    to it, and a finds it in its look over the whole queue, within a second."""
    async with two_workers(tmp_path, postgres) as ((a, a_sent, a_share), (b, b_sent, b_share)):
        b_share.max_runs = 0
        peers = a_share.peers()
        n = 0
        while preferred(peers, (await a.sessions.active(chat(n))).id) != b.presence.id:
            n += 1
        await a.handle(chat(n))
        await eventually(lambda: f"answer to: m{n}" in a_sent.of("reply"), "worker a to answer")
        assert not b_sent.of("reply")
        await drained(a)


async def test_workers_that_send_on_different_surfaces_each_try_every_chat(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """A chat on a surface only some workers send on must not be left to one that cannot answer it:
    once a worker says it sends on another surface, none splits the chats, and every one of them is
    answered by the first worker to claim it."""
    async with two_workers(tmp_path, postgres) as ((a, a_sent, a_share), (b, b_sent, b_share)):
        b.add_sender(RecordingSender(surface="elsewhere"))
        await b.presence.update("active", "runs")  # as its next beat would say
        await eventually(lambda: a_share.peers() == () == b_share.peers(), "neither worker to split")
        for n in range(6):
            await a.handle(chat(n))
        wanted = {f"answer to: m{n}" for n in range(6)}
        await eventually(lambda: replies(a_sent, b_sent) >= wanted, "every message answered")
        assert sorted(a_sent.of("reply") + b_sent.of("reply")) == sorted(wanted)
        await drained(a)
        await drained(b)


async def test_a_stopping_workers_share_of_the_chats_is_tried_by_the_others_at_once(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker in its shutdown grace takes no new chat but still lives: it says so, and the others
    try its share when notified rather than leave it to their looks over the whole queue (held off
    here, so that only a notification can get the chat answered)."""
    async with two_workers(tmp_path, postgres) as ((a, a_sent, a_share), (b, b_sent, _)):
        monkeypatch.setattr(sharing, "PULL_EVERY_S", 3600.0)
        peers = a_share.peers()
        n = 0
        while preferred(peers, (await a.sessions.active(chat(n))).id) != b.presence.id:
            n += 1
        await b.shutdown()
        await eventually(lambda: a_share.peers() == (a.presence.id,), "worker a to take every chat")
        await a.handle(chat(n))
        await eventually(lambda: f"answer to: m{n}" in a_sent.of("reply"), "worker a to answer")
        assert not b_sent.of("reply")
        await drained(a)
