"""The core's guard around every adapter: the lifecycle in adapters/base.py, enforced, not just written."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from bridge.errors import AdapterLifecycleError, Unsupported
from bridge.events import InboundHandler, Outbound, Route
from bridge.platform import Adapter, HttpRoute, Sender

if TYPE_CHECKING:
    from bridge.events import Attachment

State = Literal["new", "sending", "starting", "running", "stopped"]


class GuardedAdapter(Sender):
    """Wraps an adapter so it is used in order: start once, then send, edit and type, then stop.

    Out of order (start twice, start after stop, send before start or after stop) raises
    AdapterLifecycleError before the adapter is touched, so a bug in the core or a plugin shows up as
    one clear error rather than as a half-started client or a send on a closed connection. `stop` is
    idempotent, and a no-op before start. The guard is itself a Sender: it carries the adapter's
    capabilities and forwards each operation of the contract (bridge.platform) by name, typed; what
    else an adapter has is reached through `adapter`.
    """

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.state: State = "new"
        # Copied, not delegated: the core reads them on every send, and an adapter's capabilities
        # are settled once it is built (a test's rig tunes the adapter before it is wrapped).
        self.surface = adapter.surface
        self.supports_edit = adapter.supports_edit
        self.text_limit = adapter.text_limit
        self.min_edit_interval_s = adapter.min_edit_interval_s
        self.dedupes_by_nonce = adapter.dedupes_by_nonce
        self.streams_drafts = adapter.streams_drafts
        self.supports_stream = adapter.supports_stream
        self.max_upload_bytes = adapter.max_upload_bytes
        self.max_photo_bytes = adapter.max_photo_bytes

    def __repr__(self) -> str:
        return f"<GuardedAdapter {self.surface} {self.state}>"

    async def start_sending(self) -> None:
        """Connect for sending only (see Adapter.start_sending); start may follow. Unsupported, with
        the adapter left as it was, where the adapter cannot send without listening."""
        if self.state != "new":
            raise AdapterLifecycleError(f"the {self.surface} adapter cannot connect: it is {self.state}")
        self.state = "starting"
        try:
            await self.adapter.start_sending()
        except Unsupported:
            self.state = "new"
            raise
        except BaseException:
            self.state = "stopped"
            raise
        self.state = "sending"

    def share_intake(self) -> None:
        """Tell the adapter that other workers listen beside it (Adapter.shared_intake)."""
        self.adapter.shared_intake = True

    def offer_http_routes(self, routes: list[HttpRoute]) -> bool:
        """Ask the adapter to serve these routes on its own HTTP server, where it has one
        (Adapter.http_routes); whether it takes them."""
        if self.adapter.http_routes is None:
            return False
        self.adapter.http_routes = list(routes)
        return True

    async def start(self, handler: InboundHandler) -> None:
        if self.state not in ("new", "sending"):
            raise AdapterLifecycleError(f"the {self.surface} adapter cannot start: it is {self.state}")
        self.state = "starting"
        try:
            await self.adapter.start(handler)
        except BaseException:
            # A failed start cleans up after itself (the protocol asks it to); the adapter is done.
            self.state = "stopped"
            raise
        self.state = "running"

    async def stop(self) -> None:
        if self.state in ("new", "stopped"):
            self.state = "stopped"
            return
        self.state = "stopped"
        await self.adapter.stop()

    async def send(self, item: Outbound) -> str | None:
        self._running("send")
        return await self.adapter.send(item)

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        self._running("edit")
        await self.adapter.edit(route, message_id, text)

    async def typing(self, route: Route) -> None:
        self._running("typing")
        await self.adapter.typing(route)

    def split(self, kind: str, text: str) -> list[str]:
        return self.adapter.split(kind, text)

    async def edit_reply(self, route: Route, message_id: str, text: str) -> None:
        self._running("edit")
        await self.adapter.edit_reply(route, message_id, text)

    async def stream(self, route: Route, delta: str) -> None:
        self._running("stream")
        await self.adapter.stream(route, delta)

    async def send_file(self, item: Outbound) -> str | None:
        self._running("send_file")
        return await self.adapter.send_file(item)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        self._running("download")
        return await self.adapter.download(attachment, max_bytes)

    def _running(self, what: str) -> None:
        # While it starts, an adapter may already deliver messages whose answers go out at once.
        if self.state not in ("sending", "starting", "running"):
            when = "before start" if self.state == "new" else "after stop"
            raise AdapterLifecycleError(f"{what} on the {self.surface} adapter {when}")
