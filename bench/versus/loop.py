"""The closed loop both sides run: N chats, each sending its next turn as soon as the last is answered.

Standard library and `bench.common` only (itself standard library only): nanobot's side imports it
from nanobot's own environment, where Bridge is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.common import percentile

# One turn of one chat: (chat, its turn number) -> the answer's text.
Turn = Callable[[int, int], Awaitable[str]]


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", required=True, help="the instant model's base URL")
    parser.add_argument("--chats", type=int, required=True)
    parser.add_argument("--warm", type=float, required=True, help="seconds run before the window opens")
    parser.add_argument("--window", type=float, required=True, help="seconds counted")
    parser.add_argument("--folder", required=True, help="an empty folder for the side's files")
    return parser.parse_args()


async def closed_loop(side: str, turn: Turn, chats: int, warm_s: float, window_s: float) -> dict[str, Any]:
    """Turns answered inside the window: per second, CPU per turn of this process (every thread), latency."""
    # Every chat's first turn is not counted on either side: it makes the session (nanobot's first
    # turns of 50 new chats take about 10 s, as long as a window), and steady chats are what is measured.
    first = await asyncio.gather(*(turn(n, 0) for n in range(chats)))
    assert first == [f"answer to c{n} t0" for n in range(chats)], first
    loop = asyncio.get_running_loop()
    opens = loop.time() + warm_s
    closes = opens + window_s
    latencies: list[float] = []
    cpu: list[float] = []

    async def chat(number: int) -> None:
        sent = 1
        while loop.time() < closes:
            began = loop.time()
            answer = await turn(number, sent)
            ended = loop.time()
            # A wrong answer would make a fast figure meaningless: the turn must have gone through the model.
            assert answer == f"answer to c{number} t{sent}", answer
            sent += 1
            # Counted by when it was answered: a slow side's turns may begin before the window opens.
            if opens <= ended <= closes:
                latencies.append(ended - began)

    async def clock() -> None:
        await asyncio.sleep(max(0.0, opens - loop.time()))
        cpu.append(time.process_time())
        await asyncio.sleep(max(0.0, closes - loop.time()))
        cpu.append(time.process_time())

    await asyncio.gather(clock(), *(chat(n) for n in range(chats)))
    turns = len(latencies)
    return {
        "side": side,
        "chats": chats,
        "window_s": window_s,
        "turns": turns,
        "turns_per_s": round(turns / window_s, 1),
        "cpu_ms_per_turn": round((cpu[1] - cpu[0]) * 1000 / max(turns, 1), 2),
        "turn_p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "turn_p99_ms": round(percentile(latencies, 99) * 1000, 1),
    }


def report(figures: dict[str, Any]) -> None:
    """The side's one line of output, which the comparison reads."""
    print("figures " + json.dumps(figures), flush=True)
