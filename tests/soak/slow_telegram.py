"""The fake Bot API with sends and edits that take a random moment, so a kill can land mid-send."""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import telegram_run_config
from tests.soak.side import FRIEND, GROUP_1, GROUP_2, OWNER, Chat

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


@dataclass
class TelegramSide:
    """The soak's seam (tests.soak.side.Side) on the fake Bot API: chats are Telegram's own ids."""

    tg: SlowTelegram
    surface: str = "telegram"
    doubles_allowed: bool = True  # sendMessage has no idempotency key
    media: bool = True

    def config(self, tmp_path: Path, llm_url: str, extra: str) -> Path:
        access = (
            f'allowed_users = ["{FRIEND}"]\n'
            f'allowed_chats = ["{GROUP_1}", "{GROUP_2}"]\n'
            "require_mention = false\n"
        )
        return telegram_run_config(tmp_path, OWNER, self.tg.token, self.tg.api_base, llm_url, access + extra)

    def chat_key(self, chat_id: int) -> str:
        return str(chat_id)

    def push(self, chat: Chat, sender: int, words: str | None, **media: Any) -> str:
        if chat.group:
            sent = self.tg.group(chat.chat_id, sender, words, chat_title=f"soak {chat.label}", **media)
        else:
            sent = self.tg.dm(chat.chat_id, words, **media)
        return str(sent["message_id"])

    def sends_in_flight(self) -> int:
        return self.tg.in_flight["sendmessage"]

    def requests_in_flight(self) -> int:
        return sum(self.tg.in_flight.values())

    def unconfirmed(self) -> list[str]:
        return [str(u["update_id"]) for u in self.tg.pending_updates]

    def received(self) -> list[tuple[str, str]]:
        return [(str(m["chat_id"]), str(m["text"])) for m in self.tg.messages()]
