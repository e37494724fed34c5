"""Fixtures for tool tests: a ToolContext built from real Settings and nothing else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.sessions.authority import Authorities, Authority
from bridge.store.sqlite import SQLiteStore
from bridge.tools.base import Tool, ToolContext
from bridge.tools.registry import ToolRegistry

MakeContext = Callable[..., ToolContext]
# The owners of the bot the session tools' tests run against.
OWNERS = ("telegram:1", "discord:2")
MakeSessionContext = Callable[..., Awaitable[ToolContext]]


def builtin(name: str) -> Tool:
    """The built-in tool called `name`, as a default Bridge registers it."""
    tool = build_registry(Settings()).get(name)
    assert tool is not None, name
    return tool


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """Where the files tools are confined; not created, so first use must create it."""
    return tmp_path / "workspace"


@pytest.fixture
def make_ctx(workspace: Path) -> MakeContext:
    """Build a ToolContext whose [tools] settings are the defaults overridden by keyword arguments."""

    def make(**tools: Any) -> ToolContext:
        tools.setdefault("workspace", workspace)
        return context_of(Settings(tools=tools))

    return make


def context_of(settings: Settings) -> ToolContext:
    """A ToolContext of an owner in main, for tools that never touch the store, registry or session."""
    return ToolContext(
        settings=settings,
        store=None,  # type: ignore[arg-type]
        registry=None,  # type: ignore[arg-type]
        session=None,  # type: ignore[arg-type]
        run_id="t",
        authority=Authority("owner", "main"),
        authorities=Authorities(()),
    )


@pytest.fixture
def ctx(make_ctx: MakeContext) -> ToolContext:
    return make_ctx()


@pytest.fixture
def registry() -> ToolRegistry:
    """The registry a default Bridge runs with."""
    return build_registry(Settings())


@pytest.fixture
def make_session_ctx(store: SQLiteStore, registry: ToolRegistry) -> MakeSessionContext:
    """Build a ToolContext on the active session of `key` (created if needed) in the real store."""

    async def make(
        key: str = "main",
        *,
        settings: Settings | None = None,
        person: str | None = None,
        authority: Authority | None = None,
    ) -> ToolContext:
        """`person` wrote the message the run answers (an owner in OWNERS, or a member); `authority`
        overrides what that makes (a task's firing, a hook)."""
        authorities = Authorities(OWNERS)
        return ToolContext(
            settings=settings or Settings(),
            store=store,
            registry=registry,
            session=await store.ensure_active_session(key),
            run_id="r",
            authority=authority or authorities.for_chat(key, person),
            authorities=authorities,
        )

    return make
