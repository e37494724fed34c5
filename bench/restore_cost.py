"""Restore cost: time to derive a session's loaded groups as its history grows, against a full scan."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import percentile, table, write_results
from bridge.store.sqlite import SQLiteStore

SIZES = (10, 1_000, 10_000, 100_000)
SMOKE_SIZES = (10, 1_000)
GROUP_COUNTS = (1, 3, 10)
GROUPS = ("sessions", "files", "web", "mail", "drive", "calendar", "sheets", "tasks", "pdf", "crm")
SAMPLES = 300
# The full scan reads every row into Python: fewer samples keep the 100k case within seconds.
SCAN_SAMPLES = 20


def seed(path: Path, session_id: str, messages: int, groups: tuple[str, ...]) -> None:
    """Fill a session with `messages` rows, the group loads spread among them, straight through sqlite3."""
    now = time.time()
    loads = {messages * (i + 1) // (len(groups) + 1): group for i, group in enumerate(groups)}
    rows: list[tuple[Any, ...]] = []
    for i in range(messages):
        if i in loads:
            args = json.dumps({"group_name": loads[i]})
            rows.append((session_id, "tool_call", "", "load_tool_group", args, "success", now))
        else:
            rows.append((session_id, "user" if i % 2 else "assistant", f"message {i}", None, None, None, now))
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO messages (session_id, kind, content, tool_name, tool_input, tool_status, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def full_scan(path: Path, session_id: str) -> set[str]:
    """RFC-044's first idea: read the whole history and replay every load_tool_group call in Python."""
    loaded: set[str] = set()
    with sqlite3.connect(path) as db:
        for kind, tool, args, status in db.execute(
            "SELECT kind, tool_name, tool_input, tool_status FROM messages WHERE session_id = ? ORDER BY id",
            (session_id,),
        ):
            if kind == "tool_call" and tool == "load_tool_group" and status == "success":
                name = json.loads(args).get("group_name")
                if isinstance(name, str):
                    loaded.add(name)
    return loaded


async def timed_restores(
    store: SQLiteStore, session_id: str, expected: set[str], samples: int
) -> list[float]:
    timings = []
    for _ in range(samples):
        start = time.perf_counter()
        groups = await store.loaded_groups(session_id)
        timings.append((time.perf_counter() - start) * 1000)
    assert groups == expected, groups
    return timings


def timed_scans(path: Path, session_id: str, expected: set[str], samples: int) -> list[float]:
    timings = []
    for _ in range(samples):
        start = time.perf_counter()
        groups = full_scan(path, session_id)
        timings.append((time.perf_counter() - start) * 1000)
    assert groups == expected, groups
    return timings


async def run(smoke: bool = False) -> dict[str, Any]:
    sizes = SMOKE_SIZES if smoke else SIZES
    samples, scan_samples = (30, 5) if smoke else (SAMPLES, SCAN_SAMPLES)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        store = SQLiteStore(path)
        await store.open()
        try:
            for size in sizes:
                for count in GROUP_COUNTS:
                    groups = GROUPS[:count]
                    session = await store.ensure_active_session(f"bench:dm:{size}-{count}")
                    await asyncio.to_thread(seed, path, session.id, size, groups)
                    restores = await timed_restores(store, session.id, set(groups), samples)
                    scans = await asyncio.to_thread(timed_scans, path, session.id, set(groups), scan_samples)
                    results.append(
                        {
                            "messages": size,
                            "groups": count,
                            "p50_ms": round(percentile(restores, 50), 4),
                            "p99_ms": round(percentile(restores, 99), 4),
                            "full_scan_p50_ms": round(percentile(scans, 50), 3),
                            "full_scan_p99_ms": round(percentile(scans, 99), 3),
                        }
                    )
        finally:
            await store.close()
    print(
        table(
            "Restoring loaded groups: store.loaded_groups() on the event loop (one query on a partial "
            "index), against a full history scan in Python",
            ["messages", "groups", "p50 ms", "p99 ms", "full scan p50 ms", "full scan p99 ms"],
            [list(r.values()) for r in results],
        )
    )
    biggest = [r for r in results if r["messages"] == max(sizes)]
    smallest = [r for r in results if r["messages"] == min(sizes)]
    worst_p99 = max(r["p99_ms"] for r in biggest)
    data = {
        "samples": samples,
        "results": results,
        "targets": {
            "p99_at_most_1ms_at_largest": worst_p99 <= 1.0,
            # "Flat within noise": the largest history's median is no more than twice the smallest's.
            "flat_from_smallest_to_largest": max(r["p50_ms"] for r in biggest)
            <= 2 * max(r["p50_ms"] for r in smallest),
        },
    }
    print(f"targets: {data['targets']}\n")
    write_results("restore_cost", data, smoke=smoke)
    return data


if __name__ == "__main__":
    asyncio.run(run())
