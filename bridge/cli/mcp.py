"""`bridge mcp list`: connect to each configured MCP server and print its tools with their token cost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.cli.exits import EXIT_RUNTIME
from bridge.config import Settings
from bridge.errors import ToolSourceError
from bridge.tools.base import schemas_json
from bridge.tools.tokens import CHARS_PER_TOKEN, token_counter

if TYPE_CHECKING:
    from bridge.mcp.group import McpToolSource
    from bridge.tools.base import Tool


def add_parser(sub: Any, config_help: str) -> None:
    """The `mcp` command and its subcommand, on the `bridge` parser's subparsers."""
    mcp = sub.add_parser(
        "mcp",
        help="MCP servers: connect to each and list its tools with their schema sizes",
        description=(
            "Each [[mcp.servers]] entry is a tool group the model loads on demand; `bridge run` "
            "connects to a server only then. `list` connects to every enabled server now."
        ),
    )
    mcp_sub = mcp.add_subparsers(dest="mcp_command", required=True, metavar="SUBCOMMAND")
    listing = mcp_sub.add_parser("list", help="connect to each server; print its tools and their tokens")
    listing.add_argument("--config", type=Path, help=config_help)


async def run(settings: Settings, args: Any) -> int:
    from bridge.app.registry import build_registry

    registry = build_registry(settings)
    sources: list[tuple[str, McpToolSource | None]] = []
    for server in settings.mcp.servers:
        group = registry.group(server.name)
        source = group.source if group is not None else None
        sources.append((server.name, source))  # type: ignore[arg-type]
    if not sources:
        print("no MCP servers are configured ([[mcp.servers]] in the config file)")
        return 0
    count, approx = token_counter()
    failed = 0
    try:
        listed = await asyncio.gather(
            *(_list(source) for _, source in sources if source is not None), return_exceptions=True
        )
        results = iter(listed)
        for server, (name, source) in zip(settings.mcp.servers, sources, strict=True):
            where = f"stdio: {server.command} {' '.join(server.args)}" if server.command else server.url or ""
            if source is None:
                print(f"{name} ({where.strip()}): disabled\n")
                continue
            outcome = next(results)
            if isinstance(outcome, BaseException):
                failed += 1
                print(f"{name} ({where.strip()}): {outcome}\n")
                continue
            tools = list(outcome)
            total = count(schemas_json(tools))
            print(f"{name} ({where.strip()}): {len(tools)} tools, {approx}{total:,} schema tokens")
            width = max((len(t.name) for t in tools), default=0)
            for tool in tools:
                first = tool.description.split(". ")[0][:70]
                print(f"  {tool.name:<{width}}  {approx}{count(schemas_json([tool])):>5,} tok  {first}")
            for original, why in source.left_out.items():
                print(f"  (left out: {original}: {why})")
            print()
    finally:
        await registry.aclose()
    if approx:
        print(f"(~: estimated at {CHARS_PER_TOKEN} characters a token; install bpe-openai to count)")
    return EXIT_RUNTIME if failed else 0


async def _list(source: McpToolSource) -> tuple[Tool, ...]:
    try:
        return await source.load()
    except ToolSourceError as exc:
        raise RuntimeError(str(exc)) from None
