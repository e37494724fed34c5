"""Core throughput and latency: the full path in one process, with a model that costs nothing (or 50 ms)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import percentile, table, write_results
from bridge.app import Bridge
from bridge.config import Settings
from bridge.events import Inbound, Outbound, Route
from bridge.llm.base import ChatMessage, Completion, ToolCall
from bridge.platform import Sender
from bridge.store.sqlite.batch import Trips
from bridge.store.sqlite.engine import SQLiteEngine

TURNS = 20
CONCURRENCY = (1, 100, 1_000)
# With 1,000 sessions the core is saturated whatever the model costs (see the instant rows), so the
# 50 ms provider stops at 100: the 1,000 row would take two more minutes to say the same.
SLOW_CONCURRENCY = (1, 100)
SMOKE_CONCURRENCY = (1, 10)
SMOKE_TURNS = 3


class BenchModel:
    """A Provider: one tool call on a turn's first request, then a final reply; time spent is recorded."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.spent: dict[str, float] = {}  # the turn's user text -> seconds inside the provider
        self._ids = itertools.count()

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: Any = None
    ) -> Completion:
        started = time.perf_counter()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        turn = next(m.content for m in reversed(messages) if m.role == "user")
        if not tools:
            # A compaction's request (it offers no tools): a summary, as a model would write.
            completion = Completion("Summary: the user asked for the time, and got it.")
        elif messages[-1].role == "user":
            completion = Completion("", (ToolCall(f"call_{next(self._ids)}", "get_current_time", "{}"),))
        else:
            completion = Completion(f"answer to {turn}")
        self.spent[turn] = self.spent.get(turn, 0.0) + time.perf_counter() - started
        return completion

    async def aclose(self) -> None:
        return None


@dataclass
class NullSender(Sender):
    """An adapter that only records what it is given."""

    surface: str = "bench"
    supports_edit: bool = True
    sent: int = 0
    edited: int = 0
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    async def send(self, item: Outbound) -> str | None:
        self.sent += 1
        return str(next(self._ids))

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        self.edited += 1

    async def typing(self, route: Route) -> None:
        return None


def settings_for(folder: Path, sessions: int) -> Settings:
    return Settings(
        storage={"path": str(folder / "bench.db")},
        tools={"workspace": str(folder / "workspace")},
        # Every session may run at once: the figure is the core's, not a concurrency cap's.
        runs={"max_concurrent_runs": min(sessions, 1000)},
    )


async def one_session(
    bridge: Bridge, model: BenchModel, user: int, turns: int, overheads: list[float]
) -> None:
    for turn in range(turns):
        text = f"u{user} t{turn}"
        inbound = Inbound("bench", "dm", f"c{user}", f"u{user}", text, message_id=str(turn))
        started = time.perf_counter()
        done = await bridge.handle(inbound)
        assert done is not None
        await done
        overheads.append(time.perf_counter() - started - model.spent[text])


async def one_session_timed(bridge: Bridge, user: int, turns: int, latencies: list[float]) -> None:
    """Like one_session, for a model that is not in process: each turn's whole time is recorded."""
    for turn in range(turns):
        inbound = Inbound("bench", "dm", f"c{user}", f"u{user}", f"u{user} t{turn}", message_id=str(turn))
        started = time.perf_counter()
        done = await bridge.handle(inbound)
        assert done is not None
        await done
        latencies.append(time.perf_counter() - started)


async def measure(sessions: int, turns: int, delay_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        model = BenchModel(delay_s)
        sender = NullSender()
        overheads: list[float] = []
        async with Bridge(settings_for(Path(tmp), sessions), provider=model) as bridge:
            bridge.add_sender(sender)
            # One turn first, not counted: the first turn of a process pays for lazy imports.
            await one_session(bridge, model, -1, 1, [])
            sender.sent = 0
            engine = bridge.store.engine
            assert isinstance(engine, SQLiteEngine)
            before = dataclasses.replace(engine.trips)
            started = time.perf_counter()
            await asyncio.gather(*(one_session(bridge, model, u, turns, overheads) for u in range(sessions)))
            elapsed = time.perf_counter() - started
            trips = engine.trips
        total = sessions * turns
        assert sender.sent == 2 * total, (sender.sent, total)  # one activity message and one reply a turn
        return {
            "provider_ms": delay_s * 1000,
            "sessions": sessions,
            "turns": total,
            "seconds": round(elapsed, 3),
            "turns_per_s": round(total / elapsed, 1),
            "overhead_p50_ms": round(percentile(overheads, 50) * 1000, 3),
            "overhead_p99_ms": round(percentile(overheads, 99) * 1000, 3),
            **per_turn(before, trips, total),
        }


def per_turn(before: Trips, after: Trips, turns: int) -> dict[str, float]:
    """The store's work per turn: writes asked, the transactions that carried them, reads, and the
    trips to a database thread among them (the rest ran on the event loop)."""
    return {
        "writes_per_turn": round((after.writes - before.writes) / turns, 2),
        "commits_per_turn": round((after.commits - before.commits) / turns, 2),
        "reads_per_turn": round((after.reads - before.reads) / turns, 2),
        "thread_trips_per_turn": round((after.thread_jobs - before.thread_jobs) / turns, 2),
    }


async def run(smoke: bool = False) -> dict[str, Any]:
    turns = SMOKE_TURNS if smoke else TURNS
    plan = [(0.0, n) for n in (SMOKE_CONCURRENCY if smoke else CONCURRENCY)]
    plan += [(0.05, n) for n in (SMOKE_CONCURRENCY if smoke else SLOW_CONCURRENCY)]
    results = [await measure(n, turns, delay) for delay, n in plan]
    print(
        table(
            f"Core throughput: {turns} turns per session, each a tool call then a reply "
            "(dispatcher → lane → runner → SQLite → outbox → recording adapter)",
            [
                "provider ms",
                "sessions",
                "turns",
                "seconds",
                "turns/s",
                "overhead p50 ms",
                "overhead p99 ms",
                "writes/turn",
                "commits/turn",
                "reads/turn",
                "thread trips/turn",
            ],
            [list(r.values()) for r in results],
        )
    )
    instant = [r for r in results if r["provider_ms"] == 0]
    best = max(r["turns_per_s"] for r in instant)
    single = next(r for r in instant if r["sessions"] == 1)
    data = {
        "results": results,
        "targets": {
            "turns_per_s_at_least_1000": best >= 1000,
            "overhead_p99_ms_at_most_5_single_session": single["overhead_p99_ms"] <= 5,
        },
    }
    print(f"targets: {data['targets']}\n")
    write_results("throughput", data, smoke=smoke)
    return data


if __name__ == "__main__":
    asyncio.run(run())
