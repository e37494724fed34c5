"""`python -m bench.versus.bridge_side`: Bridge's side, in process on SQLite, the model over HTTP.

The same Bridge as `bench/http_throughput.py`'s, logging as `bridge run` does (INFO, to stderr, which
the comparison reads); the answer a turn waits for is its reply as handed to the adapter.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from bench.http_throughput import settings_for
from bench.throughput import NullSender
from bench.versus.loop import arguments, closed_loop, report
from bridge.app import Bridge
from bridge.events import Inbound, Outbound
from bridge.logs import setup_logging


@dataclass
class ReplyKeeper(NullSender):
    """Keeps each chat's latest reply, so a turn can return what it answered."""

    replies: dict[str, str] = field(default_factory=dict)

    async def send(self, item: Outbound) -> str | None:
        if item.kind == "reply":
            self.replies[item.route.chat_id] = item.text
        return await super().send(item)


async def main() -> None:
    args = arguments(__doc__ or "")
    settings = settings_for(Path(args.folder), args.model, args.chats)
    # A line per finished run, as nanobot's side writes its own: neither runs with its log off.
    setup_logging(settings)
    async with Bridge(settings) as bridge:
        sender = ReplyKeeper()
        bridge.add_sender(sender)

        async def turn(chat: int, number: int) -> str:
            text = f"c{chat} t{number}"
            done = await bridge.handle(
                Inbound("bench", "dm", f"c{chat}", f"u{chat}", text, message_id=str(number))
            )
            assert done is not None
            await done
            return sender.replies.pop(f"c{chat}", "")

        await turn(-1, 0)  # lazy imports and the first connection, not counted
        report(await closed_loop("bridge", turn, args.chats, args.warm, args.window))


if __name__ == "__main__":
    asyncio.run(main())
