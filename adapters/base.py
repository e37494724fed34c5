"""The Adapter protocol: a Sender that can also start listening and stop."""

from __future__ import annotations

from typing import Protocol

from bridge.events import InboundHandler, Sender


class Adapter(Sender, Protocol):
    """A platform connection. `start` begins delivering Inbound events to the handler."""

    text_limit: int

    async def start(self, handler: InboundHandler) -> None: ...

    async def stop(self) -> None: ...
