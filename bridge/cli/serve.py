"""`bridge run` and `bridge chat`: the bot on every enabled platform, or on this terminal.

Both build the app (bridge.app) only once called, so the other commands stay fast and work even if a
runtime dependency is broken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.cli.exits import EXIT_CONFIG, EXIT_RUNTIME
from bridge.config import Settings
from bridge.config.base import mask_url
from bridge.config.platforms import known_surfaces

if TYPE_CHECKING:
    from bridge.app import Bridge
    from bridge.http.server import AdminServer
    from bridge.localmodel import Running
    from bridge.reload import ConfigReloader


def _watch_config(bridge: Bridge, settings: Settings, path: Path | None) -> ConfigReloader:
    """Reload the send policy and access lists on file edits and on SIGHUP."""
    from bridge.reload import ConfigReloader

    reloader = ConfigReloader(path, settings, bridge.apply_live_settings)
    reloader.start()
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reloader.reload)
    return reloader


async def chat(settings: Settings, path: Path | None = None) -> int:
    # Imported here so `check-config` stays fast and works even if a runtime dependency is broken.
    from bridge.app.root import Bridge, load_adapter_class
    from bridge.gateway.lifecycle import GuardedAdapter

    # The guard is what the core sends through; the console's own calls (notice, wait_closed) and
    # its implicit owner are the adapter's.
    tty = load_adapter_class("console").from_settings(settings)
    console = GuardedAdapter(tty)
    # The reloader compares later edits with what the file said, not with the local model's
    # settings put in their place below, which would look like edits waiting for a restart.
    file_settings = settings
    local = None
    if settings.llm.base_url is None and not settings.llm.api_key.get_secret_value():
        from bridge.localmodel import LocalModel

        local = LocalModel().running()
        if local is None:
            print(
                "bridge: no model configured. Set [llm] base_url (any OpenAI-compatible server) and, if "
                "it needs one, [llm] api_key; or run `bridge local-model start` for a small local model "
                "that needs no key.",
                file=sys.stderr,
            )
            return EXIT_CONFIG
        settings = with_local_model(settings, local)
    async with Bridge(settings, extra_owners=tty.implicit_owners, on_claim_lost=_lost_database) as bridge:
        reloader = _watch_config(bridge, file_settings, path)
        bridge.add_sender(console)
        if local is not None:
            tty.notice(
                f"Using the local model {local.model} at {local.base_url} ({local.mode} tool calls), "
                "because no [llm] base_url is configured. `bridge local-model stop` stops it."
            )
        where = mask_url(settings.llm.base_url or "") or (
            "the Anthropic API" if settings.llm.provider == "anthropic" else "the OpenAI API"
        )
        tty.notice(
            f"Bridge chat: model {settings.llm.model} at {where}, session 'main'. "
            "Commands: /help, /status, /clear. End with Ctrl-D."
        )
        await console.start(bridge.handle)
        await bridge.recover()
        try:
            await tty.wait_closed()
        finally:
            await console.stop()
            await reloader.stop()
    return 0


def with_local_model(settings: Settings, local: Running) -> Settings:
    """Settings that talk to the local model: its context is small, so the history budget is too, and
    a run cut short asks for its answer in the shape small models answer (unless the file says)."""
    llm = settings.llm.model_copy(
        update={"base_url": local.base_url, "model": local.spec.alias, "tool_mode": local.mode}
    )
    loops = settings.agent.loops
    if "last_request" not in loops.model_fields_set:
        # Measured in docs/local-model.md: after "history", the 0.5B model copies its call out as the
        # answer; after "question", it answers.
        loops = loops.model_copy(update={"last_request": "question"})
    # 8k tokens of context, of which the system prompt and tools take about 2k: ~16k characters left.
    agent = settings.agent.model_copy(
        update={"history_max_chars": min(settings.agent.history_max_chars, 16_000), "loops": loops}
    )
    return settings.model_copy(update={"llm": llm, "agent": agent})


def enabled_platforms(settings: Settings) -> list[str]:
    """Config sections with `enabled = true` that name an adapter (its entry point); [admin] is not one."""
    adapters = set(known_surfaces())
    return [
        name
        for name in type(settings).model_fields
        if name in adapters and getattr(getattr(settings, name), "enabled", False) is True
    ]


# How long past [runs] shutdown_grace_s a stopping `bridge run` may take before it is ended regardless.
SHUTDOWN_MARGIN_S = 5.0


def _stop_on_signals(stop: asyncio.Event, grace_s: float) -> None:
    """SIGTERM or SIGINT sets `stop`; a second one, or the shutdown outlasting the grace period plus a
    margin, ends the process at once with status 0. The store needs no clean close for that: every
    write is one transaction, so the file is as after a kill -9, which the next start handles."""
    log = logging.getLogger("bridge")

    def force_exit(why: str) -> None:
        log.warning("%s: exiting now; what was not finished is picked up at the next start", why)
        logging.shutdown()
        os._exit(0)

    def on_signal(signum: int) -> None:
        if stop.is_set():
            force_exit(f"second {signal.Signals(signum).name}")
        log.info("%s: shutting down (send it again to exit at once)", signal.Signals(signum).name)
        stop.set()
        # A thread, not the event loop: a loop stuck in a busy run must not keep the process alive.
        watchdog = threading.Timer(
            grace_s + SHUTDOWN_MARGIN_S,
            force_exit,
            args=(f"shutdown took over {grace_s + SHUTDOWN_MARGIN_S:g} s",),
        )
        watchdog.daemon = True
        watchdog.start()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)


async def start_admin(
    bridge: Bridge, adapters: Sequence[Any], settings: Settings, path: Path | None, reloader: ConfigReloader
) -> AdminServer | None:
    """The admin server, listening, where [admin] enabled; None otherwise."""
    if not settings.admin.enabled:
        return None
    from bridge.http.server import AdminServer

    server = AdminServer(bridge, adapters, settings, config_path=path, reloader=reloader)
    await server.start()
    return server


async def run(settings: Settings, path: Path | None = None) -> int:
    from bridge.app.root import Bridge, load_adapter_class
    from bridge.gateway.lifecycle import GuardedAdapter

    names = enabled_platforms(settings)
    if not names:
        print("bridge: nothing to run: enable a platform, e.g. [telegram] enabled = true", file=sys.stderr)
        return EXIT_CONFIG
    # Guarded: the lifecycle in adapters/base.py holds for every adapter, third-party ones included.
    adapters = [GuardedAdapter(load_adapter_class(name).from_settings(settings)) for name in names]
    stop = asyncio.Event()
    _stop_on_signals(stop, settings.runs.shutdown_grace_s)
    # The dashboard's chat and the completions API talk in main as the operator, who holds the token.
    owners: tuple[str, ...] = ()
    if settings.admin.enabled:
        from bridge.http.webchat import WEB_OPERATOR

        owners = (WEB_OPERATOR,)
    async with Bridge(settings, standby=stop, on_claim_lost=_lost_database, extra_owners=owners) as bridge:
        if not bridge.claimed:
            return 0  # stopped while standing by: nothing was started
        reloader = _watch_config(bridge, settings, path)
        admin = await start_admin(bridge, adapters, settings, path, reloader)
        if admin is None and bridge.hooks.hooks:
            from bridge.http.hooks import serve_beside_platforms

            serve_beside_platforms(bridge.hooks, adapters)
        started: list[GuardedAdapter] = []
        recovering: asyncio.Task[None] | None = None
        listening: list[asyncio.Task[None]] = []
        try:
            from bridge.app.platforms import holding, start_shared

            if bridge.shared:
                listening = await start_shared(bridge, adapters, names, settings, stop, started)
            else:
                for adapter in adapters:
                    bridge.add_sender(adapter)
                    await adapter.start(bridge.handle)
                    started.append(adapter)
                logging.getLogger("bridge").info("running: %s", ", ".join(names))
                holds = ["runs", "outbox", *(holding(name, settings) for name in names)]
                await bridge.presence.update("active", ", ".join(holds))
            # In the background: a long platform back-off while catching up must not delay a SIGTERM.
            recovering = asyncio.create_task(bridge.recover(), name="recover")
            recovering.add_done_callback(_log_failure)
            await stop.wait()
        finally:
            # Stop listening first, so nothing new arrives while the runs in flight are wound down.
            await reloader.stop()
            for task in listening:
                task.cancel()
            await asyncio.gather(*listening, return_exceptions=True)
            if recovering is not None and not recovering.done():
                recovering.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await recovering
            # Answers in progress finish (within the grace period) while the adapters can still
            # deliver them; only then do the adapters stop.
            await bridge.shutdown()
            for adapter in reversed(started):
                await adapter.stop()
            if admin is not None:
                await admin.stop()
    return 0


def _lost_database() -> None:
    """This process can no longer show it holds the database, and a standby may be taking over: it
    stops at once, as if killed, rather than poll and answer beside the new one. Its runs are
    aborted and announced by the one that takes over (or by its own restart)."""
    logging.getLogger("bridge").critical("stopping: another worker may now hold the database")
    logging.shutdown()
    os._exit(EXIT_RUNTIME)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger("bridge").error("catching up after the start failed", exc_info=task.exception())
