"""The tools an MCP server listed, kept on disk so a restored group offers them after a restart
without starting the server until one of them is called."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path

import mcp.types as mt
from pydantic import ValidationError

from bridge.config.mcp import McpServerSettings

log = logging.getLogger(__name__)


def fingerprint(settings: McpServerSettings) -> str:
    """What the listing depends on: the same command or URL. Secret values are left out (their names
    count), so the file holds nothing from them."""
    key = {
        "command": settings.command,
        "args": settings.args,
        "cwd": str(settings.cwd) if settings.cwd else None,
        "url": settings.url,
        "env": sorted(settings.env),
        "headers": sorted(settings.headers),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def read(path: Path, settings: McpServerSettings) -> list[mt.Tool] | None:
    """The cached listing, or None: no file, another config, or a file that cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("fingerprint") != fingerprint(settings):
            return None
        return [mt.Tool.model_validate(tool) for tool in data["tools"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
        log.warning("MCP server %s: its cached tool list %s is not usable: %s", settings.name, path, exc)
        return None


def write(path: Path, settings: McpServerSettings, tools: list[mt.Tool]) -> None:
    """Replace the cached listing in one step, so a crash leaves the old file or the new one."""
    data = {
        "fingerprint": fingerprint(settings),
        "tools": [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools],
    }
    partial = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        # Only a cache: the next restart lists the tools by connecting.
        log.warning("MCP server %s: could not cache its tool list in %s: %s", settings.name, path, exc)
        with contextlib.suppress(OSError):
            partial.unlink()
