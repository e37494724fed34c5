"""What every fault test asserts of the store afterwards: nothing lost, nothing split, nothing sent twice."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any


def rows(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return list(db.execute(sql, params))


def assert_intact(path: Path, user_texts: list[str], *, finished: bool = True) -> None:
    """The store after a fault: each user message kept once in order, no orphan tool calls, no doubles.

    With `finished`, the bot has stopped cleanly: no run is left running and nothing is left pending.
    """
    stored = [text for (text,) in rows(path, "SELECT content FROM messages WHERE kind = 'user' ORDER BY id")]
    assert stored == user_texts, f"user messages lost or doubled: {stored}"
    orphans = rows(
        path,
        "SELECT c.tool_call_id, c.kind FROM messages c WHERE c.kind IN ('tool_call', 'tool_result') "
        "AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.tool_call_id = c.tool_call_id "
        "AND r.kind = CASE c.kind WHEN 'tool_call' THEN 'tool_result' ELSE 'tool_call' END)",
    )
    assert orphans == [], f"tool calls without results (or results without calls): {orphans}"
    # A platform's message ids are unique within a chat only (Telegram counts per chat).
    sent_ids = rows(
        path,
        "SELECT surface, chat_id, platform_msg_id FROM outbox WHERE state = 'sent' "
        "AND platform_msg_id IS NOT NULL",
    )
    doubles = [m for m, n in Counter(sent_ids).items() if n > 1]
    assert doubles == [], f"one platform message recorded for several outbox rows: {doubles}"
    # A reply is one row per chunk: each chunk is sent once.
    replies = rows(
        path,
        "SELECT run_id, part, COUNT(*) FROM outbox WHERE kind = 'reply' AND state = 'sent' "
        "AND run_id IS NOT NULL GROUP BY run_id, part HAVING COUNT(*) > 1",
    )
    assert replies == [], f"a run's reply was sent more than once: {replies}"
    if finished:
        assert rows(path, "SELECT id FROM runs WHERE status = 'running'") == []
        assert rows(path, "SELECT id, kind, text FROM outbox WHERE state = 'pending'") == []
