"""The lifecycle every fake server shares: an aiohttp app on 127.0.0.1, a random port, async with."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Self

from aiohttp import web


class LoopbackServer:
    """Subclasses build their routes in `routes(app)` and read `self.origin` once started."""

    def __init__(self) -> None:
        self.origin = ""
        # Set on stop(), so handlers that wait (delays, long polls) end instead of holding shutdown up.
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.origin = f"http://{host}:{port}"

    async def stop(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
