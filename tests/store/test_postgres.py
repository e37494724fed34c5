"""The PostgreSQL store's own behaviour: schema versions, two workers on one database, its errors."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from bridge.errors import StoreError
from bridge.store.base import OutboxItem, ToolExchange
from bridge.store.batch import Job
from bridge.store.claims import CLAIM_CHECK_S, TAKEOVER_GRACE_S, WORKER_CLAIM
from bridge.store.messages import LOADS_SQL, dumps
from bridge.store.postgres import PostgresStore
from bridge.store.postgres import engine as postgres_module
from bridge.store.postgres.dialect import translate
from bridge.store.postgres.migrations import PG_MIGRATIONS
from bridge.store.sqlite.migrations import MIGRATIONS
from tests.pg import PostgresServer, free_port, postgres_server
from tests.stores import summarise
from tests.waiting import stall

T = TypeVar("T")


@pytest.fixture
def url(postgres: PostgresServer) -> str:
    return postgres.database()


@pytest.fixture
async def two(url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, as two workers have."""
    first, second = PostgresStore(url, pool_size=4), PostgresStore(url, pool_size=4)
    await asyncio.gather(first.open(), second.open())
    try:
        yield first, second
    finally:
        await asyncio.gather(first.close(), second.close())


def load(call_id: str, group: str) -> ToolExchange:
    """A successful load_tool_group call, as the runner records it."""
    return ToolExchange(call_id, "load_tool_group", dumps({"group_name": group}), "ok", "success", 0)


def sql(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query.encode(), params or None)
        return cursor.fetchall() if cursor.description else []


def test_both_backends_have_the_same_schema_versions() -> None:
    assert len(PG_MIGRATIONS) == len(MIGRATIONS)


async def test_workers_starting_together_migrate_the_schema_once(
    two: tuple[PostgresStore, PostgresStore], url: str
) -> None:
    assert sql(url, "SELECT version FROM bridge_schema") == [(len(PG_MIGRATIONS),)]


async def test_a_database_newer_than_this_bridge_is_refused_naming_both_versions(url: str) -> None:
    store = PostgresStore(url)
    await store.open()
    await store.close()
    sql(url, "UPDATE bridge_schema SET version = 99")
    with pytest.raises(StoreError) as info:
        await PostgresStore(url).open()
    assert "schema version 99" in str(info.value)
    assert f"({len(PG_MIGRATIONS)})" in str(info.value)


async def test_a_server_that_does_not_answer_is_a_store_error_without_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postgres_module, "OPEN_TIMEOUT_S", 1.0)
    store = PostgresStore(f"postgresql://bot:hunter2-secret@127.0.0.1:{free_port()}/bridge")
    with pytest.raises(StoreError) as info:
        await store.open()
    text = info.value.for_log()
    assert "cannot connect to database postgresql://" in text
    assert "127.0.0.1" in text
    assert "hunter2-secret" not in text
    assert "[storage] url" in text  # the remedy names the key to check


async def test_backup_points_to_pg_dump(url: str, tmp_path: Any) -> None:
    store = PostgresStore(url)
    await store.open()
    try:
        with pytest.raises(StoreError) as info:
            await store.backup(tmp_path / "copy.db")
    finally:
        await store.close()
    assert "pg_dump" in info.value.for_log()
    assert not (tmp_path / "copy.db").exists()


