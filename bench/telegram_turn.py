"""CPU per Telegram turn: one `bridge run` worker on SQLite, chats in a closed loop over the fake Bot API.

The worker is a real `bridge run` process; the fake Telegram Bot API runs here and the instant model in
a process of its own, so the CPU time read from /proc/<pid>/stat over the timed window is the worker's
alone. Each chat sends its next message once the reply to the last one arrived (a closed loop), and
each turn is a tool call, then a reply: an activity message and its edit, a typing action where the
answer takes long enough, the streamed draft and the reply. The figure issue 34 aims at: ≤ 8 ms of the
worker's CPU per turn on a 2-core VM.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import percentile, table, write_results
from bench.scale import REPLY, started_workers, write_config
from devkit.fakes.telegram_api import FakeTelegram
from devkit.instant_model import instant_model

CHATS, TURNS = 20, 25
SMOKE_CHATS, SMOKE_TURNS = 3, 2
FIRST_USER = 7000
TARGET_CPU_MS = 8.0
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux)."""
    # The command name, in parentheses, may hold spaces: the fields are counted after its ")".
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


async def closed_loop(tg: FakeTelegram, chats: int, turns: int, latencies: list[float]) -> None:
    """Every chat asks, waits for its reply, asks again: `turns` times each."""
    users = range(FIRST_USER, FIRST_USER + chats)
    left = dict.fromkeys(users, turns)
    asked: dict[int, float] = {}
    answered: list[int] = []
    seen = len(tg.sent)

    def arrived() -> bool:
        nonlocal seen
        for message in tg.sent[seen:]:
            if str(message.get("text", "")).startswith(REPLY):
                answered.append(message["chat_id"])
        seen = len(tg.sent)
        return bool(answered)

    def ask(user: int) -> None:
        asked[user] = time.perf_counter()
        tg.dm(user, f"turn {turns - left[user]}")

    for user in users:
        ask(user)
    while any(left.values()):
        await tg.wait_for(arrived, 60)
        now = time.perf_counter()
        for user in answered:
            latencies.append(now - asked[user])
            left[user] -= 1
            if left[user]:
                ask(user)
        answered.clear()


async def measure(tg: FakeTelegram, model_url: str, chats: int, turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bridge-telegram-turn-") as tmp:
        folder = Path(tmp)
        config = write_config(folder, tg, model_url, f'path = "{folder / "bridge.db"}"')
        async with started_workers(folder, config, 1) as [worker]:
            # A few turns first, so lazy imports, connections and caches are warm.
            await closed_loop(tg, 2, 2, [])
            latencies: list[float] = []
            calls_before = len(tg.calls)
            cpu_before, started = cpu_seconds(worker.pid), time.perf_counter()
            await closed_loop(tg, chats, turns, latencies)
            elapsed, cpu = time.perf_counter() - started, cpu_seconds(worker.pid) - cpu_before
            calls = len(tg.calls) - calls_before
    total = chats * turns
    return {
        "chats": chats,
        "turns": total,
        "seconds": round(elapsed, 2),
        "turns_per_s": round(total / elapsed, 1),
        "cpu_ms_per_turn": round(cpu * 1000 / total, 2),
        "bot_api_calls_per_turn": round(calls / total, 2),
        "turn_p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "turn_p99_ms": round(percentile(latencies, 99) * 1000, 1),
    }


async def run(smoke: bool = False) -> dict[str, Any]:
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    chats, turns = (SMOKE_CHATS, SMOKE_TURNS) if smoke else (CHATS, TURNS)
    async with instant_model() as model_url, FakeTelegram() as tg:
        result = await measure(tg, model_url, chats, turns)
    print(
        table(
            f"A Telegram turn: {chats} chats in a closed loop over the fake Bot API, each turn a tool call "
            "then a reply from the instant model (another process); one `bridge run` worker on SQLite",
            ["chats", "turns", "seconds", "turns/s", "CPU ms/turn", "Bot API calls/turn", "p50 ms", "p99 ms"],
            [list(result.values())],
        )
    )
    met = result["cpu_ms_per_turn"] <= TARGET_CPU_MS
    data = {"results": [result], "targets": {f"cpu_ms_per_turn_at_most_{TARGET_CPU_MS:g}": met}}
    print(f"targets: {data['targets']}\n")
    write_results("telegram_turn", data, smoke=smoke)
    return data
