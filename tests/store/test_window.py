"""A kept history window, topped up each turn, is always the window a whole read gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bridge.store.base import ToolExchange
from bridge.store.runs import _read_context
from bridge.store.sqlite import SQLiteStore, dumps
from bridge.store.tables import DatabaseStore
from bridge.store.window import Windows
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
    context, _ = await store._read(lambda conn: _read_context(conn, session_id, "", LIMIT, 0), snapshot=True)
    return (
        context.rows,
        context.loaded_groups,
        context.loaded_skills,
        context.answered_upto,
        context.summary,
    )


@pytest.mark.parametrize("seed", range(8))
async def test_a_kept_window_equals_a_whole_read_after_every_turn_summary_and_interleaving(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    store = SQLiteStore(tmp_path / "bridge.db")
    await store.open()
    try:
        assert isinstance(store._windows, Windows)
        session = await store.ensure_active_session("telegram:dm:1")
        runs = 0
        for step in range(120):
            action = rng.random()
            if action < 0.35:
                await store.add_user_message(session.id, f"message {step}")
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
                # Compaction summarises turns already answered, up to the newest answered message.
                answered = (await store.run_context(session.id, "", LIMIT, 0)).answered_upto
                if answered:
                    await summarise(store, session.id, answered, f"summary {step}", run_id=f"c{step}")
            # What the next run starts from: the kept window, topped up, against a whole read.
            kept = await store.run_context(session.id, "", LIMIT, 0)
            assert (
                kept.rows,
                kept.loaded_groups,
                kept.loaded_skills,
                kept.answered_upto,
                kept.summary,
            ) == await whole_read(store, session.id), step
    finally:
        await store.close()


async def test_postgresql_reads_the_whole_window_every_time(tmp_path: Path) -> None:
    """Its ids may commit out of order (two transactions side by side), so a top-up could miss a row."""
    from bridge.store.postgres import PostgresEngine

    assert not PostgresEngine("postgresql://nowhere/db").ids_in_commit_order
