"""The `bridge` command's parser, and which module runs each command: run, chat, status, check-config,
policy, pair, tasks, backup, migrate, runs...; the only module here that imports the others."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from bridge import __version__
from bridge.cli.exits import fail
from bridge.config.io import load_settings, resolve_config_path
from bridge.errors import AdapterStartError, ConfigError, LocalModelError, StoreError
from bridge.logs import setup_logging

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

    admin = sub.add_parser("admin", help="print the admin server's URL and how to log in")
    admin.add_argument("--config", type=Path, help=config_help)
    admin.add_argument(
        "--rotate-token",
        action="store_true",
        help="replace the kept admin token with a new one (a running bot uses it once restarted)",
    )
    health = sub.add_parser("health", help="exit 0 when the running bridge's admin server says it is healthy")
    health.add_argument("--config", type=Path, help=config_help)
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

    from bridge.cli import mcp, pair, tasks

    for module in (pair, tasks, mcp):
        module.add_parser(sub, config_help)

    from bridge.cli import local

    local.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command ARGV (default: the process's arguments) and return its exit status."""
    args = _parser().parse_args(argv)
    if args.command == "local-model":
        from bridge.cli.local import local_model

        return local_model(args)
    from bridge.cli import store as cli_store

    if args.command == "migrate":
        return asyncio.run(cli_store.migrate_database(args.source, args.target))
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        return fail(exc)
    if args.command == "check-config":
        from bridge.cli.checks import check_config

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
        from bridge.cli.checks import explain_policy

        return asyncio.run(explain_policy(settings, args.session_key, args.surface))
    if args.command in ("pair", "tasks", "mcp"):
        from bridge.cli import mcp, pair, tasks

        command = {"pair": pair.run, "tasks": tasks.run, "mcp": mcp.run}[args.command]
        return asyncio.run(command(settings, args))
    if args.command in ("admin", "health"):
        from bridge.cli.admin import check_health, show_admin

        return (
            show_admin(settings, rotate=args.rotate_token)
            if args.command == "admin"
            else check_health(settings)
        )
    setup_logging(settings)
    if args.command == "chat":
        # The terminal shows each run as it happens; a log line per run, or each line an MCP server
        # writes to its stderr, would only interleave with it.
        for name in ("bridge.runs", "bridge.mcp.stderr"):
            logging.getLogger(name).setLevel(logging.WARNING)
    from bridge.cli.serve import chat, run

    path = resolve_config_path(args.config)
    try:
        return asyncio.run(chat(settings, path) if args.command == "chat" else run(settings, path))
    # LocalModelError: `bridge chat` found a server running a model this version does not know.
    except (AdapterStartError, ConfigError, LocalModelError, StoreError) as exc:
        return fail(exc, settings)
    except KeyboardInterrupt:
        return 130
