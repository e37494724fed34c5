"""The shared intake queue and the takeover of a dead worker's rows, on both backends and across workers."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator

import pytest

from bridge.store.base import OutboxItem, QueueFull, SessionMeta, SessionRow
from bridge.store.engine import Conn
from bridge.store.intake import Claimed, claim_sessions, session_lease, worker_lease
from bridge.store.postgres import PostgresStore
from bridge.store.postgres.leases import PgLeases
from bridge.store.tables import DatabaseStore
from tests.pg import PostgresServer


async def queued(store: DatabaseStore) -> list[tuple[int, str]]:
    rows = await store._rows("SELECT message_id, session_id FROM intake ORDER BY message_id")
    return [(int(m), s) for m, s in rows]


async def begin(store: DatabaseStore, session_id: str, run_id: str) -> None:
    await store.begin_run(run_id, session_id, "telegram", memory_scope="", history_limit=50, memory_limit=0)


async def test_a_chat_message_waits_in_intake_until_a_run_takes_it_up(store: DatabaseStore) -> None:
    chat = await store.ensure_active_session("telegram:dm:1")
    first = await store.add_user_message(chat.id, "one", platform_msg_id="telegram:1:1")
    second = await store.add_user_message(chat.id, "two", platform_msg_id="telegram:1:2")
    # A redelivery is stored once, and queued once.
    assert await store.add_user_message(chat.id, "two", platform_msg_id="telegram:1:2") is None
    # A message another session sent (sessions_send) is answered by its own machinery, not the queue.
    await store.add_user_message(chat.id, "from main", via_session="main")
    assert first is not None and second is not None
    assert await queued(store) == [(first, chat.id), (second, chat.id)]
    assert await store.next_waiting(chat.id) == (first, "telegram:1:1")
    await begin(store, chat.id, "r1")  # answers the newest, so both
    assert await queued(store) == []
    assert await store.next_waiting(chat.id) is None


async def test_a_message_past_its_chats_queue_limit_is_not_stored_and_the_writes_beside_it_are(
    store: DatabaseStore,
) -> None:
    chat = await store.ensure_active_session("telegram:dm:1")
    other = await store.ensure_active_session("telegram:dm:2")
    for text in ("one", "two"):
        await store.add_user_message(chat.id, text, queue_limit=2)
    # Side by side, so that an engine that commits queued writes together commits these together.
    refused, elsewhere = await asyncio.gather(
        store.add_user_message(chat.id, "three", queue_limit=2),
        store.add_user_message(other.id, "elsewhere", queue_limit=2),
        return_exceptions=True,
    )
    assert isinstance(refused, QueueFull)
    assert isinstance(elsewhere, int)
    assert [m.content for m in await store.history(chat.id, 10)] == ["one", "two"]
    assert (await store.count_waiting(chat.id), await store.count_waiting(other.id)) == (2, 1)
    await begin(store, chat.id, "r1")  # a run takes them up: the chat has room again
    assert await store.add_user_message(chat.id, "three", queue_limit=2) is not None


async def test_clear_and_stop_take_a_chats_messages_off_the_queue(store: DatabaseStore) -> None:
    chat = await store.ensure_active_session("telegram:dm:1")
    await store.add_user_message(chat.id, "one")
    await store.start_new_session("telegram:dm:1")
    assert await queued(store) == []
    fresh = await store.active_session("telegram:dm:1")
    assert fresh is not None
    await store.add_user_message(fresh.id, "two")
    assert await store.skip_unanswered(fresh.id, "dropped by /stop")
    assert await queued(store) == []


async def test_a_dead_workers_runs_are_aborted_once_and_its_rows_taken_over_once(
    store: DatabaseStore,
) -> None:
    chat = await store.ensure_active_session("telegram:dm:1")
    live = await store.ensure_active_session("telegram:dm:2")
    store.worker_id = "dead"
    await store.add_user_message(chat.id, "one")
    await begin(store, chat.id, "r-dead")
    [row] = await store.add_outbox(OutboxItem("reply", "telegram", "1", "hi", "pending", worker_id="dead"))
    store.worker_id = "alive"
    await store.add_user_message(live.id, "two")
    await begin(store, live.id, "r-alive")
    await store.add_outbox(OutboxItem("reply", "telegram", "2", "yo", "pending", worker_id="alive"))

    assert await store.others_with_work("me") == {"dead", "alive"}
    aborted = await store.abort_interrupted_runs(workers=["dead"])
    assert [run.id for run in aborted] == ["r-dead"]
    assert await store.abort_interrupted_runs(workers=["dead"]) == []  # once
    assert await store.take_over_outbox(["dead", None], "me", ["discord"]) == []  # not its surface
    taken = await store.take_over_outbox(["dead", None], "me", ["telegram"])
    assert [(r.id, r.item.worker_id, r.item.text) for r in taken] == [(row, "me", "hi")]
    assert await store.take_over_outbox(["dead", None], "other", ["telegram"]) == []  # once
    assert await store.others_with_work("me") == {"alive"}
    running = await store._rows("SELECT id FROM runs WHERE status = 'running'")
    assert running == [("r-alive",)]


# ---------------------------------------------------------------- several workers (PostgreSQL)


@pytest.fixture
async def leases(postgres: PostgresServer) -> AsyncIterator[tuple[PostgresStore, PgLeases, PgLeases]]:
    """A store and the lease connections of two workers on one database."""
    url = postgres.database()
    store = PostgresStore(url, pool_size=4)
    await store.open()
    first = PgLeases(url, "test", application_name="bridge-first")
    second = PgLeases(url, "test", application_name="bridge-second")
    await asyncio.gather(first.open(), second.open())
    try:
        yield store, first, second
    finally:
        await asyncio.gather(first.close(), second.close())
        await store.close()


async def test_two_workers_claiming_at_once_never_claim_the_same_chat(
    leases: tuple[PostgresStore, PgLeases, PgLeases],
) -> None:
    store, first, second = leases
    chats = [
        await store.ensure_active_session(f"telegram:dm:{n}", SessionMeta(surface="telegram"))
        for n in range(40)
    ]
    for chat in chats:
        await store.add_user_message(chat.id, "hello")
    claim = functools.partial(claim_sessions, limit=30, skip=(), surfaces=["telegram"])
    mine, theirs = await asyncio.gather(first.run(claim), second.run(claim))
    if len(mine) < len(theirs):
        (first, mine), (second, theirs) = (second, theirs), (first, mine)
    keys_a, keys_b = {c.session.key for c in mine}, {c.session.key for c in theirs}
    # The one that came second skipped the chats the first had locked; it finds what is left once
    # the first has committed (as its claim loop does, woken by the first claim's notification).
    keys_b |= {c.session.key for c in await second.run(functools.partial(claim, skip=keys_b))}
    assert not keys_a & keys_b
    assert len(keys_a | keys_b) == 40
    # Oldest first, within each worker's share.
    assert [c.message_id for c in mine] == sorted(c.message_id for c in mine)
    # Held: a claim now finds nothing, until one lets a chat go.
    assert await second.run(functools.partial(claim, skip=keys_b)) == []
    assert await first.run(functools.partial(claim, skip=keys_a)) == []
    let_go = next(iter(keys_a))
    await first.unlock(session_lease(let_go))
    assert [c.session.key for c in await second.run(functools.partial(claim, skip=keys_b))] == [let_go]


async def test_a_claim_skips_chats_it_runs_already_and_surfaces_it_cannot_send_on(
    leases: tuple[PostgresStore, PgLeases, PgLeases],
) -> None:
    store, first, _ = leases
    tg = await store.ensure_active_session("telegram:dm:1", SessionMeta(surface="telegram"))
    dc = await store.ensure_active_session("discord:dm:1", SessionMeta(surface="discord"))
    for chat in (tg, dc):
        await store.add_user_message(chat.id, "hello")
    claimed = await first.run(functools.partial(claim_sessions, limit=5, skip=(), surfaces=["discord"]))
    assert [c.session.key for c in claimed] == ["discord:dm:1"]
    skipping = functools.partial(claim_sessions, limit=5, skip={"telegram:dm:1"}, surfaces=["telegram"])
    assert await first.run(skipping) == []


async def test_a_workers_own_lock_is_free_the_moment_its_connection_ends(
    leases: tuple[PostgresStore, PgLeases, PgLeases],
) -> None:
    _, first, second = leases
    await first.lock(worker_lease("first"))
    assert not await second.is_free(worker_lease("first"))
    await first.close()  # as a kill -9 ends it: the server drops the connection's locks
    assert await second.is_free(worker_lease("first"))


async def test_the_free_among_several_workers_locks_are_told_in_one_call_that_keeps_none(
    leases: tuple[PostgresStore, PgLeases, PgLeases],
) -> None:
    _, first, second = leases
    await first.lock(worker_lease("alive"))
    await second.lock(worker_lease("mine"))
    gone, also_gone, mine = (worker_lease(w) for w in ("gone", "also gone", "mine"))
    names = [worker_lease("alive"), gone, also_gone, mine]
    # A lock of its own connection is taken again and given back, as is_free does (a worker never
    # asks of its own): it stays held.
    assert await second.free(names) == {gone, also_gone, mine}
    assert not await first.is_free(mine)
    assert not await second.is_free(worker_lease("alive"))
    # Tried and given back: the free ones are still free, for another to take.
    assert await first.lock(gone)
    assert await second.free(names) == {also_gone, mine}
    assert await second.free([]) == set()


async def waiting_chats(store: PostgresStore, count: int) -> list[SessionRow]:
    chats = [
        await store.ensure_active_session(f"telegram:dm:{n}", SessionMeta(surface="telegram"))
        for n in range(count)
    ]
    for chat in chats:
        await store.add_user_message(chat.id, "hello")
    return chats


async def test_a_claim_takes_no_lease_past_its_limit(
    leases: tuple[PostgresStore, PgLeases, PgLeases],
) -> None:
    store, first, second = leases
    chats = await waiting_chats(store, 5)
    claimed = await first.run(functools.partial(claim_sessions, limit=2, skip=(), surfaces=["telegram"]))
    # The oldest two, and only their leases: the leases are tried one candidate at a time, below the limit.
    assert [c.session.key for c in claimed] == [chats[0].key, chats[1].key]
    assert not await second.is_free(session_lease(chats[1].key))
    for chat in chats[2:]:
        assert await second.is_free(session_lease(chat.key))


async def test_a_named_claim_tries_only_the_chats_a_notification_named(
    leases: tuple[PostgresStore, PgLeases, PgLeases],
) -> None:
    store, first, _ = leases
    chats = await waiting_chats(store, 3)
    claim = functools.partial(claim_sessions, limit=5, skip=(), surfaces=["telegram"])
    assert await first.run(functools.partial(claim, named=[])) == []
    claimed = await first.run(functools.partial(claim, named=[chats[2].id, "no-such-session"]))
    assert [c.session.key for c in claimed] == [chats[2].key]
    # The rest are still there for a claim over the whole queue, oldest first.
    rest = await first.run(functools.partial(claim, skip={chats[2].key}))
    assert [c.session.key for c in rest] == [chats[0].key, chats[1].key]


async def test_a_claim_finds_what_other_workers_left_in_the_chats_it_took(
    leases: tuple[PostgresStore, PgLeases, PgLeases],
) -> None:
    """On the claim's own trip: a reply another worker has not sent yet, a notice no worker sends yet,
    a run a worker had in progress; not the claimer's own rows, nor tool activity (never waited for)."""
    store, first, _ = leases
    chats = await waiting_chats(store, 4)

    def row(kind: str, chat: SessionRow, worker: str | None) -> OutboxItem:
        return OutboxItem(kind, "telegram", "1", "hi", "pending", session_key=chat.key, worker_id=worker)

    await store.add_outbox(row("reply", chats[0], "gone"))
    await store.add_outbox(row("activity", chats[1], "gone"), row("reply", chats[1], "me"))
    await store.add_outbox(row("notice", chats[2], None))
    store.worker_id = "crashed"
    await begin(store, chats[3].id, "r-crashed")
    await store.add_user_message(chats[3].id, "and again")
    claim = functools.partial(claim_sessions, limit=5, skip=(), surfaces=["telegram"], me="me")
    claimed = await first.run(claim)
    assert {c.session.key: c.left for c in claimed} == {
        chats[0].key: {"gone"},
        chats[1].key: set(),
        chats[2].key: {None},
        chats[3].key: {"crashed"},
    }
    # The same look, one chat at a time (a run that waits for a living worker's messages polls it).
    assert [await store.left_in(chat.key, "me", ["telegram"]) for chat in chats] == [
        {"gone"},
        set(),
        {None},
        {"crashed"},
    ]
    assert await store.left_in(chats[0].key, "me", ["discord"]) == set()


async def test_a_claim_holding_chats_rows_does_not_hold_up_a_run_starting_in_one_of_them(
    leases: tuple[PostgresStore, PgLeases, PgLeases],
) -> None:
    """FOR NO KEY UPDATE: a run's insert checks its session row (a key share lock), which FOR UPDATE
    would make wait until the claim commits."""
    store, first, _ = leases
    chats = await waiting_chats(store, 2)
    holding, done = threading.Event(), threading.Event()

    def claim_then_hold(conn: Conn) -> list[Claimed]:
        # In a transaction of its own, which stays open with both chats' rows locked (a claim alone
        # holds them for its one statement).
        conn.execute("BEGIN")
        claimed = claim_sessions(conn, 1, (), ["telegram"])
        holding.set()
        done.wait(10)
        conn.execute("COMMIT")
        return claimed

    claim = asyncio.create_task(first.run(claim_then_hold))
    try:
        assert await asyncio.to_thread(holding.wait, 10)
        # The second chat's row is locked by the claim, which did not lease it; another worker
        # starting a run there goes ahead at once.
        await asyncio.wait_for(begin(store, chats[1].id, "r-elsewhere"), 5)
    finally:
        done.set()
    assert [c.session.key for c in await claim] == [chats[0].key]
