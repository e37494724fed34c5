"""Memory: resident size of a running bot after 10k chats have each left a few messages and gone idle."""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import RESULTS, status_mb, table, write_results
from bench.throughput import BenchModel, NullSender, settings_for
from bridge.app import Bridge
from bridge.events import Inbound

SESSIONS = 10_000
SMOKE_SESSIONS = 300
MESSAGES = 5
# This many of the chats also get a whole turn (tool call, activity, reply) through the dispatcher,
# so per-chat state there (lanes, activity, delivery) is part of what is measured.
FULL_TURNS = 1_000
BATCH = 200
TARGET_MB = 20.0


def rss_mb() -> float:
    """Resident set size now (Linux /proc), else the peak from getrusage."""
    now = status_mb("self", "VmRSS")
    return now if now is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def settled_rss() -> float:
    gc.collect()
    return rss_mb()


def inbound(user: int, text: str, message_id: str) -> Inbound:
    return Inbound("bench", "dm", f"c{user}", f"u{user}", text, message_id=message_id)


async def fill(bridge: Bridge, user: int) -> None:
    """One chat: its session created the way the dispatcher creates it, then MESSAGES stored messages."""
    session = await bridge.sessions.active(inbound(user, "", "0"))
    for n in range(MESSAGES):
        if n % 2:
            await bridge.store.add_assistant_message(session.id, None, f"answer {n} to chat {user}")
        else:
            text = f"message {n} from chat {user}"
            await bridge.store.add_user_message(session.id, text, sender=f"u{user}")


async def full_turn(bridge: Bridge, user: int) -> None:
    done = await bridge.handle(inbound(user, f"one more from {user}", "turn"))
    assert done is not None
    await done


async def in_batches(count: int, work: Any) -> None:
    for start in range(0, count, BATCH):
        await asyncio.gather(*(work(n) for n in range(start, min(count, start + BATCH))))


async def run(smoke: bool = False) -> dict[str, Any]:
    """Measure in a fresh interpreter: what other benchmarks loaded or left behind is not the bot's."""
    command = [sys.executable, "-m", "bench.memory", *(["--smoke"] if smoke else [])]
    process = await asyncio.create_subprocess_exec(*command, cwd=Path(__file__).parent.parent)
    if await process.wait() != 0:
        raise RuntimeError(f"{' '.join(command)} failed with status {process.returncode}")
    name = "memory.smoke.json" if smoke else "memory.json"
    return dict(json.loads((RESULTS / name).read_text()))


async def measure(smoke: bool = False) -> dict[str, Any]:
    sessions = SMOKE_SESSIONS if smoke else SESSIONS
    full = min(FULL_TURNS, sessions // 10)
    with tempfile.TemporaryDirectory() as tmp:
        async with Bridge(settings_for(Path(tmp), 100), provider=BenchModel()) as bridge:
            bridge.add_sender(NullSender())
            # The empty bot has answered once, so what loads lazily on a first turn is in the baseline.
            await full_turn(bridge, -1)
            empty = settled_rss()
            await in_batches(sessions, lambda n: fill(bridge, n))
            await in_batches(full, lambda n: full_turn(bridge, n))
            idle = settled_rss()
            stored = await bridge.store.count_messages((await bridge.sessions.active(inbound(0, "", "0"))).id)
    growth = idle - empty
    data = {
        "sessions": sessions,
        "messages_per_session": MESSAGES,
        "sessions_with_a_full_turn": full,
        "empty_bot_rss_mb": round(empty, 1),
        "idle_after_rss_mb": round(idle, 1),
        "growth_mb": round(growth, 1),
        "targets": {f"growth_at_most_{TARGET_MB:g}_mb": growth <= TARGET_MB},
    }
    print(
        table(
            f"Memory: RSS of one bot process, {sessions:,} chats × {MESSAGES} messages "
            f"({full:,} of them also a whole turn), then idle",
            ["empty bot MB", "after, idle MB", "growth MB"],
            [[data["empty_bot_rss_mb"], data["idle_after_rss_mb"], data["growth_mb"]]],
        )
    )
    print(f"targets: {data['targets']} (chat 0 holds {stored} messages)\n")
    write_results("memory", data, smoke=smoke)
    return data


if __name__ == "__main__":
    asyncio.run(measure("--smoke" in sys.argv))
