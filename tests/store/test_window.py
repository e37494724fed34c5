"""A kept history window, topped up each turn, is always the window a whole read gives."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bridge.store import runs as runs_module
from bridge.store.base import ToolExchange
from bridge.store.messages import dumps
from bridge.store.postgres import PostgresStore
from bridge.store.runs import _read_context
from bridge.store.tables import DatabaseStore
from tests.pg import PostgresServer
from tests.stores import summarise

LIMIT = 40


def exchange(n: int, rng: random.Random) -> ToolExchange:
    status = rng.choice(["success", "success", "error"])
    if rng.random() < 0.3:
        group = rng.choice(["mail", "drive", "calendar"])
        return ToolExchange(f"c{n}", "load_tool_group", dumps({"group_name": group}), "ok", status, 0)
    if rng.random() < 0.2:
        skill = rng.choice(["pdf-forms", "writing"])
        return ToolExchange(f"c{n}", "load_skill", dumps({"name": skill}), "ok", status, 0)
    return ToolExchange(f"c{n}", "get_current_time", "{}", "12:00", "success", 0)


async def whole_read(store: DatabaseStore, session_id: str) -> tuple[object, ...]:
    order = store._order
    context, _ = await store._read(
        lambda conn: _read_context(conn, order, session_id, "", LIMIT, 0), snapshot=True
    )
    return (
        context.rows,
        context.loaded_groups,
        context.loaded_skills,
        context.answered_upto,
        context.summary,
    )


@pytest.mark.parametrize("seed", range(8))
async def test_a_kept_window_equals_a_whole_read_after_every_turn_summary_and_interleaving(
    store: DatabaseStore, seed: int
) -> None:
    """On both backends: SQLite tops up by id, PostgreSQL by its sessions' message sequence."""
    rng = random.Random(seed)
    session = await store.ensure_active_session("telegram:dm:1")
    runs = 0
    asked: list[int] = []
    for step in range(120):
        action = rng.random()
        if action < 0.35:
            asked.append(await store.add_user_message(session.id, f"message {step}") or 0)
        elif action < 0.85:
            # A run answers the newest message, or (followup mode) an older one while newer ones
            # already wait: its rows then come after messages of later turns.
            runs += 1
            waiting = await store.next_waiting(session.id)
            followup = waiting is not None and rng.random() < 0.3
            started = await store.begin_run(
                f"r{runs}",
                session.id,
                "telegram",
                memory_scope="",
                history_limit=LIMIT,
                memory_limit=0,
                upto=waiting[0] if followup and waiting else None,
            )
            if started.answers is None:
                continue
            for n in range(rng.randrange(3)):
                await store.add_tool_exchange(session.id, f"r{runs}", exchange(runs * 10 + n, rng))
            await store.finish_run(f"r{runs}", "ok", reply=(session.id, f"answer {runs}"))
        elif action < 0.92:
            # Compaction summarises turns already answered: the oldest (so the window may still
            # reach back to where the summary ends), or up to the newest answered message.
            answered = (await store.run_context(session.id, "", LIMIT, 0)).answered_upto
            if answered:
                upto = rng.choice([n for n in asked if n <= answered])
                await summarise(store, session.id, upto, f"summary {step}", run_id=f"c{step}")
        elif action < 0.97 and asked:
            # A message's attachments read: its text changes (the one change a message takes).
            await store.set_user_message(session.id, rng.choice(asked), f"read at {step}", None)
        # What the next run starts from: the kept window, topped up, against a whole read.
        kept = await store.run_context(session.id, "", LIMIT, 0)
        assert (
            kept.rows,
            kept.loaded_groups,
            kept.loaded_skills,
            kept.answered_upto,
            kept.summary,
        ) == await whole_read(store, session.id), step


