"""The core's guard around every adapter: the lifecycle in adapters/base.py, enforced, not just written."""

from __future__ import annotations

from typing import Any, Literal

from bridge.errors import AdapterLifecycleError
from bridge.events import InboundHandler, Outbound, Route

State = Literal["new", "sending", "starting", "running", "stopped"]


class GuardedAdapter:
    """Wraps an adapter so it is used in order: start once, then send, edit and type, then stop.

    Out of order (start twice, start after stop, send before start or after stop) raises
    AdapterLifecycleError before the adapter is touched, so a bug in the core or a plugin shows up as
    one clear error rather than as a half-started client or a send on a closed connection. `stop` is
    idempotent, and a no-op before start. Every other attribute (text_limit, split, dedupes_by_nonce,
    min_edit_interval_s, wait_closed...) is the adapter's own; one it lacks stays missing, because the
    core looks the optional ones up with getattr.
    """

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.state: State = "new"
        # Copied, not delegated: the core reads them on every send, and they never change.
        self.surface: str = adapter.surface
        self.supports_edit: bool = adapter.supports_edit

    def __getattr__(self, name: str) -> Any:
        # Only called for names this class lacks: the adapter's optional hooks and its own helpers.
        return getattr(self.adapter, name)

    def __repr__(self) -> str:
        return f"<GuardedAdapter {self.surface} {self.state}>"

    async def start_sending(self) -> None:
        """Connect for sending only (the optional hook; see adapters/base.py); start may follow."""
        if self.state != "new":
            raise AdapterLifecycleError(f"the {self.surface} adapter cannot connect: it is {self.state}")
        self.state = "starting"
        try:
            await self.adapter.start_sending()
        except BaseException:
            self.state = "stopped"
            raise
        self.state = "sending"

    def share_intake(self) -> None:
        """Tell the adapter that other workers listen beside it (the optional `shared_intake`)."""
        if hasattr(self.adapter, "shared_intake"):
            self.adapter.shared_intake = True

    def offer_http_routes(self, routes: list[tuple[str, str, Any]]) -> bool:
        """Ask the adapter to serve these routes on its own HTTP server, where it has one (the optional
        `http_routes`); whether it takes them."""
        if not hasattr(self.adapter, "http_routes"):
            return False
        self.adapter.http_routes = list(routes)
        return True

    def can_start_sending(self) -> bool:
        return callable(getattr(self.adapter, "start_sending", None))

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
        result: str | None = await self.adapter.send(item)
        return result

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        self._running("edit")
        await self.adapter.edit(route, message_id, text)

    async def typing(self, route: Route) -> None:
        self._running("typing")
        await self.adapter.typing(route)

    def _running(self, what: str) -> None:
        # While it starts, an adapter may already deliver messages whose answers go out at once.
        if self.state not in ("sending", "starting", "running"):
            when = "before start" if self.state == "new" else "after stop"
            raise AdapterLifecycleError(f"{what} on the {self.surface} adapter {when}")
