"""The fake Bot API with sends and edits that take a random moment, so a kill can land mid-send."""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Callable, Mapping
from typing import Any

from devkit.fakes.telegram_api import FakeTelegram

SLOWED = ("sendmessage", "editmessagetext")


class SlowTelegram(FakeTelegram):
    """FakeTelegram whose sendMessage and editMessageText wait up to `max_delay_s`, part before the
    message is recorded and part after (the answer lost in flight), and count what is in flight.

    Like Telegram, a request whose client was killed meanwhile still completes: aiohttp does not cancel
    the handler, so the message is recorded and the bot never hears of it.
    """

    def __init__(self, rng: random.Random, max_delay_s: float = 0.25) -> None:
        super().__init__()
        self.rng = rng
        self.max_delay_s = max_delay_s
        self.in_flight: dict[str, int] = dict.fromkeys(SLOWED, 0)

    def _handlers(self) -> Mapping[str, Callable[[dict[str, Any]], Any]]:
        handlers = dict(super()._handlers())
        for method in SLOWED:
            handlers[method] = self._slowed(method, handlers[method])
        return handlers

    def _slowed(self, method: str, handler: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
        async def slowed(params: dict[str, Any]) -> Any:
            delay = self.rng.uniform(0, self.max_delay_s)
            before = self.rng.uniform(0, delay)
            self.in_flight[method] += 1
            try:
                await asyncio.sleep(before)
                result = handler(params)
                if inspect.isawaitable(result):
                    result = await result
                await asyncio.sleep(delay - before)
                return result
            finally:
                self.in_flight[method] -= 1

        return slowed
