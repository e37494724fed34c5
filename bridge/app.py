"""The composition root: builds Bridge from Settings, runs it, shuts it down."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from importlib.metadata import entry_points
from types import TracebackType
from typing import Any

from bridge.agent.runner import AgentRunner
from bridge.config import ConfigError, Settings
from bridge.events import Inbound, Sender
from bridge.gateway.a2a import AgentToAgent
from bridge.gateway.access import AccessPolicy
from bridge.gateway.commands import Commands
from bridge.gateway.delivery import Delivery
from bridge.gateway.dispatcher import Dispatcher
from bridge.gateway.lanes import Lanes
from bridge.gateway.policy import PolicyGate, SendPolicy
from bridge.llm.base import Provider
from bridge.llm.factory import build_provider
from bridge.llm.textmode import NativeModeProvider, TextModeProvider
from bridge.sessions.service import SessionService
from bridge.store.base import RunRow
from bridge.store.sqlite import SQLiteStore
from bridge.tools.base import ToolGroup
from bridge.tools.catalog import build_registry
from bridge.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

ADAPTER_GROUP = "bridge.adapters"


def load_adapter_class(name: str) -> Any:
    """An adapter class by its entry-point name, so third-party packages can add platforms."""
    found = entry_points(group=ADAPTER_GROUP, name=name)
    if not found:
        available = ", ".join(sorted(ep.name for ep in entry_points(group=ADAPTER_GROUP))) or "none"
        raise ConfigError(f"no adapter named {name!r} is installed (installed: {available})")
    return next(iter(found)).load()


def with_tool_mode(settings: Settings, provider: Provider, registry: ToolRegistry) -> Provider:
    """The provider as the runner uses it: the strict text protocol in text mode; in native mode, calls a
    server left in the text are still recognised."""

    def known(name: str) -> bool:
        return registry.get(name) is not None

    if settings.llm.tool_mode == "text":
        return TextModeProvider(provider, known=known, result_role=settings.llm.text_result_role)
    return NativeModeProvider(provider, known=known)


class Bridge:
    """Everything one running bot needs, wired together; use `async with Bridge(settings)`."""

    def __init__(
        self,
        settings: Settings,
        *,
        provider: Provider | None = None,
        extra_owners: Iterable[str] = (),
        extra_groups: tuple[ToolGroup, ...] = (),
    ) -> None:
        self.settings = settings
        self.interrupted: list[RunRow] = []
        # Built first: a bad manifest or tool name fails before any file or socket is opened.
        self.registry = build_registry(settings, extra_groups)
        self.store = SQLiteStore(settings.storage.path)
        self.provider = with_tool_mode(settings, provider or build_provider(settings.llm), self.registry)
        owners = frozenset([*settings.owners, *extra_owners])
        self.sessions = SessionService(self.store, owners)
        self.access = AccessPolicy.from_settings(settings, owners)
        self.lanes = Lanes(settings.runs.max_concurrent_runs)
        self.policy = SendPolicy(settings.session.send_policy)
        self.gate = PolicyGate(self.policy, self.store)
        self.delivery = Delivery(self.gate, self.store)
        self.runner = AgentRunner(settings, self.store, self.registry, self.provider)
        self.a2a = AgentToAgent(settings, self.store, self.runner, self.lanes, self.delivery, self.gate)
        self.runner.messenger = self.a2a
        self.commands = Commands(settings, self.store, self.sessions, self.lanes, self.registry, self.gate)
        self.dispatcher = Dispatcher(
            self.sessions,
            self.runner,
            self.delivery,
            self.lanes,
            self.commands,
            self.access,
            self.gate,
            settings.runs,
        )

    def apply_live_settings(self, settings: Settings) -> None:
        """Take the live-reloadable parts of a reloaded config: send policy and access lists."""
        self.policy.update(settings.session.send_policy)
        self.access.update(settings)

    def add_sender(self, sender: Sender) -> None:
        self.delivery.register(sender)

    async def handle(self, inbound: Inbound) -> Any:
        return await self.dispatcher.handle(inbound)

    async def start(self) -> None:
        await self.store.open()
        try:
            # Runs a crash cut short: closed now, their chats told once the adapters are up (recover()).
            self.interrupted = await self.store.abort_interrupted_runs()
            if self.settings.runs.keep_traces:
                await self.store.prune_traces(self.settings.runs.keep_traces)
        except BaseException:
            # An open connection's thread would keep the process alive after the error.
            await self.store.close()
            raise

    async def recover(self) -> None:
        """After a crash: deliver what was left pending, and tell each chat whose answer was cut short."""
        # First what a crash left unsent (answers come before news of the interruption)...
        await self.delivery.deliver_pending()
        interrupted, self.interrupted = self.interrupted, []
        for run in interrupted:
            await self.dispatcher.tell_interrupted(run)

    async def shutdown(self) -> None:
        """Take no new work; let answers in progress finish for up to [runs] shutdown_grace_s.

        Adapters are still up meanwhile, so those answers are delivered. What is still running
        after the grace period is stopped by stop(), and its chat told (see Dispatcher._run).
        """
        self.dispatcher.closing = True
        grace = self.settings.runs.shutdown_grace_s
        try:
            await asyncio.wait_for(asyncio.gather(self.lanes.idle(), self.a2a.idle()), grace)
        except TimeoutError:
            log.warning("shutdown: answers still running after %g s are being stopped", grace)
        await self.a2a.close()
        await self.lanes.close()

    async def stop(self) -> None:
        """Finish nothing new: cancel runs in flight, then close the model client and the store."""
        await self.a2a.close()
        await self.lanes.close()
        await self.provider.aclose()
        await self.store.close()

    async def __aenter__(self) -> Bridge:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
