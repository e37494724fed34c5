"""Restore cost: time to derive a session's loaded groups as its history grows (DESIGN §4)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bridge.store.sqlite import SQLiteStore

SIZES = (10, 1_000, 10_000, 100_000)
GROUPS = ("sessions", "files", "web")
SAMPLES = 500


def seed(path: Path, session_id: str, messages: int) -> None:
    """Fill a session with `messages` rows, three group loads among them, straight through sqlite3."""
    db = sqlite3.connect(path)
    now = time.time()
    loads = {messages * (i + 1) // (len(GROUPS) + 1): group for i, group in enumerate(GROUPS)}
    rows = []
    for i in range(messages):
        if i in loads:
            rows.append(
                (
                    session_id,
                    "tool_call",
                    "",
                    "load_tool_group",
                    json.dumps({"group_name": loads[i]}),
                    "success",
                    now,
                )
            )
        else:
            rows.append((session_id, "user" if i % 2 else "assistant", f"message {i}", None, None, None, now))
    db.executemany(
        "INSERT INTO messages (session_id, kind, content, tool_name, tool_input, tool_status, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    db.commit()
    db.close()


async def measure(store: SQLiteStore, session_id: str) -> list[float]:
    timings = []
    for _ in range(SAMPLES):
        start = time.perf_counter()
        groups = await store.loaded_groups(session_id)
        timings.append((time.perf_counter() - start) * 1000)
    assert groups == set(GROUPS), groups
    return timings


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        store = SQLiteStore(path)
        await store.open()
        results = []
        for size in SIZES:
            session = await store.ensure_active_session(f"bench:dm:{size}")
            await asyncio.to_thread(seed, path, session.id, size)
            timings = await measure(store, session.id)
            results.append(
                {"messages": size, "p50_ms": percentile(timings, 50), "p99_ms": percentile(timings, 99)}
            )
        await store.close()
    print("loaded_groups() per call, 3 groups loaded, aiosqlite round trip included")
    print(f"{'messages':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for r in results:
        print(f"{r['messages']:>10} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "restore_cost.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
