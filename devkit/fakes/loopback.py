"""The lifecycle every fake server shares: an aiohttp app on 127.0.0.1, a random port, async with."""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import Callable
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
        self._changed = asyncio.Event()

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def describe_state(self) -> str:
        """What a failed wait_for reports about the fake (recent traffic); subclasses fill it in."""
        return ""

    def _notify(self) -> None:
        """Wake every wait_for: something a predicate may look at has changed."""
        self._changed.set()
        self._changed = asyncio.Event()

    # The timeout parameter is the documented API that tests call; it bounds an internal wait.
    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Return once predicate() is true, re-checked whenever the fake notes a change."""
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(
                f"{type(self).__name__}: {_describe(predicate)} still false after {timeout} s; "
                f"{self.describe_state()}"
            ) from None

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


def _describe(predicate: Callable[[], bool]) -> str:
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return getattr(predicate, "__qualname__", repr(predicate))


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: bound, then closed, so connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
