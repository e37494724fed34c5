"""Throughput over HTTP: Bridge in process, the instant model in another process, 100 chats × 20 turns.

Once on the SQLite file and once on a PostgreSQL server that it starts for the run
(devkit/postgres.py), where PostgreSQL and psycopg are installed.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import percentile, table, write_results
from bench.throughput import NullSender, one_session_timed
from bridge.app import Bridge
from bridge.config import Settings
from devkit.instant_model import instant_model
from devkit.postgres import postgres_server, unavailable

SESSIONS, TURNS = 100, 20
SMOKE_SESSIONS, SMOKE_TURNS = 5, 3
# 20 times the 8 turns/s nanobot 0.3.5 does on these machines with the same workload.
TARGET_TURNS_PER_S = 160


def settings_for(folder: Path, base_url: str, sessions: int, url: str | None = None) -> Settings:
    return Settings(
        llm={"base_url": base_url, "model": "instant"},
        storage={"path": str(folder / "bench.db"), "url": url},
        tools={"workspace": str(folder / "workspace")},
        runs={"max_concurrent_runs": min(sessions, 1000)},
    )


async def measure(sessions: int, turns: int, url: str | None = None) -> dict[str, Any]:
    async with instant_model() as base_url:
        with tempfile.TemporaryDirectory() as tmp:
            sender = NullSender()
            latencies: list[float] = []
            async with Bridge(settings_for(Path(tmp), base_url, sessions, url)) as bridge:
                bridge.add_sender(sender)
                await one_session_timed(bridge, -1, 1, [])  # lazy imports and the first connection
                started = time.perf_counter()
                await asyncio.gather(
                    *(one_session_timed(bridge, u, turns, latencies) for u in range(sessions))
                )
                elapsed = time.perf_counter() - started
    total = sessions * turns
    return {
        "store": "postgresql" if url else "sqlite",
        "sessions": sessions,
        "turns": total,
        "seconds": round(elapsed, 3),
        "turns_per_s": round(total / elapsed, 1),
        "turn_p50_ms": round(percentile(latencies, 50) * 1000, 2),
        "turn_p99_ms": round(percentile(latencies, 99) * 1000, 2),
    }


async def run(smoke: bool = False) -> dict[str, Any]:
    size = (SMOKE_SESSIONS, SMOKE_TURNS) if smoke else (SESSIONS, TURNS)
    results = [await measure(*size)]
    if reason := unavailable():
        print(f"PostgreSQL figures skipped, measured on SQLite only: {reason}")
    else:
        with postgres_server() as server:
            results.append(await measure(*size, url=server.database()))
    print(
        table(
            "Over HTTP: the instant model in another process (devkit/instant_model.py), each turn a tool "
            "call then a reply, two model requests; one worker",
            ["store", "sessions", "turns", "seconds", "turns/s", "turn p50 ms", "turn p99 ms"],
            [list(r.values()) for r in results],
        )
    )
    met = results[0]["turns_per_s"] >= TARGET_TURNS_PER_S
    data = {"results": results, "targets": {f"turns_per_s_at_least_{TARGET_TURNS_PER_S}": met}}
    print(f"targets: {data['targets']}\n")
    write_results("http_throughput", data, smoke=smoke)
    return data
