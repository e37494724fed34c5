"""The `bridge` command: run, chat, check-config."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from bridge import __version__
from bridge.config import ConfigError, Settings, load_settings, render_settings, resolve_config_path
from bridge.events import AdapterStartError
from bridge.logs import setup_logging
from bridge.store.base import StoreError

EXIT_CONFIG = 2
EXIT_RUNTIME = 1


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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"bridge: config error:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "check-config":
        return check_config(settings, args.config)
    setup_logging(settings)
    try:
        return asyncio.run(chat(settings) if args.command == "chat" else run(settings))
    except AdapterStartError as exc:
        print(f"bridge: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except ConfigError as exc:
        print(f"bridge: config error:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StoreError as exc:
        print(f"bridge: storage error: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        return 130


def check_config(settings: Settings, path: Path | None) -> int:
    source = resolve_config_path(path)
    print(f"# effective config from {source or 'defaults'} and BRIDGE_* environment variables")
    print(render_settings(settings), end="")
    return 0


async def chat(settings: Settings) -> int:
    # Imported here so `check-config` stays fast and works even if a runtime dependency is broken.
    from bridge.app import Bridge, load_adapter_class

    console = load_adapter_class("console")()
    if settings.llm.base_url is None and not settings.llm.api_key.get_secret_value():
        print(
            "bridge: no model configured. Set [llm] base_url (any OpenAI-compatible server) "
            "and, if it needs one, [llm] api_key.",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    async with Bridge(settings, extra_owners=console.implicit_owners) as bridge:
        bridge.add_sender(console)
        where = settings.llm.base_url or "the OpenAI API"
        console.notice(
            f"Bridge chat: model {settings.llm.model} at {where}, session 'main'. "
            "Commands: /help, /status, /clear. End with Ctrl-D."
        )
        await console.start(bridge.handle)
        try:
            await console.wait_closed()
        finally:
            await console.stop()
    return 0


def enabled_platforms(settings: Settings) -> list[str]:
    """Config sections with `enabled = true`, each the entry-point name of its adapter."""
    return [
        name
        for name in type(settings).model_fields
        if getattr(getattr(settings, name), "enabled", False) is True
    ]


async def run(settings: Settings) -> int:
    from bridge.app import Bridge, load_adapter_class

    names = enabled_platforms(settings)
    if not names:
        print("bridge: nothing to run: enable a platform, e.g. [telegram] enabled = true", file=sys.stderr)
        return EXIT_CONFIG
    adapters = [load_adapter_class(name).from_settings(settings) for name in names]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with Bridge(settings) as bridge:
        started = []
        try:
            for adapter in adapters:
                bridge.add_sender(adapter)
                await adapter.start(bridge.handle)
                started.append(adapter)
            logging.getLogger("bridge").info("running: %s", ", ".join(names))
            await stop.wait()
        finally:
            # Stop listening first, so nothing new arrives while the runs in flight are wound down.
            for adapter in reversed(started):
                await adapter.stop()
    return 0
