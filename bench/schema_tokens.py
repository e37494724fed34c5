"""Schema tokens: what the first request's system prompt and tool schemas cost with and without groups."""

from __future__ import annotations

import asyncio
import importlib.metadata
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bpe_openai
from bpe_openai.tokenizer import Encoding

from bench.catalogue import catalogue_groups
from bench.common import table, write_results
from bridge.agent.prompt import build_system_prompt
from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.store.base import SessionRow
from bridge.tools.base import Tool, schemas_json
from bridge.tools.registry import ToolRegistry

ENCODING = "o200k_base"
TOKENIZER_PACKAGE = "bpe-openai"
TARGET_PERCENT = 10.0
ONE_GROUP = ("mail",)
THREE_GROUPS = ("mail", "calendar", "drive")
# The MCP scenario: one real stdio server (the tests' server) with this many tools.
MCP_TOOLS = 40
MCP_SERVER = "records"
# Where `python -m devkit.fakes.mcp_server` runs from.
ROOT = Path(__file__).resolve().parent.parent


def session() -> SessionRow:
    """A Telegram direct chat, as the store would hand it to a run."""
    now = time.time()
    return SessionRow(
        id="3f9a1c0e7b2d4a56",
        key="telegram:dm:123456789",
        created_at=now - 86_400,
        updated_at=now,
        surface="telegram",
        chat_type="dm",
        display_name="Anna Schmidt",
        last_route="telegram:123456789",
    )


def measure(
    enc: Encoding, name: str, prompt: str, tools: list[Tool], baseline: int | None = None
) -> dict[str, Any]:
    prompt_tokens = len(enc.encode(prompt))
    schema_tokens = len(enc.encode(schemas_json(tools)))
    total = prompt_tokens + schema_tokens
    return {
        "scenario": name,
        "tools": len(tools),
        "prompt_tokens": prompt_tokens,
        "schema_tokens": schema_tokens,
        "total_tokens": total,
        "percent_of_all": round(100 * total / (baseline or total), 2),
    }


def scenarios(settings: Settings, registry: ToolRegistry, enc: Encoding) -> list[dict[str, Any]]:
    row = session()

    def prompt(loaded: set[str], reg: ToolRegistry = registry) -> str:
        return build_system_prompt(settings, reg, row, loaded, memories=[])

    # (a) Before FEAT-040 there was no listing. A registry with the same core tools and no groups makes
    # the real build_system_prompt leave the section out, so no string surgery on the prompt is needed.
    bare = ToolRegistry()
    bare.add_core(*registry.core_tools())
    every_group = {g.name for g in registry.groups()}
    everything = measure(
        enc, "(a) all tools, no listing", prompt(set(), bare), registry.active_tools(every_group)
    )
    baseline = everything["total_tokens"]
    rows = [
        everything,
        measure(enc, "(b) core + group listing", prompt(set()), registry.active_tools(()), baseline),
    ]
    for loaded in (ONE_GROUP, THREE_GROUPS):
        label = f"(c) core + {', '.join(loaded)} loaded"
        rows.append(measure(enc, label, prompt(set(loaded)), registry.active_tools(loaded), baseline))
    return rows


async def mcp_scenarios(enc: Encoding) -> list[dict[str, Any]]:
    """A configured MCP server of 40 tools: the first request before it is loaded (listed from config,
    nothing started), after loading it, and with all of its schemas sent on every request as peers do."""
    server = {
        "name": MCP_SERVER,
        "description": "A records service: look up, search, create and update records.",
        "command": sys.executable,
        "args": ["-m", "devkit.fakes.mcp_server", "--tools", str(MCP_TOOLS), "--bare"],
        "cwd": str(ROOT),
    }
    with tempfile.TemporaryDirectory() as folder:
        # Its listing is cached beside the database: in a folder of its own, not the repository's data/.
        settings = Settings(mcp={"servers": [server]}, storage={"path": str(Path(folder) / "bridge.db")})
        return await _mcp_rows(settings, enc)


async def _mcp_rows(settings: Settings, enc: Encoding) -> list[dict[str, Any]]:
    registry = build_registry(settings)
    row = session()
    group = registry.group(MCP_SERVER)
    assert group is not None and group.source is not None
    try:
        listed = measure(
            enc,
            "(m1) server configured, not loaded",
            build_system_prompt(settings, registry, row, set(), memories=[]),
            registry.active_tools(()),
        )
        tools = await registry.load(group)
        loaded = {MCP_SERVER}
        after = measure(
            enc,
            "(m2) after load_tool_group",
            build_system_prompt(settings, registry, row, loaded, memories=[]),
            registry.active_tools(loaded),
        )
        # Every schema on every request and no listing: a registry with the server's tools as core.
        bare = ToolRegistry()
        bare.add_core(*registry.core_tools(), *tools)
        eager = measure(
            enc,
            "(m3) all its schemas always (peers)",
            build_system_prompt(settings, bare, row, set(), memories=[]),
            bare.active_tools(()),
        )
    finally:
        await registry.aclose()
    rows = [eager, listed, after]
    for item in rows:
        item["percent_of_all"] = round(100 * item["total_tokens"] / eager["total_tokens"], 2)
    return rows


async def run(smoke: bool = False) -> dict[str, Any]:
    settings = Settings()
    catalogue = catalogue_groups()
    registry = build_registry(settings, catalogue)
    enc = bpe_openai.get_encoding(ENCODING)
    rows = scenarios(settings, registry, enc)
    listed = rows[1]["percent_of_all"]
    met = listed <= TARGET_PERCENT

    catalogue_tools = sum(len(g.tools) for g in catalogue)
    all_tools = rows[0]["tools"]
    print(f"catalogue: {catalogue_tools} tools in {len(catalogue)} groups")
    print(
        f"registry: {all_tools} tools ({len(registry.core_tools())} core) in {len(registry.groups())} groups"
    )
    headers = ["scenario", "tools", "prompt tok", "schema tok", "total tok", "% of (a)"]
    keys = ["scenario", "tools", "prompt_tokens", "schema_tokens", "total_tokens"]
    version = importlib.metadata.version(TOKENIZER_PACKAGE)
    title = f"First request: system prompt + tool schemas ({TOKENIZER_PACKAGE} {version}, {ENCODING})"
    # The percentage is formatted here: table() would print a float above 100 without decimals.
    cells = [[*(r[k] for k in keys), f"{r['percent_of_all']:.1f}%"] for r in rows]
    print(table(title, headers, cells))
    print(f"target (b) <= {TARGET_PERCENT:g}% of (a): {'met' if met else 'NOT met'} ({listed}%)")

    mcp_rows = await mcp_scenarios(enc)
    title = f"An MCP server of {MCP_TOOLS} tools: first request, system prompt + tool schemas"
    cells = [[*(r[k] for k in keys), f"{r['percent_of_all']:.1f}%"] for r in mcp_rows]
    print(table(title, [*headers[:-1], "% of (m3)"], cells))

    result = {
        "tokenizer": {"package": TOKENIZER_PACKAGE, "version": version, "encoding": ENCODING},
        "catalogue": {"tools": catalogue_tools, "groups": len(catalogue)},
        "registry": {
            "tools": all_tools,
            "core_tools": len(registry.core_tools()),
            "groups": len(registry.groups()),
        },
        "scenarios": rows,
        "mcp": {"server_tools": MCP_TOOLS, "scenarios": mcp_rows},
        "target": {"max_percent": TARGET_PERCENT, "actual_percent": listed, "met": met},
    }
    path = write_results("schema_tokens", result, smoke=smoke)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    asyncio.run(run())