async def test_two_workers_asking_for_a_new_chat_at_once_share_one_session(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = two
    for n in range(20):
        a, b = await asyncio.gather(
            first.ensure_active_session(f"telegram:dm:{n}"), second.ensure_active_session(f"telegram:dm:{n}")
        )
        assert a.id == b.id


async def test_a_message_both_workers_received_is_stored_once(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = two
    session = await first.ensure_active_session("telegram:dm:1")
    for n in range(20):
        ids = await asyncio.gather(
            first.add_user_message(session.id, "hi", platform_msg_id=f"tg:1:{n}"),
            second.add_user_message(session.id, "hi", platform_msg_id=f"tg:1:{n}"),
        )
        assert sorted(ids, key=lambda i: i is None)[1] is None, ids  # one stored it, the other saw it
        assert [i for i in ids if i is not None]
    assert await first.count_messages(session.id) == 20


async def test_concurrent_writes_that_collide_are_retried_not_lost(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = two
    session = await first.ensure_active_session("discord:channel:1")
    await first.start_run("r1", session.id, None, "h")
    writes = [
        store.add_tool_exchange(
            session.id,
            "r1",
            ToolExchange(f"c{n}", "load_tool_group", dumps({"group_name": f"g{n}"}), "ok", "success", 0),
        )
        for n in range(40)
        for store in [(first, second)[n % 2]]
    ]
    await asyncio.gather(*writes)
    assert await second.count_messages(session.id) == 80
    assert await second.loaded_groups(session.id) == {f"g{n}" for n in range(40)}


async def test_loaded_groups_and_skills_are_one_query_on_the_loads_index(url: str) -> None:
    store = PostgresStore(url)
    await store.open()
    try:
        session = await store.ensure_active_session("main")
        await store.start_run("r1", session.id, None, "h")
        await store.add_tool_exchange(
            session.id,
            "r1",
            ToolExchange("c1", "load_tool_group", dumps({"group_name": "web"}), "ok", "success", 0),
        )
        await store.add_tool_exchange(
            session.id, "r1", ToolExchange("c2", "load_skill", dumps({"name": "pdf"}), "ok", "success", 0)
        )
        loaded = await store.loaded(session.id)
    finally:
        await store.close()
    assert (loaded.groups, loaded.skills) == ({"web"}, {"pdf"})
    with psycopg.connect(url, autocommit=True) as conn:
        # A tiny table is scanned whatever its indexes; the planner is asked to use one if it can.
        conn.execute(b"SET enable_seqscan = off")
        explain = translate("EXPLAIN " + LOADS_SQL)
        plan = "\n".join(row[0] for row in conn.execute(explain, ("x",)))
    assert "messages_loads" in plan, plan
    assert "Seq Scan" not in plan, plan


async def test_a_restarted_server_is_reconnected_to_without_an_error() -> None:
    with postgres_server() as server:  # a server of its own: the others' connections stay up
        store = PostgresStore(server.database(), pool_size=3)
        await store.open()
        try:
            session = await store.ensure_active_session("main")
            # Every pooled connection in use once, so each is dead after the restart.
            await asyncio.gather(*(store.add_user_message(session.id, f"before {n}") for n in range(6)))
            await asyncio.to_thread(server.restart)
            # Nothing was sent on the dead connections: the pool's new ones take the work.
            assert await store.add_user_message(session.id, "after") is not None
            assert await store.count_messages(session.id) == 7
        finally:
            await store.close()


async def test_a_hundred_chats_taking_turns_at_once_all_succeed(url: str) -> None:
    store = PostgresStore(url, pool_size=10)
    await store.open()

    async def turn(n: int) -> None:
        session = await store.ensure_active_session(f"telegram:dm:{n}")
        for step in range(3):
            await store.add_user_message(session.id, f"m{step}", platform_msg_id=f"tg:{n}:{step}")
            started = await store.begin_run(
                f"r{n}-{step}", session.id, None, memory_scope=session.key, history_limit=50, memory_limit=5
            )
            assert started.answers is not None
            await store.add_tool_exchange(session.id, f"r{n}-{step}", load(f"c{n}-{step}", "web"))
            outbox = [OutboxItem("reply", "telegram", str(n), "ok", "pending", session_id=session.id)]
            await store.finish_run(f"r{n}-{step}", "ok", reply=(session.id, "ok"), outbox=outbox)

    try:
        await asyncio.gather(*(turn(n) for n in range(100)))
        assert await store._scalar("SELECT COUNT(*) FROM runs WHERE status = 'ok'") == 300
        assert await store._scalar("SELECT COUNT(*) FROM messages") == 1200
    finally:
        await store.close()


async def end_claims(url: str) -> None:
    """The server ends the connections that hold advisory locks, as a restart or a network cut would."""
    await asyncio.to_thread(
        sql,
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND pid != pg_backend_pid()",
    )


@contextlib.asynccontextmanager
async def watched(store: PostgresStore) -> AsyncIterator[asyncio.Event]:
    """`store` holding the worker claim and watching it, as an active worker does; the event is
    set when it is told the claim is lost."""
    assert await store.claim_worker()
    lost = asyncio.Event()
    watching = asyncio.create_task(store.watch_claim(lost.set))
    try:
        yield lost
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


async def test_a_worker_whose_claim_was_taken_meanwhile_is_told_to_stop(
    two: tuple[PostgresStore, PostgresStore], url: str
) -> None:
    active, standby = two
    async with watched(active) as lost:
        await end_claims(url)
        assert await standby.engine.claim(WORKER_CLAIM)  # before the active one checks again
        # Told within CLAIM_LOST_AFTER_S and a check or two: well before a standby's grace is over.
        async with asyncio.timeout(TAKEOVER_GRACE_S):
            await lost.wait()


async def test_a_worker_whose_claim_connection_died_takes_the_claim_back(
    two: tuple[PostgresStore, PostgresStore], url: str
) -> None:
    active, standby = two
    async with watched(active) as lost:
        await end_claims(url)
        async with asyncio.timeout(10):
            while not await active.engine.holds(WORKER_CLAIM):  # noqa: ASYNC110
                await asyncio.sleep(CLAIM_CHECK_S)
        assert not lost.is_set()
        assert not await standby.engine.claim(WORKER_CLAIM)


async def test_a_worker_that_did_not_run_and_whose_claim_connection_was_ended_stops_without_a_round_trip(
    two: tuple[PostgresStore, PostgresStore], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    active, standby = two
    async with watched(active) as lost:
        await asyncio.sleep(CLAIM_CHECK_S * 2)  # the watch has confirmed the claim once
        await end_claims(url)
        assert await standby.engine.claim(WORKER_CLAIM)
        asked: list[str] = []

        async def holds(name: str) -> bool:
            asked.append(name)
            return False

        # What the watch would ask next: a round trip, during which the other tasks (a poller) run on.
        monkeypatch.setattr(active.engine, "holds", holds)
        stall(TAKEOVER_GRACE_S + CLAIM_CHECK_S)
        async with asyncio.timeout(1):
            await lost.wait()
        assert asked == []


async def test_a_worker_that_did_not_run_but_still_holds_its_claim_goes_on(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    active, standby = two
    async with watched(active) as lost:
        await asyncio.sleep(CLAIM_CHECK_S * 2)
        stall(TAKEOVER_GRACE_S + CLAIM_CHECK_S)
        await asyncio.sleep(CLAIM_CHECK_S * 4)
        assert not lost.is_set()
        assert await active.engine.holds(WORKER_CLAIM)
        assert not await standby.engine.claim(WORKER_CLAIM)


async def test_writes_queued_together_commit_in_one_transaction_and_one_failing_fails_alone(url: str) -> None:
    """Issue 34: a loop pass's writes share a transaction, as on SQLite; one whose work raises is
    rolled back with its batch, whose writes are run again alone, so only its caller sees the error."""
    store = PostgresStore(url, pool_size=4)
    await store.open()
    try:
        await store.engine.write(lambda conn: conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY)"))

        def insert(n: int) -> Any:
            def work(conn: Any) -> Any:
                conn.execute("INSERT INTO t (n) VALUES (?)", (n,))
                if n == 33:
                    raise ValueError("thirty-three")
                return conn.execute("SELECT txid_current()").fetchone()[0]

            return work

        txids = await asyncio.gather(*(store.engine.write(insert(n)) for n in range(20)))
        # Fewer transactions than writes: they were queued together.
        assert len(set(txids)) < 20
        outcomes = await asyncio.gather(
            *(store.engine.write(insert(n)) for n in range(20, 40)), return_exceptions=True
        )
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        assert [str(o) for o in failed] == ["thirty-three"] and isinstance(failed[0], ValueError)
        rows = await store._rows("SELECT n FROM t ORDER BY n")
        assert [row[0] for row in rows] == [n for n in range(40) if n != 33]
    finally:
        await store.close()


async def round_trips(store: PostgresStore, trace: Path, action: Awaitable[T]) -> tuple[T, int]:
    """What `action` returned, and how many round trips it took on the pool's one connection (a store
    opened with pool_size=1), counted in libpq's protocol trace: each time the server answers what
    the client sent, after the client sent something."""
    engine = store.engine
    assert isinstance(engine, postgres_module.PostgresEngine) and engine._pool is not None
    pool = engine._pool
    # libpq writes to the file's descriptor, so it stays open until the trace ends.
    with trace.open("w") as out:
        with pool.connection() as conn:
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            result = await action
        finally:
            with pool.connection() as conn:
                conn.pgconn.untrace()
    return result, counted(trace)


def counted(trace: Path) -> int:
    sides = [line.split("\t")[0] for line in trace.read_text().splitlines()]  # F: client, B: server
    return sum(1 for sent, answer in itertools.pairwise(sides) if (sent, answer) == ("F", "B"))


async def test_a_runs_context_is_read_in_one_round_trip_then_its_commit(url: str, tmp_path: Path) -> None:
    """Issue 34: the reads a run starts from (summary, history after it, loads, memories, how far the
    session goes and was answered) are sent together in pipeline mode, and read what they did one by
    one."""
    store = PostgresStore(url, pool_size=1)
    await store.open()
    try:
        session = await store.ensure_active_session("main")
        first = await store.add_user_message(session.id, "first question")
        await store.start_run("r1", session.id, None, "h", first)
        await store.add_tool_exchange(session.id, "r1", load("c1", "web"))
        await store.finish_run("r1", "ok", reply=(session.id, "first answer"))
        second = await store.add_user_message(session.id, "second question")
        assert first is not None and second is not None
        await summarise(store, session.id, first, "they asked a first question")
        await store.add_memory("main", "likes tea")
        context, trips = await round_trips(
            store, tmp_path / "libpq.trace", store.run_context(session.id, "main", 60, 20)
        )
    finally:
        await store.close()
    assert [row.content for row in context.rows] == ["second question"]
    assert context.summary is not None and context.summary.content == "they asked a first question"
    assert (context.loaded_groups, context.memories, context.answered_upto) == ({"web"}, ["likes tea"], first)
    assert trips == 2, (tmp_path / "libpq.trace").read_text()


async def test_a_write_transaction_takes_a_round_trip_per_result_it_reads_and_one_for_commit(
    url: str, tmp_path: Path
) -> None:
    """Issue 34: the writer's transactions run in pipeline mode. BEGIN goes out with the first
    statement, the statements after the last result a write reads go out with COMMIT: a delivery mark
    (an UPDATE that reads nothing back) is one round trip where it was three, a run's claim (one read,
    then its writes) two where it was six."""
    store = PostgresStore(url, pool_size=1)
    await store.open()
    try:
        session = await store.ensure_active_session("main")
        asked = await store.add_user_message(session.id, "a question")
        (item,) = await store.add_outbox(OutboxItem("reply", "telegram", "1", "hi", "pending"))
        _, marking = await round_trips(store, tmp_path / "mark.trace", store.mark_outbox(item, "sent"))
        started, claiming = await round_trips(
            store,
            tmp_path / "claim.trace",
            store.begin_run("r1", session.id, None, memory_scope="main", history_limit=60, memory_limit=0),
        )
        (state,) = await store._rows("SELECT state FROM outbox WHERE id = ?", (item,))
    finally:
        await store.close()
    assert marking == 1, (tmp_path / "mark.trace").read_text()
    # The claim's two, then the context's read (see the test above): two more.
    assert claiming == 4, (tmp_path / "claim.trace").read_text()
    assert state == ("sent",) and started.answers is not None and started.answers.id == asked


async def test_a_snapshot_read_that_fails_raises_its_error_and_leaves_the_connection_usable(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Snapshot reads run in pipeline mode, where a failed statement aborts what was sent after it:
    the caller gets the statement's own error, the transaction is rolled back, nothing is logged, and
    the pool's one connection serves the next read."""
    store = PostgresStore(url, pool_size=1)
    await store.open()
    try:
        with pytest.raises(psycopg.errors.UndefinedTable):
            await store.engine.read(
                lambda conn: [conn.execute("SELECT 1 FROM nowhere"), conn.execute("SELECT 2").fetchall()],
                snapshot=True,
            )
        with pytest.raises(ZeroDivisionError):
            await store.engine.read(lambda conn: (conn.execute("SELECT 3"), 1 / 0), snapshot=True)
        again = await store.engine.read(lambda conn: conn.execute("SELECT 4").fetchall(), snapshot=True)
        status = await store.engine.read(lambda conn: conn.execute("SELECT 5").fetchall())
    finally:
        await store.close()
    assert (again, status) == ([(4,)], [(5,)])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def as_one_batch(url: str, *works: Callable[[Any], Any]) -> tuple[list[Any], list[int]]:
    """`works` as one batch of the writer's (a transaction in pipeline mode, run again alone where it
    fails): each one's value or error, and the rows of table `t` after."""
    store = PostgresStore(url, pool_size=2)
    await store.open()
    try:
        await store.engine.write(lambda conn: conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY)"))
        engine = store.engine
        assert isinstance(engine, postgres_module.PostgresEngine) and engine._writer is not None
        loop = asyncio.get_running_loop()
        batch = [Job(work, "write", loop.create_future(), loop) for work in works]
        # On the writer's own path, but called here, so the jobs are certain to share a batch.
        outcomes = await asyncio.to_thread(engine._writer._commit, batch)
        rows = await store._rows("SELECT n FROM t ORDER BY n")
    finally:
        await store.close()
    return [o.error if o.error is not None else o.value for o in outcomes], [row[0] for row in rows]


def insert(n: int, *, read: bool = False) -> Callable[[Any], Any]:
    def work(conn: Any) -> Any:
        cursor = conn.execute("INSERT INTO t (n) VALUES (?) RETURNING n", (n,))
        return cursor.fetchone()[0] if read else n

    return work


def hang_up(*, read: bool) -> Callable[[Any], Any]:
    """A write whose connection the server ends; `read`: it reads the statement's result (so the
    failure surfaces before COMMIT is sent)."""

    def work(conn: Any) -> Any:
        # After a pause on the server, by which the client has sent what the batch holds (COMMIT
        # too, where nothing before it is read): ended at once, the connection could fail while the
        # batch was still being sent, before COMMIT, and be run again alone (rarely, under load).
        cursor = conn.execute("SELECT pg_terminate_backend(pg_backend_pid()) FROM pg_sleep(0.2)")
        return cursor.fetchall() if read else None

    return work


async def test_a_failed_statement_fails_only_its_own_write_though_another_write_read_its_error(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """In pipeline mode a failed statement's error surfaces where the next result is read: here in
    the third write. The batch is rolled back and run again alone, so the duplicate's caller gets its
    own error, the others their values, and nothing is logged."""
    values, rows = await as_one_batch(url, insert(1), insert(1), insert(3, read=True), insert(4))
    assert values[0] == 1 and isinstance(values[1], psycopg.errors.UniqueViolation)
    assert values[2:] == [3, 4] and rows == [1, 3, 4]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_a_connection_lost_before_commit_was_sent_runs_the_writes_again_alone(url: str) -> None:
    values, rows = await as_one_batch(url, insert(1), hang_up(read=True), insert(3))
    assert values[0] == 1 and values[2] == 3 and rows == [1, 3]
    assert isinstance(values[1], StoreError)


async def test_a_connection_lost_once_commit_was_sent_fails_every_write_and_runs_none_again(url: str) -> None:
    """COMMIT went out with the statements before it; the server ended the connection before it
    answered. It may have committed (here it did not): no write is run again, each caller is told."""
    values, rows = await as_one_batch(url, insert(1), hang_up(read=False), insert(3))
    assert all(isinstance(value, StoreError) for value in values), values
    assert rows == []
