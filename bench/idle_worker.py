"""Memory of an idle worker: one `bridge run` process after 10,000 Telegram chats have each had a turn.

Issue 34's target: RSS ≤ 100 MB. The worker is a real `bridge run` process, on SQLite and (where its
server programs and psycopg are installed) on PostgreSQL; the chats come over the test tree's fake Bot
API, each turn a tool call then a reply from the instant model in a process of its own, so every
chat leaves what a turn leaves: its session, its lane, its activity and reply rows, its cached
window. 200 chats are in flight at a time: each answer's next message comes from a chat not yet
heard from. The worker's resident size is read from /proc/<pid>/status once its first chat was
answered (lazy imports loaded), then after the last one and a few idle seconds, with its peak.
`bench/memory.py` measures the same growth in process, without Telegram or a process of its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import status_mb, table, write_results
from bench.scale.loop import ClosedLoop
from bench.scale.workers import started_workers, write_config
from devkit.fakes.telegram_api import FakeTelegram
from devkit.instant_model import instant_model
from devkit.postgres import PostgresServer, postgres_server, unavailable

CHATS, SMOKE_CHATS = 10_000, 40
IN_FLIGHT, SMOKE_IN_FLIGHT = 200, 10
# Long enough for what expires on its own (the sessions' one-second cache, finished runs' tasks) to
# go, and for the loop to have nothing left to do.
IDLE_S = 5.0
TARGET_MB = 100.0


async def measure(
    model_url: str, chats: int, in_flight: int, server: PostgresServer | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bridge-idle-worker-") as tmp:
        folder = Path(tmp)
        storage = f'path = "{folder / "bridge.db"}"' if server is None else f'url = "{server.database()}"'
        async with FakeTelegram() as tg:
            config = write_config(folder, tg, model_url, storage)
            async with started_workers(folder, config, 1) as worker:
                pid = worker.processes[0].pid
                loop = ClosedLoop(tg, 1)
                loop.start()
                await loop.until_answered(1, 60)
                loop.stop()
                started = status_mb(pid, "VmRSS")
                began = time.perf_counter()
                loop = ClosedLoop(tg, in_flight, one_turn_each=chats)
                loop.start()
                await loop.until_answered(chats, 30 + chats / 10)
                seconds = time.perf_counter() - began
                await asyncio.sleep(IDLE_S)
                idle, peak = status_mb(pid, "VmRSS"), status_mb(pid, "VmHWM")
    assert started is not None and idle is not None, "the worker's memory cannot be read here"
    return {
        "store": "sqlite" if server is None else "postgresql",
        "chats": chats,
        "seconds": round(seconds, 1),
        "turns_per_s": round(chats / seconds, 1),
        "started_rss_mb": round(started, 1),
        "idle_rss_mb": round(idle, 1),
        "growth_mb": round(idle - started, 1),
        "peak_rss_mb": None if peak is None else round(peak, 1),
    }


async def run(smoke: bool = False) -> dict[str, Any]:
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    # The worker is killed at the end, mid-poll: the fake Bot API's server would log the cut connection.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    chats, in_flight = (SMOKE_CHATS, SMOKE_IN_FLIGHT) if smoke else (CHATS, IN_FLIGHT)
    results = []
    async with instant_model() as model_url:
        results.append(await measure(model_url, chats, in_flight, None))
        if reason := unavailable():
            print(f"PostgreSQL figures skipped, SQLite only: {reason}")
        else:
            with postgres_server() as server:
                results.append(await measure(model_url, chats, in_flight, server))
    print(
        table(
            f"An idle worker: one `bridge run` process after {chats:,} Telegram chats had a turn each "
            f"({in_flight} at a time), then {IDLE_S:g} s idle",
            ["store", "chats", "seconds", "turns/s", "started MB", "idle MB", "growth MB", "peak MB"],
            [list(r.values()) for r in results],
        )
    )
    targets = {f"idle_rss_at_most_{TARGET_MB:g}_mb": all(r["idle_rss_mb"] <= TARGET_MB for r in results)}
    print(f"targets: {targets}\n")
    data = {"results": results, "targets": targets}
    write_results("idle_worker", data, smoke=smoke)
    return data
