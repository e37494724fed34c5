"""A worker's share of the chats, in process: turns that must wait for a chat another worker holds."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.app import Bridge
from bridge.events import Inbound
from bridge.gateway import sharing
from bridge.store.base import OutboxItem, SessionMeta, SessionRow
from bridge.store.cache import TOLD_MAX_AGE_S
from bridge.store.intake import INTAKE_CHANNEL, claim_sessions, session_lease
from bridge.store.postgres import PostgresStore
from bridge.store.postgres.leases import PgLeases
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import OWNER, RecordingSender, make_settings
from tests.pg import PostgresServer
from tests.store.test_postgres import sql
from tests.waiting import eventually


def message(n: int) -> Inbound:
    """The owner's message number `n` in their DM, "m<n>"."""
    return Inbound(
        surface="test", chat_type="dm", chat_id=OWNER, sender_id=OWNER, text=f"m{n}", message_id=str(n)
    )


@pytest.fixture
async def worker(tmp_path: Path, postgres: PostgresServer) -> AsyncIterator[tuple[Bridge, PgLeases]]:
    """A sharing worker (as `bridge run` starts it on PostgreSQL), and another worker's lease connection."""
    url = postgres.database()
    async with FakeOpenAI() as llm:
        settings = make_settings(tmp_path, llm.base_url, storage={"url": url}, runs={"max_queued": 3})
        bridge = Bridge(settings, standby=asyncio.Event())
        other = PgLeases(url, "test", application_name="bridge-other")
        async with bridge:
            assert bridge.shared and bridge.share is not None
            bridge.add_sender(RecordingSender())
            await bridge.recover()  # starts claiming
            await other.open()
            try:
                yield bridge, other
            finally:
                await other.close()


async def test_a_turn_into_a_chat_another_worker_holds_waits_for_it_then_runs_under_the_lease(
    worker: tuple[Bridge, PgLeases],
) -> None:
    bridge, other = worker
    assert bridge.share is not None
    key = "telegram:dm:7"
    assert await other.lock(session_lease(key))
    ran = asyncio.Event()

    async def job() -> None:
        # Under the lease now: the other worker cannot take the chat meanwhile.
        assert not await other.is_free(session_lease(key))
        ran.set()

    turn = asyncio.create_task(bridge.share.when_leased(key, job))
    # Not while the other holds it (a short wait for something that must not happen).
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(ran.wait()), 0.5)
    await other.unlock(session_lease(key))
    await asyncio.wait_for(turn, 10)
    assert ran.is_set()
    # And let go after it.
    assert await other.is_free(session_lease(key))


async def test_stop_elsewhere_asks_only_when_another_worker_holds_the_chat(
    worker: tuple[Bridge, PgLeases],
) -> None:
    bridge, other = worker
    assert bridge.share is not None
    assert not await bridge.share.stop_elsewhere("telegram:dm:8")  # nobody runs it
    assert await other.lock(session_lease("telegram:dm:8"))
    assert await bridge.share.stop_elsewhere("telegram:dm:8")


async def test_past_max_queued_a_chat_another_worker_is_busy_with_refuses_the_next_message(
    worker: tuple[Bridge, PgLeases],
) -> None:
    bridge, other = worker
    key = bridge.sessions.key_for(message(0))
    # The chat is another worker's (it runs a turn there), so what comes in here waits in intake.
    assert await other.lock(session_lease(key))
    for n in range(4):
        done = await bridge.handle(message(n))
    assert done is not None  # the refusal's notice, sent here
    await asyncio.wait_for(done, 10)
    session = await bridge.store.active_session(key)
    assert session is not None and await bridge.store.count_waiting(session.id) == 3
    sender = bridge.delivery.sender("test")
    assert isinstance(sender, RecordingSender)
    assert len(sender.sent) == 1 and sender.sent[0].text.startswith("⚠️ 3 messages are already waiting")


