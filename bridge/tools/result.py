"""ToolResult: what a tool hands back. A leaf, so the argument checking (checking.py) and the tool
types (base.py) can both build on it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def as_written(content: str) -> str:
    """A Tool.plain for tools whose success is already a sentence for a person ("Wrote 18 bytes to
    'notes.txt'.")."""
    return content


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool hands back: data for the model, never an exception into the loop."""

    ok: bool
    content: str
    code: str | None = None

    @classmethod
    def success(cls, content: str | dict[str, Any] | list[Any]) -> ToolResult:
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, default=str)
        return cls(ok=True, content=content)

    @classmethod
    def error(cls, code: str, message: str) -> ToolResult:
        return cls(ok=False, content=f"Error [{code}]: {message}", code=code)

    @property
    def status(self) -> str:
        return "success" if self.ok else "error"