async def test_a_row_that_commits_after_a_higher_id_is_still_topped_up_in_its_place(
    postgres: PostgresServer,
) -> None:
    """PostgreSQL hands out ids before their transactions commit, so a row may commit after a row
    with a higher id was read. Here an id is taken first and written last: the kept window, topped
    up by the session's message sequence, still holds it, where it belongs, as a whole read does."""
    store = PostgresStore(postgres.database(), pool_size=2)
    await store.open()
    try:
        session = await store.ensure_active_session("telegram:dm:1")
        [(late,)] = await store._rows("SELECT nextval(pg_get_serial_sequence('messages', 'id'))")
        for n in range(3):
            await store.add_user_message(session.id, f"message {n}")
        before = await store.run_context(session.id, "", LIMIT, 0)
        assert [row.content for row in before.rows] == ["message 0", "message 1", "message 2"]
        await store.engine.write(
            lambda conn: conn.execute(
                "INSERT INTO messages (id, session_id, kind, content, created_at) OVERRIDING SYSTEM "
                "VALUE VALUES (?, ?, 'user', 'the late one', 1)",
                (late, session.id),
            )
        )
        kept = await store.run_context(session.id, "", LIMIT, 0)
        assert [row.content for row in kept.rows] == ["the late one", "message 0", "message 1", "message 2"]
        assert (kept.rows, kept.loaded_groups, kept.loaded_skills, kept.answered_upto, kept.summary) == (
            await whole_read(store, session.id)
        )
    finally:
        await store.close()


async def test_a_message_another_worker_changed_is_read_again_into_the_kept_window(
    postgres: PostgresServer,
) -> None:
    """A message's attachments are read (and its text changed) by the worker that answers it,
    which may not be the one whose window holds it: the change takes a new sequence number."""
    url = postgres.database()
    first, second = PostgresStore(url, pool_size=2), PostgresStore(url, pool_size=2)
    await first.open()
    await second.open()
    try:
        session = await first.ensure_active_session("telegram:dm:1")
        photo = await first.add_user_message(session.id, "[photo]")
        await first.add_user_message(session.id, "and another")
        assert photo is not None
        assert [row.content for row in (await first.run_context(session.id, "", LIMIT, 0)).rows] == [
            "[photo]",
            "and another",
        ]
        await second.set_user_message(session.id, photo, "[photo: a cat on a mat]", None)
        kept = await first.run_context(session.id, "", LIMIT, 0)
        assert [row.content for row in kept.rows] == ["[photo: a cat on a mat]", "and another"]
    finally:
        await first.close()
        await second.close()


async def test_after_a_compaction_of_the_oldest_turns_the_window_is_topped_up_not_read_whole(
    store: DatabaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction summarises the oldest half of a full window: the window still holds every row
    after the summary, so the next run drops the summarised turns from it rather than read it all."""
    session = await store.ensure_active_session("telegram:dm:1")
    asked = []
    for turn in range(LIMIT // 2):
        asked.append(await store.add_user_message(session.id, f"message {turn}"))
        await store.begin_run(
            f"r{turn}", session.id, "telegram", memory_scope="", history_limit=LIMIT, memory_limit=0
        )
        await store.finish_run(f"r{turn}", "ok", reply=(session.id, f"answer {turn}"))
    before = await store.run_context(session.id, "", LIMIT, 0)
    assert len(before.rows) == LIMIT
    middle = asked[len(asked) // 2]
    assert middle is not None
    await summarise(store, session.id, middle, "the first half")
    whole = runs_module._whole_context
    wholes: list[tuple[Any, ...]] = []

    def counted(*args: Any) -> Any:
        wholes.append(args)
        return whole(*args)

    monkeypatch.setattr(runs_module, "_whole_context", counted)
    kept = await store.run_context(session.id, "", LIMIT, 0)
    assert wholes == []
    assert kept.summary is not None and kept.summary.content == "the first half"
    assert [row.content for row in kept.rows][:2] == [
        f"message {len(asked) // 2 + 1}",
        f"answer {len(asked) // 2 + 1}",
    ]
    rows, *_, summary = await whole_read(store, session.id)
    assert (kept.rows, kept.summary) == (rows, summary)
