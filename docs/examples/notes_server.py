"""A filesystem-style MCP server over stdio: notes as text files in one folder (the README's example).

    python notes_server.py /path/to/notes

Written with the official `mcp` SDK, which Bridge already depends on. Every path stays inside the
folder given on the command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()


def _note(name: str) -> Path:
    path = (ROOT / name).with_suffix(".md").resolve()
    if not path.is_relative_to(ROOT):
        raise ToolError(f"{name!r} is outside the notes folder")
    return path


@server.tool()
def list_notes() -> list[str]:
    """The names of all notes, sorted."""
    return sorted(p.stem for p in ROOT.glob("*.md"))


@server.tool()
def read_note(name: str) -> str:
    """The text of one note."""
    path = _note(name)
    if not path.is_file():
        raise ToolError(f"there is no note {name!r}; list_notes shows them")
    return path.read_text(encoding="utf-8")


@server.tool()
def write_note(name: str, text: str) -> str:
    """Create or replace a note."""
    _note(name).write_text(text, encoding="utf-8")
    return f"saved {name}"


@server.tool()
def search_notes(query: str) -> list[str]:
    """The names of the notes whose text contains the query (case-insensitive)."""
    wanted = query.lower()
    return sorted(p.stem for p in ROOT.glob("*.md") if wanted in p.read_text(encoding="utf-8").lower())


if __name__ == "__main__":
    ROOT.mkdir(parents=True, exist_ok=True)
    server.run("stdio")
