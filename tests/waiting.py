"""Waiting in tests for something to become true, with a deadline, never a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
WAIT_S = 15.0


async def eventually(check: Callable[[], T | None], what: str, within: float = WAIT_S) -> T:
    """Poll `check` until it returns something truthy, and return that; AssertionError on timeout."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.05)


def stall(seconds: float) -> None:
    """The event loop does not run for `seconds`, as in a process frozen (SIGSTOP) and woken again.
    Called from a coroutine on purpose: it holds up the whole loop, which is the point."""
    time.sleep(seconds)
