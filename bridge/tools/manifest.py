"""Tool groups defined by JSON manifests: one file is one group, named after the file."""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

from bridge.errors import ManifestError
from bridge.tools.arguments import check_parameters
from bridge.tools.base import Tool, ToolContext, ToolGroup, ToolHandler, ToolResult

DESCRIPTION_NAMES_MAX = 8
# What OpenAI-compatible servers accept as a function name.
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GROUP_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")


def manifest_files(paths: list[Path]) -> list[Path]:
    """The manifest files named by config: files as given, folders as their *.json files, sorted."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(path.glob("*.json")))
        elif path.is_file():
            files.append(path)
        else:
            raise ManifestError(f"{path}: [tools] manifests names a path that does not exist")
    return files


def load_manifest(path: Path) -> ToolGroup:
    """Read one manifest.

    The file holds a JSON array. An entry with a `_meta` object gives the group's display_name and
    description and is not a tool; every other entry is a tool: name, description, parameters (JSON
    schema) and handler ("package.module:function", an async function taking (arguments, context)).
    The handler gets the arguments as a dict that passed the schema (bridge.tools.arguments).
    """
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: not readable as JSON: {exc}") from None
    if not isinstance(entries, list):
        raise ManifestError(f"{path}: must hold a JSON array of tool entries")
    meta: dict[str, Any] = {}
    tools: list[Tool] = []
    for index, entry in enumerate(entries):
        where = f"{path}: entry {index}"
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: must be a JSON object")
        if "_meta" in entry:
            if not isinstance(entry["_meta"], dict):
                raise ManifestError(f"{where}: _meta must be an object with display_name and description")
            meta = entry["_meta"]
            continue
        tools.append(_tool(entry, where))
    name = path.stem.lower()
    if not GROUP_NAME.match(name):
        raise ManifestError(f"{path}: the file name gives the group name, and {name!r} is not [a-z0-9_-]")
    description = meta.get("description") or _auto_description(tools)
    display_name = meta.get("display_name") or path.stem.replace("_", " ").replace("-", " ").title()
    return ToolGroup(
        name=name, description=str(description), tools=tuple(tools), display_name=str(display_name)
    )


def _auto_description(tools: list[Tool]) -> str:
    if not tools:
        return "No tools yet"
    names = [t.name for t in tools[:DESCRIPTION_NAMES_MAX]]
    more = f" and {len(tools) - len(names)} more" if len(tools) > len(names) else ""
    return "Tools: " + ", ".join(names) + more


def _tool(entry: dict[str, Any], where: str) -> Tool:
    for key in ("name", "description", "handler"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise ManifestError(f"{where}: '{key}' is required and must be a non-empty string")
    if not TOOL_NAME.match(entry["name"]):
        raise ManifestError(
            f"{where}: name {entry['name']!r} must match [a-zA-Z0-9_-] and be at most 64 long"
        )
    parameters = entry.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ManifestError(f"{where}: 'parameters' must be a JSON schema of type object")
    # Checked now, so a broken schema stops the start instead of failing every call of the tool.
    try:
        check_parameters(parameters)
    except ManifestError as exc:
        raise ManifestError(f"{where}: 'parameters' is not a valid JSON schema: {exc}") from None
    timeout = entry.get("timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ManifestError(f"{where}: 'timeout_s' must be a positive number")
    return Tool(
        name=entry["name"],
        description=entry["description"],
        parameters=parameters,
        run=_handler(entry["handler"], where),
        timeout_s=timeout,
    )


def _handler(spec: str, where: str) -> ToolHandler:
    module_name, _, attr = spec.partition(":")
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ManifestError(f"{where}: handler {spec!r} cannot be imported: {exc}") from None
    if not inspect.iscoroutinefunction(func):
        raise ManifestError(f"{where}: handler {spec!r} must be an async function (arguments, context)")

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        result = await func(args, ctx)
        return result if isinstance(result, ToolResult) else ToolResult.success(result)

    return run
