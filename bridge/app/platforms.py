"""Platform connections where workers share the runs: every worker sends, one at a time listens."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from typing import TYPE_CHECKING

from bridge.config import Settings
from bridge.errors import StoreError, Unsupported
from bridge.store.claims import STANDBY_POLL_S

if TYPE_CHECKING:
    from bridge.app.root import Bridge
    from bridge.gateway.lifecycle import GuardedAdapter

log = logging.getLogger("bridge")


def holding(name: str, settings: Settings) -> str:
    """What a running platform holds, for `bridge status`: its connection."""
    if name == "telegram":
        return f"telegram {settings.telegram.mode}"
    connections = {"discord": "discord gateway", "slack": "slack socket mode", "matrix": "matrix sync"}
    return connections.get(name, name)


def exclusive(name: str, settings: Settings) -> bool:
    """Whether one connection at a time may listen: Telegram polling (a second poller gets Conflict),
    a Discord gateway (two would both receive every message), Slack's Socket Mode (Slack would
    spread an app's events over several connections, and one keeps a chat's in their order) and
    Matrix's /sync (two would both answer every message). A Telegram
    webhook is answered by every worker: the platform message id makes a request two workers took
    stored once."""
    if name == "telegram":
        return settings.telegram.mode != "webhook"
    return name != "console"


def platform_lock(name: str, settings: Settings) -> str:
    """The lock of one platform connection: per token, so two bots on one database are two locks."""
    section = getattr(settings, name, None)
    # Slack's connection belongs to its app: the app-level token names it. Matrix's /sync belongs to
    # the bot's account, whichever token or password it logs in with.
    token = getattr(section, {"slack": "app_token", "matrix": "user_id"}.get(name, "token"), None)
    secret = token.get_secret_value() if token is not None and hasattr(token, "get_secret_value") else ""
    if isinstance(token, str):
        secret = token
    return f"bridge.platform:{name}:{hashlib.sha256(secret.encode()).hexdigest()[:16]}"


async def start_shared(
    bridge: Bridge,
    adapters: list[GuardedAdapter],
    names: list[str],
    settings: Settings,
    stop: asyncio.Event,
    started: list[GuardedAdapter],
) -> list[asyncio.Task[None]]:
    """Connect every adapter for sending; listen where this worker may (now, or once the worker that
    listens ends). Returns the tasks that wait for a connection another worker holds."""
    waiting: list[asyncio.Task[None]] = []
    listening: list[str] = []
    for adapter, name in zip(adapters, names, strict=True):
        if not exclusive(name, settings):
            adapter.share_intake()
            bridge.add_sender(adapter)
            await adapter.start(bridge.handle)
            started.append(adapter)
            listening.append(holding(name, settings))
            continue
        try:
            await adapter.start_sending()
        except Unsupported:
            pass  # it cannot send without listening: its chats are answered by the worker that listens
        else:
            bridge.add_sender(adapter)
            started.append(adapter)
        lock = platform_lock(name, settings)
        what = f"the {holding(name, settings)} connection"
        # Listening at once is safe only where no other worker could be listening: a worker cut off
        # from the database has lost the lock but polls until it sees that (bridge.store.claims).
        # Otherwise this worker takes the lock as a standby does, grace included, in the background.
        if await _alone(bridge) and await bridge.store.engine.claim(lock):
            await _listen(bridge, adapter, lock, started)
            listening.append(holding(name, settings))
        else:
            waiting.append(
                asyncio.create_task(
                    _take_over(bridge, adapter, name, lock, what, stop, started), name=f"wait:{name}"
                )
            )
    log.info("running: %s", ", ".join(names))
    await bridge.presence.update("active", ", ".join(["runs", *listening]))
    return waiting


async def _take_over(
    bridge: Bridge,
    adapter: GuardedAdapter,
    name: str,
    lock: str,
    what: str,
    stop: asyncio.Event,
    started: list[GuardedAdapter],
) -> None:
    """Stand by for a connection another worker listens on, and listen once it has ended."""
    while True:
        try:
            claimed = await bridge.store.claim_worker(standby=stop, name=lock, what=what, fresh_grace=True)
            break
        except StoreError as exc:
            # The database is out of reach (a restart): standing by is still this worker's job, or
            # the platform would go unread once the worker that listens ends.
            log.warning("cannot reach the database to stand by for %s (%s); trying again", what, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), STANDBY_POLL_S)
            if stop.is_set():
                return
    if not claimed:
        return
    try:
        await _listen(bridge, adapter, lock, started)
    except Exception:
        # Holding the connection's lock without listening would leave the platform unread: stop, so
        # that another worker (or this one, restarted) takes it over.
        log.exception("could not take over %s; stopping", what)
        bridge.on_claim_lost()
        return
    holds = bridge.presence.holds
    await bridge.presence.update("active", f"{holds}, {holding(name, bridge.settings)}")


async def _alone(bridge: Bridge) -> bool:
    """Whether no other worker is registered on the database. A worker's row is written before it
    claims anything and removed only after it stopped listening, or by the sweep of a worker that
    stays listed, once it died: with none, nobody can be listening; with one, it may be a listener
    cut off from the database, still polling until it sees that."""
    try:
        workers = await bridge.store.workers()
    except StoreError as exc:
        log.warning("cannot list the other workers (%s); waiting as if one were listening", exc)
        return False
    return all(row.id == bridge.presence.id for row in workers)


async def _listen(bridge: Bridge, adapter: GuardedAdapter, lock: str, started: list[GuardedAdapter]) -> None:
    if adapter not in started:
        # An adapter that cannot send without listening answers its chats from this worker only.
        bridge.add_sender(adapter)
        started.append(adapter)
    await adapter.start(bridge.handle)
    # Checked like the database's claim: a worker that cannot show it still holds the connection
    # stops at once, so the one taking over never listens beside it.
    task = asyncio.create_task(bridge.store.watch_claim(bridge.on_claim_lost, lock), name=f"watch:{lock}")
    bridge.background.add(task)
