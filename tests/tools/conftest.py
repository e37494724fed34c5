"""Fixtures for tool tests: a ToolContext built from real Settings and nothing else."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.config import Settings
from bridge.tools.base import ToolContext

MakeContext = Callable[..., ToolContext]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """Where the files tools are confined; not created, so first use must create it."""
    return tmp_path / "workspace"


@pytest.fixture
def make_ctx(workspace: Path) -> MakeContext:
    """Build a ToolContext whose [tools] settings are the defaults overridden by keyword arguments."""

    def make(**tools: Any) -> ToolContext:
        tools.setdefault("workspace", workspace)
        return ToolContext(
            settings=Settings(tools=tools),
            # These tools never touch the store, registry or session.
            store=None,  # type: ignore[arg-type]
            registry=None,  # type: ignore[arg-type]
            session=None,  # type: ignore[arg-type]
            run_id="t",
            sender_is_owner=True,
        )

    return make


@pytest.fixture
def ctx(make_ctx: MakeContext) -> ToolContext:
    return make_ctx()
