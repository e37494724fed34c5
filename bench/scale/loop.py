"""A closed loop of chats on the fake Telegram Bot API: each chat sends its next message as soon as the
answer to the last one arrives, so the load is what Bridge can take, not what the driver pushes."""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field
from typing import Any

from bench.common import percentile

# The instant model answers a turn "answer to <the user's text>" (devkit/instant_model.py).
REPLY = "answer to "
FIRST_USER = 5000


@dataclass
class Window:
    """What one measuring window saw: turns answered in it, and how long each took."""

    started: float
    turns: int = 0
    latencies: list[float] = field(default_factory=list)
    ended: float | None = None

    @property
    def seconds(self) -> float:
        return (self.ended or time.perf_counter()) - self.started

    def summary(self) -> dict[str, float]:
        return {
            "turns": self.turns,
            "seconds": round(self.seconds, 2),
            "turns_per_s": round(self.turns / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": round(percentile(self.latencies, 50) * 1000, 1),
            "p99_ms": round(percentile(self.latencies, 99) * 1000, 1),
        }


class ClosedLoop:
    """`chats` private chats on `tg`, each with one message in flight at a time.

    A turn is timed from the message's arrival in the fake's update queue to the reply sent back in
    that chat. Replies are seen through the fake's `on_sent` hook, so the next message goes out within
    the same loop pass rather than at a poll.
    """

    def __init__(self, tg: Any, chats: int, *, one_turn_each: int | None = None) -> None:
        """`one_turn_each`: instead, this many chats in all, each with one turn, `chats` of them at a
        time: an answer's next message comes from a chat not yet heard from (bench/idle_worker.py)."""
        self.tg = tg
        self.chats = range(FIRST_USER, FIRST_USER + chats)
        self._asked: dict[int, tuple[str, float]] = {}
        self._turn: dict[int, int] = collections.defaultdict(int)
        self._fresh = (
            None if one_turn_each is None else iter(range(FIRST_USER + chats, FIRST_USER + one_turn_each))
        )
        self.answered = 0
        self.window: Window | None = None
        self._progress = asyncio.Event()
        tg.on_sent = self._on_sent

    def start(self) -> None:
        for chat in self.chats:
            self._ask(chat)

    def stop(self) -> None:
        """No further messages: the answers still on their way are not followed up."""
        self.tg.on_sent = None

    def measure(self) -> Window:
        self.window = Window(time.perf_counter())
        return self.window

    async def until_answered(self, count: int, timeout: float) -> None:  # noqa: ASYNC109
        """Wait until `count` answers in all have come (every chat's first, say), or fail with how many."""
        async with asyncio.timeout(timeout):
            while self.answered < count:
                self._progress.clear()
                await self._progress.wait()

    def _ask(self, chat: int) -> None:
        text = f"turn {self._turn[chat]}"
        self._turn[chat] += 1
        self._asked[chat] = (REPLY + text, time.perf_counter())
        self.tg.dm(chat, text)

    def _on_sent(self, record: dict[str, Any]) -> None:
        asked = self._asked.get(record["chat_id"])
        if asked is None or record["text"] != asked[0]:
            return  # tool activity, or a chat not in the loop
        now = time.perf_counter()
        del self._asked[record["chat_id"]]
        self.answered += 1
        self._progress.set()
        window = self.window
        if window is not None and window.ended is None:
            window.turns += 1
            window.latencies.append(now - asked[1])
        if self._fresh is None:
            self._ask(record["chat_id"])
        elif (chat := next(self._fresh, None)) is not None:
            self._ask(chat)
