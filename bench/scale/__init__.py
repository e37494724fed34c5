"""Scale-out: turns per second with 1, 2 and 4 `bridge run` workers on PostgreSQL, against 1 on SQLite.

Each worker is a real `bridge run` process. The chats come in over the fake Telegram Bot API of the
test tree (one worker polls it; every worker answers), and the instant model runs in a process of its
own. Every chat sends its turns at once, `[runs] queue_mode = "followup"`, so each message is a run of
its own: a turn is a tool call, then a reply. Also timed: how long Telegram goes unpolled after a
kill -9 of the polling worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.common import table, write_results

# The tests' fake Bot API and process helpers: they need aiohttp alone (no pytest, no psycopg), so they
# import from a checkout with just the `bench` extra.
from devkit.fakes.telegram_api import FakeTelegram
from devkit.instant_model import instant_model
from devkit.postgres import postgres_server, unavailable
from devkit.processes import kill9, start_bridge

CHATS, TURNS = 100, 20
SMOKE_CHATS, SMOKE_TURNS = 5, 2
WORKERS = (1, 2, 4)
SMOKE_WORKERS = (2,)
FIRST_USER = 5000
REPLY = "answer to "


@contextlib.asynccontextmanager
async def started_workers(folder: Path, config: Path, n: int) -> AsyncIterator[list[Any]]:
    processes: list[asyncio.subprocess.Process] = []
    drains: list[asyncio.Task[None]] = []
    try:
        for _ in range(n):
            process = await start_bridge(folder, "run", "--config", str(config))
            processes.append(process)
            assert process.stderr is not None
            async with asyncio.timeout(60):
                while b"running:" not in (line := await process.stderr.readline()):
                    assert line, "bridge run ended before it was running"
            # The rest of its log is not read: drained, so a full pipe never holds the worker up.
            drains.append(asyncio.create_task(_drain(process)))
        yield processes
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        await asyncio.gather(*drains, return_exceptions=True)


async def _drain(process: asyncio.subprocess.Process) -> None:
    assert process.stderr is not None
    while await process.stderr.read(65536):
        pass


def write_config(folder: Path, tg: Any, model_url: str, storage: str) -> Path:
    config = folder / "config.toml"
    config.write_text(
        f'[llm]\nbase_url = "{model_url}"\nmodel = "instant"\n'
        f"[storage]\n{storage}\n"
        f'[telegram]\nenabled = true\ntoken = "{tg.token}"\napi_base = "{tg.api_base}"\n'
        'poll_timeout_s = 1\nallowed_users = ["*"]\n'
        '[runs]\nqueue_mode = "followup"\nmax_queued = 1000\nmax_concurrent_runs = 100\n',
        encoding="utf-8",
    )
    return config


def replies(tg: Any) -> int:
    return sum(1 for m in tg.sent if str(m.get("text", "")).startswith(REPLY))


async def measure(
    tg: Any, model_url: str, workers: int, chats: int, turns: int, storage: str
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bridge-scale-") as tmp:
        folder = Path(tmp)
        config = write_config(folder, tg, model_url, storage)
        async with started_workers(folder, config, workers):
            before = replies(tg)
            # One message first, so every worker is warm (its connections and lazy imports).
            tg.dm(FIRST_USER - 1, "warm up")
            await _until(lambda: replies(tg) > before, 60)
            before = replies(tg)
            started = time.perf_counter()
            for turn in range(turns):
                for user in range(FIRST_USER, FIRST_USER + chats):
                    tg.dm(user, f"turn {turn}")
            total = chats * turns
            await _until(lambda: replies(tg) - before >= total, 600)
            elapsed = time.perf_counter() - started
    return {
        "store": "postgresql" if "url" in storage else "sqlite",
        "workers": workers,
        "turns": total,
        "seconds": round(elapsed, 2),
        "turns_per_s": round(total / elapsed, 1),
    }


async def failover(tg: Any, model_url: str, url: str) -> float:
    """Seconds from a kill -9 of the polling worker to the next getUpdates, with two others running."""
    with tempfile.TemporaryDirectory(prefix="bridge-scale-") as tmp:
        folder = Path(tmp)
        config = write_config(folder, tg, model_url, f'url = "{url}"')
        async with started_workers(folder, config, 3) as processes:
            killed_at = asyncio.get_running_loop().time()
            await kill9(processes[0])
            await _until(lambda: any(t > killed_at for t in tg.poll_times), 30)
            return min(t for t in tg.poll_times if t > killed_at) - killed_at


async def _until(done: Any, timeout: float) -> None:  # noqa: ASYNC109
    async with asyncio.timeout(timeout):
        while not done():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def run(smoke: bool = False) -> dict[str, Any]:
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    chats, turns = (SMOKE_CHATS, SMOKE_TURNS) if smoke else (CHATS, TURNS)
    results: list[dict[str, Any]] = []
    takeover: float | None = None
    async with instant_model() as model_url:
        with tempfile.TemporaryDirectory(prefix="bridge-scale-db-") as tmp:
            async with FakeTelegram() as tg:
                storage = f'path = "{Path(tmp) / "bridge.db"}"'
                results.append(await measure(tg, model_url, 1, chats, turns, storage))
        if reason := unavailable():
            print(f"PostgreSQL figures skipped, SQLite only: {reason}")
        else:
            with postgres_server() as server:
                # A fresh database and Bot API for each count: no run starts with another's history.
                for workers in SMOKE_WORKERS if smoke else WORKERS:
                    async with FakeTelegram() as tg:
                        storage = f'url = "{server.database()}"'
                        results.append(await measure(tg, model_url, workers, chats, turns, storage))
                if not smoke:
                    async with FakeTelegram() as tg:
                        takeover = await failover(tg, model_url, server.database())
    print(
        table(
            f"Scale-out: {chats} Telegram chats × {turns} turns over the fake Bot API, each turn a tool "
            "call then a reply from the instant model (another process); each worker a `bridge run` process",
            ["store", "workers", "turns", "seconds", "turns/s"],
            [list(r.values()) for r in results],
        )
    )
    if takeover is not None:
        print(f"polling again {takeover:.2f} s after a kill -9 of the polling worker (bound: 15 s)\n")
    data = {"results": results, "failover_s": None if takeover is None else round(takeover, 2)}
    write_results("scale", data, smoke=smoke)
    return data