async def test_a_message_stored_before_the_share_starts_claiming_waits_in_intake_not_in_a_lane(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """Adapters listen before recover() starts the claim loop: what they store meanwhile is queued for
    every worker, never run here without the chat's lease."""
    async with FakeOpenAI() as llm:
        settings = make_settings(tmp_path, llm.base_url, storage={"url": postgres.database()})
        async with Bridge(settings, standby=asyncio.Event()) as bridge:
            bridge.add_sender(RecordingSender())
            inbound = Inbound(
                surface="test", chat_type="dm", chat_id=OWNER, sender_id=OWNER, text="hi", message_id="1"
            )
            assert await bridge.handle(inbound) is None
            assert not bridge.lanes.busy(bridge.sessions.key_for(inbound))
            session = await bridge.store.active_session(bridge.sessions.key_for(inbound))
            assert session is not None and await bridge.store.count_waiting(session.id) == 1


async def drained(bridge: Bridge) -> None:
    """Every outbox row sent: a row is marked sent once the platform call returned, a moment after
    the recording sender saw it, so this waits (bounded) rather than looks once."""

    async def empty() -> None:
        # Polled with a deadline: the database has no event for a test to wait on.
        while await bridge.store.outbox(state=("pending", "sending")):  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    await asyncio.wait_for(empty(), 10)


async def test_a_dead_workers_unsent_reply_and_cut_short_run_are_taken_over_and_the_chat_told(
    worker: tuple[Bridge, PgLeases],
) -> None:
    bridge, _ = worker
    sender = bridge.delivery.sender("test")
    assert isinstance(sender, RecordingSender)
    # What a worker killed mid-turn leaves: a run still `running`, and a reply written but not sent.
    inbound = Inbound(
        surface="test", chat_type="dm", chat_id=OWNER, sender_id=OWNER, text="hi", message_id="1"
    )
    key = bridge.sessions.key_for(inbound)
    session = await bridge.sessions.active(inbound)
    bridge.store.worker_id = "killed"
    # Not queued: this worker must not claim it between the two writes (a killed worker's message
    # was taken up by its run in one transaction), or its answer could go out before the old reply.
    await bridge.store.add_user_message(session.id, "question", queued=False)
    await bridge.store.begin_run(
        "r-killed", session.id, "test", memory_scope="", history_limit=10, memory_limit=0
    )
    bridge.store.worker_id = bridge.presence.id
    await bridge.store.add_outbox(
        OutboxItem(
            "reply", "test", OWNER, "an earlier answer", "pending", session_key=key, worker_id="killed"
        )
    )

    async def told() -> None:
        while not any("interrupted" in item.text for item in sender.sent):  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    # The sweep runs every second: polled with a deadline, the database has no event for a test.
    await asyncio.wait_for(told(), 10)
    assert sender.sent[0].text == "an earlier answer"
    run = await bridge.store.get_run("r-killed")
    assert run is not None and run.status == "aborted"
    await drained(bridge)


async def test_send_off_in_another_worker_reaches_this_workers_copy_of_the_chat_at_once(
    worker: tuple[Bridge, PgLeases],
) -> None:
    bridge, _ = worker
    # Trusted for a minute here, so only the other worker's notice can make this one read it again.
    bridge.store._active.max_age_s = 60
    session = await bridge.store.ensure_active_session("test:dm:9")
    assert (await bridge.store.active_session("test:dm:9")) == session
    other = PostgresStore(bridge.settings.storage.url or "", pool_size=1)
    await other.open()
    try:
        await other.set_send_policy(session.id, "deny")  # /send off, handled by the other worker
    finally:
        await other.close()

    await row_becomes(bridge, "test:dm:9", lambda row: row.send_policy == "deny")


class FrozenClock:
    """The time a session copy's age is counted in, standing still: only a notice drops a copy."""

    def __call__(self) -> float:
        return 0.0


async def row_becomes(bridge: Bridge, key: str, wanted: Callable[[SessionRow], bool]) -> None:
    """Wait until the worker's copy of the chat's row is as `wanted`."""

    async def changed() -> None:
        # Polled with a deadline: the worker's copy has no event for a test to wait on.
        while (row := await bridge.store.active_session(key)) is None or not wanted(row):  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    await asyncio.wait_for(changed(), 10)


async def test_a_listening_worker_keeps_its_copy_of_a_chat_until_another_worker_moves_the_chat(
    worker: tuple[Bridge, PgLeases],
) -> None:
    bridge, _ = worker
    cache = bridge.store._active
    await eventually(lambda: cache.max_age_s == TOLD_MAX_AGE_S, "the worker listens")
    cache._clock = FrozenClock()
    await bridge.store.ensure_active_session("test:dm:9", SessionMeta(last_route="here"))
    other = PostgresStore(bridge.settings.storage.url or "", pool_size=1)
    await other.open()
    try:
        # A message in another thread of the chat, handled by the other worker: replies go there now.
        await other.ensure_active_session("test:dm:9", SessionMeta(last_route="there"))
    finally:
        await other.close()
    await row_becomes(bridge, "test:dm:9", lambda row: row.last_route == "there")


async def test_a_change_made_while_a_worker_was_not_listening_is_read_once_it_listens_again(
    worker: tuple[Bridge, PgLeases], monkeypatch: pytest.MonkeyPatch
) -> None:
    bridge, _ = worker
    url = bridge.settings.storage.url or ""
    cache = bridge.store._active
    await eventually(lambda: cache.max_age_s == TOLD_MAX_AGE_S, "the worker listens")
    cache._clock = FrozenClock()
    await bridge.store.ensure_active_session("test:dm:9", SessionMeta(last_route="here"))
    other = PostgresStore(url, pool_size=1)
    await other.open()
    # The listener's connection is cut (a restarted server, a network cut), and its new one waits.
    back = threading.Event()
    connect = psycopg.connect

    def held(*args: Any, **kwargs: Any) -> Any:
        back.wait(10)
        return connect(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", held)
    try:
        await asyncio.to_thread(
            sql,
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE '%-listen'",
        )
        await eventually(lambda: cache.max_age_s < TOLD_MAX_AGE_S, "the worker knows it is not listening")
        await other.ensure_active_session("test:dm:9", SessionMeta(last_route="there"))  # told to no one
        back.set()
        await row_becomes(bridge, "test:dm:9", lambda row: row.last_route == "there")
    finally:
        back.set()
        await other.close()


@contextlib.asynccontextmanager
async def answering_worker(
    tmp_path: Path, postgres: PostgresServer, queue_mode: str = "collect", *, url: str | None = None
) -> AsyncIterator[tuple[Bridge, RecordingSender, sharing.WorkShare]]:
    """A sharing worker that answers each message "answer to: <it>", claiming; on a fresh database,
    or on `url`'s (another worker's)."""
    async with FakeOpenAI(answer_to) as llm:
        storage = {"url": url or postgres.database()}
        settings = make_settings(tmp_path, llm.base_url, storage=storage, runs={"queue_mode": queue_mode})
        async with Bridge(settings, standby=asyncio.Event()) as bridge:
            sender = RecordingSender()
            bridge.add_sender(sender)
            assert bridge.share is not None
            await bridge.recover()  # starts claiming
            yield bridge, sender, bridge.share


def answer_to(request: dict[str, Any]) -> Reply:
    asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
    return fake.text(f"answer to: {asked}")


async def test_a_dead_workers_reply_goes_out_before_the_answer_to_the_next_message_in_its_chat(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30, break 12: a worker killed after it wrote its reply to m9, and m10 comes in. The
    sweep takes the reply over within a second, in no set order with m10's run: it is off here, so
    only the run's own look at its chat can send the reply first."""
    monkeypatch.setattr(sharing, "SWEEP_EVERY_S", 3600.0)
    async with FakeOpenAI(answer_to) as llm:
        settings = make_settings(tmp_path, llm.base_url, storage={"url": postgres.database()})
        async with Bridge(settings, standby=asyncio.Event()) as bridge:
            sender = RecordingSender()
            bridge.add_sender(sender)
            await bridge.recover()  # starts claiming

            key = bridge.sessions.key_for(message(9))
            await bridge.sessions.active(message(9))
            # The reply the killed worker committed with its answer to m9, never sent.
            await bridge.store.add_outbox(
                OutboxItem(
                    "reply", "test", OWNER, "answer to: m9", "pending", session_key=key, worker_id="killed"
                )
            )
            await bridge.handle(message(10))

            async def answered() -> None:
                while "answer to: m10" not in sender.of("reply"):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)

            # Polled with a deadline: the recording sender has no event to wait on.
            await asyncio.wait_for(answered(), 20)
            assert sender.of("reply") == ["answer to: m9", "answer to: m10"]
            await drained(bridge)


async def test_a_worker_claims_only_the_chat_a_message_came_in_and_nothing_after_its_turn(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: a notification names its chat, so a claim tries that chat alone (not the whole
    queue), and a turn that ends with nothing waiting is followed by no claim at all; the look over
    the whole queue is held off here so that only these can claim."""
    claims: list[frozenset[str] | None] = []

    def recorded(conn: Any, limit: int, skip: Any, surfaces: Any, named: Any = None, **rest: Any) -> Any:
        claims.append(None if named is None else frozenset(named))
        return claim_sessions(conn, limit, skip, surfaces, named, **rest)

    monkeypatch.setattr(sharing, "claim_sessions", recorded)
    async with answering_worker(tmp_path, postgres) as (bridge, sender, share):
        # Its first look over the whole queue, then none for an hour.
        await eventually(lambda: None in claims, "the first look over the queue")
        monkeypatch.setattr(sharing, "PULL_EVERY_S", 3600.0)
        claims.clear()
        ids: list[str] = []

        def replied(text: str) -> bool:
            return text in sender.of("reply")

        for n, user in enumerate(("41", "42"), start=1):
            inbound = Inbound(
                surface="test",
                chat_type="dm",
                chat_id=user,
                sender_id=OWNER,
                text=f"m{n}",
                message_id=str(n),
            )
            ids.append((await bridge.sessions.active(inbound)).id)
            await bridge.handle(inbound)
            await eventually(functools.partial(replied, f"answer to: m{n}"), f"the answer to m{n}")
            await eventually(lambda: not share.serving(), "the chat let go")
        # One claim per message, of its chat alone: none after either turn, none of the queue.
        assert claims == [frozenset({ids[0]}), frozenset({ids[1]})]
        await drained(bridge)


async def test_a_message_that_comes_after_a_runs_last_look_at_its_queue_is_answered_once_the_chat_is_let_go(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instant between a run's end (its last look at the chat's queue, if it made one: nothing
    waiting) and the lease let go: a message stored then is named while this worker still holds the
    chat, so no worker can claim it then. This worker claims it again once it lets go; the look over
    the whole queue is held off here, so nothing else would answer it."""
    async with answering_worker(tmp_path, postgres) as (bridge, sender, share):
        monkeypatch.setattr(sharing, "PULL_EVERY_S", 3600.0)
        inbound = Inbound(
            surface="test", chat_type="dm", chat_id=OWNER, sender_id=OWNER, text="m1", message_id="1"
        )
        session = await bridge.sessions.active(inbound)
        other = PostgresStore(bridge.settings.storage.url or "", pool_size=1)
        await other.open()
        real_unlock = share.leases.unlock
        slipped_in: list[int | None] = []

        async def a_message_comes_then_let_go(name: str) -> None:
            if name == session_lease(session.key) and not slipped_in:
                # Another worker stores the next message just before the chat is let go.
                slipped_in.append(await other.add_user_message(session.id, "m2"))
                await eventually(lambda: session.id in share._named_while_serving, "the notification")
            await real_unlock(name)

        monkeypatch.setattr(share.leases, "unlock", a_message_comes_then_let_go)
        try:
            await bridge.handle(inbound)
            await eventually(lambda: "answer to: m2" in sender.of("reply"), "the answer to m2")
        finally:
            await other.close()
        assert sender.of("reply") == ["answer to: m1", "answer to: m2"]
        assert slipped_in and await bridge.store.next_waiting(session.id) is None
        await drained(bridge)


@pytest.mark.parametrize("queue_mode", ["collect", "followup"])
async def test_a_turn_looks_at_its_chats_queue_again_only_when_a_message_came_in_while_it_ran(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch, queue_mode: str
) -> None:
    """Issue 34: a run takes up every message that came by its start, so its chat's queue is looked at
    again only for a later one, named by its notification (one read a turn fewer); that one is
    answered while the chat is still held. A message's notification is held here until its chat is
    claimed, and the run waits for it, as when the database's notice comes after this worker's own
    claim."""
    notices: list[str] = []
    shares: list[sharing.WorkShare] = []
    real_notified = PgLeases.notified

    async def once_claimed(leases: PgLeases) -> list[tuple[str, str]]:
        found = await real_notified(leases)
        mine = [payload for channel, payload in found if channel == INTAKE_CHANNEL]
        if mine and shares:
            await eventually(lambda: shares[0]._serving_ids, "the chat claimed")
        notices.extend(mine)
        return found

    monkeypatch.setattr(PgLeases, "notified", once_claimed)
    async with answering_worker(tmp_path, postgres, queue_mode) as (bridge, sender, share):
        monkeypatch.setattr(sharing, "PULL_EVERY_S", 3600.0)
        shares.append(share)
        session = await bridge.sessions.active(message(1))
        looks: list[str] = []
        real_next_waiting = bridge.store.next_waiting

        async def counted(session_id: str) -> tuple[int, str | None] | None:
            looks.append(session_id)
            return await real_next_waiting(session_id)

        monkeypatch.setattr(bridge.store, "next_waiting", counted)
        other = PostgresStore(bridge.settings.storage.url or "", pool_size=1)
        await other.open()
        real_run_turn = bridge.dispatcher.run_turn
        runs: list[int] = []

        async def after_the_notices(*args: Any, **kwargs: Any) -> bool:
            runs.append(len(runs) + 1)
            # Run n starts once n notices are in: m1's for the first, m1's and m2's for the second.
            await eventually(lambda: len(notices) >= len(runs), "the notices of the messages before it")
            took_up = await real_run_turn(*args, **kwargs)
            if len(runs) == 2:
                # Another worker stores m3 once m2's run took m2 up, before this worker lets go.
                await other.add_user_message(session.id, "m3", platform_msg_id="test:3")
                await eventually(lambda: session.id in share._named_while_serving, "m3's notice")
            return took_up

        monkeypatch.setattr(bridge.dispatcher, "run_turn", after_the_notices)
        try:
            await bridge.handle(message(1))
            await eventually(lambda: "answer to: m1" in sender.of("reply") and not share.serving(), "m1")
            assert looks == []
            await bridge.handle(message(2))
            await eventually(lambda: "answer to: m3" in sender.of("reply") and not share.serving(), "m3")
        finally:
            await other.close()
        assert sender.of("reply") == ["answer to: m1", "answer to: m2", "answer to: m3"]
        # After m2's run, for m3. In followup mode after m3's too: a look finds the oldest message
        # waiting, not how many, so each run after one is followed by another.
        assert looks == [session.id] * (1 if queue_mode == "collect" else 2)
        # Each names its chat and its message.
        assert [notice.partition(" ")[0] for notice in notices] == [session.id] * 3
        assert all(notice.partition(" ")[2].isdigit() for notice in notices)
        await drained(bridge)


async def test_a_message_named_while_its_chat_is_being_claimed_is_answered_before_the_chat_is_let_go(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Followup mode, where a run takes up only the message it was claimed for: m2 is stored after the
    claim read the queue (it saw m1 alone) and named while the claim is still in flight. It is
    looked for before the chat is let go; the look over the whole queue is held off here, so nothing
    else would answer it."""
    async with answering_worker(tmp_path, postgres, "followup") as (bridge, sender, share):
        monkeypatch.setattr(sharing, "PULL_EVERY_S", 3600.0)
        session = await bridge.sessions.active(message(1))
        other = PostgresStore(bridge.settings.storage.url or "", pool_size=1)
        await other.open()
        loop = asyncio.get_running_loop()
        real_name = share._name
        named = threading.Condition()
        names: list[int | None] = []
        second: list[int | None] = []

        def noted(session_id: str, message_id: int | None = None) -> None:
            real_name(session_id, message_id)
            with named:
                names.append(message_id)
                named.notify_all()

        def claim_then_m2(conn: Any, *args: Any, **kwargs: Any) -> Any:
            claimed = claim_sessions(conn, *args, **kwargs)
            if claimed and not second:
                store = other.add_user_message(session.id, "m2", platform_msg_id="test:2")
                second.append(asyncio.run_coroutine_threadsafe(store, loop).result(10))
                with named:
                    assert named.wait_for(lambda: second[0] in names, 10), "m2's notice"
            return claimed

        monkeypatch.setattr(share, "_name", noted)
        monkeypatch.setattr(sharing, "claim_sessions", claim_then_m2)
        try:
            await bridge.handle(message(1))
            await eventually(lambda: "answer to: m2" in sender.of("reply"), "the answer to m2")
        finally:
            await other.close()
        assert sender.of("reply") == ["answer to: m1", "answer to: m2"]
        await drained(bridge)
