"""The composition root: builds Bridge from Settings, runs it, shuts it down."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from types import TracebackType
from typing import TYPE_CHECKING, Any

from bridge.agent.compaction import Compactor
from bridge.agent.runner import AgentRunner
from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.errors import ConfigError
from bridge.events import Inbound
from bridge.gateway.a2a import AgentToAgent
from bridge.gateway.access import AccessPolicy, Admission
from bridge.gateway.commands import Commands
from bridge.gateway.delivery import Delivery
from bridge.gateway.dispatcher import Dispatcher, DispatchServices
from bridge.gateway.files_out import FileOut
from bridge.gateway.lanes import Lanes
from bridge.gateway.pairing import Pairing
from bridge.gateway.policy import PolicyGate, SendPolicy
from bridge.gateway.presence import Presence
from bridge.gateway.subagents import SubAgents
from bridge.jobs.headless import Headless
from bridge.jobs.hooks import HookService
from bridge.jobs.tasks import TaskService
from bridge.live import LiveEvents
from bridge.llm.base import Provider
from bridge.llm.factory import build_provider
from bridge.llm.profiles import Profiles, with_tool_mode
from bridge.logs import redactor
from bridge.media.intake import MediaIntake
from bridge.metrics import Metrics
from bridge.platform import Sender
from bridge.sessions.service import SessionService
from bridge.store.backends import store_for
from bridge.store.base import SessionRow
from bridge.store.postgres import PostgresEngine, PostgresStore
from bridge.store.sessions import new_id
from bridge.tools.base import ToolGroup
from bridge.tools.builtin.exec import sandbox_problem

if TYPE_CHECKING:
    from bridge.gateway.sharing import WorkShare
    from bridge.store.postgres.leases import PgLeases

log = logging.getLogger(__name__)

ADAPTER_GROUP = "bridge.adapters"


def load_adapter_class(name: str) -> Any:
    """An adapter class by its entry-point name, so third-party packages can add platforms."""
    found = entry_points(group=ADAPTER_GROUP, name=name)
    if not found:
        available = ", ".join(sorted(ep.name for ep in entry_points(group=ADAPTER_GROUP))) or "none"
        raise ConfigError(f"no adapter named {name!r} is installed (installed: {available})")
    return next(iter(found)).load()


class Bridge:
    """Everything one running bot needs, wired together; use `async with Bridge(settings)`."""

    def __init__(
        self,
        settings: Settings,
        *,
        provider: Provider | None = None,
        extra_owners: Iterable[str] = (),
        extra_groups: tuple[ToolGroup, ...] = (),
        standby: asyncio.Event | None = None,
        on_claim_lost: Callable[[], object] | None = None,
    ) -> None:
        self.settings = settings
        # `bridge run`'s stop event: with it, a database another process holds is waited for.
        self._standby = standby
        # False while another process answers on the database (and for good, if stopped meanwhile).
        self.claimed = False
        # Called if this process can no longer show that it holds the database (see watch_claim), or
        # a platform connection or its leases, where workers share the runs.
        self._on_claim_lost = on_claim_lost
        # Tasks that live as long as the bot (watching platform connections); cancelled at stop.
        self.background: set[asyncio.Task[None]] = set()
        self._watching: asyncio.Task[None] | None = None
        # This worker's part in sharing the runs with others on one PostgreSQL database (bridge run).
        self.share: WorkShare | None = None
        # The newest outbox row when this process began: recover() sends only what a crash left open.
        self._left_over: int | None = None
        self._unanswered_upto: int | None = None
        self.leases: PgLeases | None = None
        # Built first: a bad manifest or tool name fails before any file or socket is opened.
        self.registry = build_registry(settings, extra_groups)
        worker_id = new_id()
        self.store = store_for(settings.storage, worker_id=worker_id)
        # This process's row in the workers table (bridge status), and its watch on the others'.
        self.presence = Presence(
            self.store, worker_id, silent_after_s=settings.storage.silent_worker_timeout_s
        )
        # The default profile ([llm], or the provider a test injected); /model picks another per chat.
        self.provider = with_tool_mode(settings.llm, provider or build_provider(settings.llm), self.registry)
        self.profiles = Profiles(settings.llm, self.registry, self.provider)
        owners = frozenset([*settings.owners, *extra_owners])
        self.sessions = SessionService(self.store, owners)
        self.lanes = Lanes(settings.runs.max_concurrent_runs)
        self.policy = SendPolicy(settings.session.send_policy)
        self.gate = PolicyGate(self.policy, self.store)
        self.delivery = Delivery(self.gate, self.store, resend_uncertain=settings.delivery.resend_uncertain)
        self.presence.surfaces = self.delivery.surfaces
        # DM pairing: codes for strangers, and the people owners approved (the dashboard calls it too).
        self.pairing = Pairing(self.store, delivery=self.delivery)
        self.access = AccessPolicy.from_settings(settings, owners, paired=self.pairing.is_paired)
        self.runner = AgentRunner(settings, self.store, self.registry, self.provider, self.profiles)
        # One idea of who the owners are for every run's authority (the console's included).
        self.authorities = self.runner.authorities = self.sessions.authorities
        self.a2a = AgentToAgent(settings, self.store, self.runner, self.lanes, self.delivery, self.gate)
        self.runner.messenger = self.a2a
        # spawn_agent's children: runs of their own in lanes of their own.
        self.subagents = SubAgents(settings, self.store, self.runner, self.lanes, self.delivery)
        self.runner.spawner = self.subagents
        # Runs nobody typed: scheduled tasks (the scheduled_tasks tools make them) and webhook events
        # (POST /hooks/<name>); their loops start once recover() ran.
        self.headless = Headless(self.store, self.runner, self.lanes, self.delivery)
        self.tasks = TaskService(settings, self.store, self.headless)
        self.hooks = HookService(settings, self.store, self.headless)
        self.tasks.authorities = self.hooks.authorities = self.authorities
        self.runner.tasks = self.tasks
        self.metrics = Metrics()
        self.runner.metrics = self.tasks.metrics = self.hooks.metrics = self.metrics
        self.live = LiveEvents()
        self.runner.live = self.delivery.courier.live = self.live
        self.metrics.watch(self.lanes.running, self.lanes.depth)
        self.compactor = Compactor(settings, self.store, self._provider_for, redactor(settings))
        self.commands = Commands(
            settings,
            self.store,
            self.sessions,
            self.lanes,
            self.registry,
            self.gate,
            self.pairing,
            tasks=self.tasks,
            agents=self.runner.agents,
        )
        self.commands.stop_children = self.subagents.stop_children
        # Attachments users send: kept by content beside the database, voice sent to [stt].
        self.media = MediaIntake(settings, self.store, self.runner.blobs)
        self.media.metrics = self.metrics
        self.runner.files = FileOut(self.delivery, self.runner.blobs)
        self.dispatcher = Dispatcher(
            DispatchServices(
                sessions=self.sessions,
                runner=self.runner,
                delivery=self.delivery,
                lanes=self.lanes,
                commands=self.commands,
                admission=Admission(self.access, self.pairing),
                gate=self.gate,
                compactor=self.compactor,
                live=self.live,
                media=self.media,
            ),
            settings.runs,
        )

    def on_claim_lost(self) -> None:
        if self._on_claim_lost is not None:
            self._on_claim_lost()

    def _provider_for(self, session: SessionRow) -> Provider:
        """The model a session's compaction asks: the one its turns run on (/model, else its agent's)."""
        return self.profiles.get(self.runner.agents.model_profile(session))

    def apply_live_settings(self, settings: Settings) -> None:
        """Take the live-reloadable parts of a reloaded config: send policy, access lists and agents."""
        self.policy.update(settings.session.send_policy)
        self.runner.agents.update(settings.agents)
        self.access.update(settings)

    def add_sender(self, sender: Sender) -> None:
        self.delivery.register(sender)

    async def handle(self, inbound: Inbound) -> Any:
        return await self.dispatcher.handle(inbound)

    @property
    def shared(self) -> bool:
        """Whether this worker shares the runs with others: `bridge run` on PostgreSQL."""
        return self._standby is not None and isinstance(self.store, PostgresStore)

    async def start(self) -> None:
        if self.settings.tools.exec.enabled and (
            problem := await asyncio.to_thread(sandbox_problem, self.settings.tools.exec)
        ):
            # The bot runs without it (the tools fail closed); this is the operator's one notice.
            log.warning(
                "tools.exec is enabled but commands cannot run: %s; run_command and run_python "
                "refuse every call until that is fixed",
                problem,
            )
        await self.store.open()
        try:
            await self.pairing.load()
            if self.shared:
                await self._open_leases()
            await self.presence.start()
            self.claimed = await self.store.claim_worker(standby=self._standby, shared=self.shared)
            if not self.claimed:
                return
            if self.shared:
                await self._start_sharing()
                return
            await self.presence.update("active", "runs, outbox")
            # Runs a crash cut short are closed, and their notices queued in the same transaction: a
            # second crash before they go out cannot lose them. recover() sends them.
            await self.store.abort_interrupted_runs(self.dispatcher.interrupted_notices)
            # What recover() is to send: the rows open now. Rows written after this are the live
            # traffic's, already on their way (the adapters listen before recover() runs).
            self._left_over = await self.store.last_outbox_id()
            # Likewise for resume(): messages stored from here on are answered by the live path.
            self._unanswered_upto = await self.store.last_message_id()
            if self.settings.runs.keep_traces:
                await self.store.prune_traces(self.settings.runs.keep_traces)
            # Last: a start that fails above must not leave a watcher that would end the process.
            if self._on_claim_lost is not None:
                self._watching = asyncio.create_task(
                    self.store.watch_claim(self._on_claim_lost), name="watch-claim"
                )
        except BaseException:
            # An open connection's thread would keep the process alive after the error.
            await self.presence.stop()
            if self.leases is not None:
                await self.leases.close()
            await self.store.close()
            raise

    async def _start_sharing(self) -> None:
        """Join the workers on the database: this one's runs and rows carry its id (see sharing.py).
        What dead workers left is taken over by the share's sweep, not aborted wholesale: other
        workers' runs are in progress."""
        from bridge.gateway.sharing import WorkShare

        assert isinstance(self.store, PostgresStore) and self.leases is not None
        worker = self.presence.id
        self.store.worker_id = self.delivery.worker_id = worker
        self.presence.sole = False
        await self.presence.update("active", "runs")
        self.share = WorkShare(
            self.store,
            self.leases,
            self.dispatcher,
            self.delivery,
            self.lanes,
            worker_id=worker,
            max_runs=self.settings.runs.max_concurrent_runs,
            followup=self.settings.runs.queue_mode == "followup",
            on_lost=self.on_claim_lost,
        )
        # Wired before any adapter listens: a message stored here from the first one on is queued for
        # all workers, never run in this worker's lanes without the chat's lease.
        self.dispatcher.share = self.share
        self.commands.stop_elsewhere = self.share.stop_elsewhere
        self.a2a.share = self.share
        if self._on_claim_lost is not None:
            self._watching = asyncio.create_task(
                self.store.watch_claim(self._on_claim_lost, shared=True), name="watch-claim"
            )

    async def _open_leases(self) -> None:
        """This worker's lease connection, holding its own lock before its row is listed: another
        worker that finds the row but not the lock knows it is dead."""
        from bridge.store.intake import worker_lease
        from bridge.store.postgres.leases import PgLeases

        engine = self.store.engine
        assert isinstance(engine, PostgresEngine)
        self.leases = PgLeases(engine.url, engine.label, application_name=f"bridge-{self.presence.id}")
        await self.leases.open()
        await self.leases.lock(worker_lease(self.presence.id))

    async def recover(self) -> None:
        """Once the adapters are up: deliver what a crash left unsent (answers, then the news of runs it
        cut short), then answer messages that were stored but never taken up by a run."""
        if self.share is not None:
            # Sharing: the share's sweep and claims do both, for this worker's share of the work.
            await self.share.start()
            # Each due time and each event is claimed by one conditional update, so every worker may
            # run the loops.
            await self.tasks.start(alone=False)
            await self.hooks.start(alone=False)
            return
        # Queued first, so in each chat they go before anything the resumed answers send.
        undelivered = await self.delivery.recover(upto=self._left_over)
        await self.dispatcher.resume(upto=self._unanswered_upto)
        await asyncio.gather(*undelivered, return_exceptions=True)
        await self.tasks.start(alone=True)
        await self.hooks.start(alone=True)

    async def shutdown(self) -> None:
        """Take no new work; let answers in progress finish and be delivered for up to the grace period.

        Messages still waiting behind them stay stored, and the next start answers them. What is
        still running after the grace period is stopped, and its chat told (see Dispatcher._run);
        what the courier could not send by then stays in the outbox for the next start.
        """
        self.dispatcher.closing = True
        if self.shared:
            await self.presence.taking_nothing()
        # No task fires and no webhook event starts from now on; runs already going stay in the
        # lanes' grace period below (events still pending run at the next start).
        await self.tasks.halt()
        await self.hooks.halt()
        grace = self.settings.runs.shutdown_grace_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        dropped = self.lanes.drop_queued()
        if dropped:
            log.info("shutdown: %d waiting message(s) stay stored for the next start", dropped)
        try:
            await asyncio.wait_for(
                asyncio.gather(self.lanes.idle(), self.a2a.idle(), self.subagents.idle()), grace
            )
        except TimeoutError:
            log.warning("shutdown: answers still running after %g s are being stopped", grace)
        await self.a2a.close()
        await self.subagents.close()
        await self.lanes.close()
        # A compaction under way is only a head start on the next one: stopped, it has written nothing.
        await self.compactor.close()
        # The notices of stopped answers, and replies still queued, get what is left of the grace
        # period (at least a moment); the rest is sent at the next start.
        try:
            await asyncio.wait_for(self.delivery.idle(), max(deadline - loop.time(), 1.0))
        except TimeoutError:
            log.warning("shutdown: messages not yet sent stay in the outbox for the next start")
        await self.delivery.close()

    async def stop(self) -> None:
        """Finish nothing new: cancel runs in flight, then close the model client and the store."""
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        if self._watching is not None:
            self._watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watching
        await self.tasks.stop()
        await self.hooks.stop()
        await self.a2a.close()
        await self.subagents.close()
        await self.lanes.close()
        await self.compactor.close()
        await self.delivery.close()
        # After the runs: MCP servers' connections close, and every stdio server's process ends.
        await self.registry.aclose()
        if self.share is not None:
            await self.share.stop()
        await self.profiles.aclose()
        await self.media.aclose()
        await self.presence.stop()
        if self.leases is not None:
            await self.leases.close()
        await self.store.close()

    async def __aenter__(self) -> Bridge:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
