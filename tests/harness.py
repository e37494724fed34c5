"""A whole Bridge in one process against the fake model, with a sender that records everything."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.app import Bridge
from bridge.config import Settings
from bridge.events import ChatType, Inbound, Outbound, Route
from bridge.platform import Sender
from bridge.tools.base import Tool, ToolContext, ToolGroup, ToolResult, params
from devkit.fakes.openai_server import FakeOpenAI

CORE_TOOLS = ["load_tool_group", "get_current_time", "search_history", "save_memory"]
OWNER = "owner"


@dataclass
class RecordingSender(Sender):
    """A Sender on surface "test" that edits in place and records what the core sent."""

    surface: str = "test"
    supports_edit: bool = True
    sent: list[Outbound] = field(default_factory=list)
    edits: list[tuple[str, str]] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    async def send(self, item: Outbound) -> str | None:
        self.sent.append(item)
        return str(next(self._ids))

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        self.edits.append((message_id, text))

    async def typing(self, route: Route) -> None:
        return None

    def of(self, kind: str) -> list[str]:
        return [item.text for item in self.sent if item.kind == kind]


@dataclass
class StreamingSender(RecordingSender):
    """The recording sender of the harness, on a surface that prints text as it streams."""

    supports_stream: bool = True
    # Everything in the order it happened: ("stream", delta) and (kind, text) of each send.
    log: list[tuple[str, str]] = field(default_factory=list)

    async def stream(self, route: Route, delta: str) -> None:
        self.log.append(("stream", delta))

    async def send(self, item: Outbound) -> str | None:
        self.log.append((item.kind, item.text))
        return await super().send(item)

    def streamed(self) -> str:
        return "".join(text for kind, text in self.log if kind == "stream")


async def _pdf_info(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult.success({"path": args.get("path"), "pages": 3})


def pdf_group() -> ToolGroup:
    """A small extra group, as in FEAT-040's examples."""
    return ToolGroup(
        "pdf",
        "Extract text, get info, and render pages from PDF files",
        (
            Tool(
                "pdf_info",
                "Page count and metadata of a PDF",
                params({"path": {"type": "string"}}),
                _pdf_info,
            ),
            Tool("pdf_extract_text", "Text of a PDF", params({"path": {"type": "string"}}), _pdf_info),
        ),
    )


@dataclass
class Harness:
    bridge: Bridge
    sender: RecordingSender
    llm: FakeOpenAI
    _msg_ids: Any = field(default_factory=lambda: itertools.count(1))

    def inbound(
        self, text: str, *, sender: str = OWNER, chat_type: ChatType = "dm", chat_id: str | None = None
    ) -> Inbound:
        return Inbound(
            surface="test",
            chat_type=chat_type,
            chat_id=chat_id or sender,
            sender_id=sender,
            text=text,
            message_id=str(next(self._msg_ids)),
        )

    async def say(self, text: str, **kwargs: Any) -> None:
        """Send one message and wait (bounded) until the run answering it is done."""
        done = await self.bridge.handle(self.inbound(text, **kwargs))
        if done is not None:
            await asyncio.wait_for(done, timeout=10)

    def request_tools(self, i: int) -> list[str]:
        return self.llm.tool_names(i)

    def first_request_of_turn(self, user_text: str) -> int:
        """Index of the first model request whose last message is this user text."""
        for i, body in enumerate(self.llm.requests):
            last = body["messages"][-1]
            if last["role"] == "user" and last["content"] == user_text:
                return i
        raise AssertionError(f"no request ends with user text {user_text!r}")


def make_settings(
    tmp_path: Path,
    base_url: str,
    *,
    owners: list[str] | None = None,
    **sections: dict[str, Any] | list[dict[str, Any]],
) -> Settings:
    """Settings for a test Bridge in tmp_path talking to the fake model; sections merge into the defaults."""
    data: dict[str, Any] = {
        "owners": owners if owners is not None else [f"test:{OWNER}"],
        "llm": {"base_url": base_url, "model": "fake", "max_retries": 0, "timeout_s": 5},
        "storage": {"path": str(tmp_path / "bridge.db")},
        "tools": {"workspace": str(tmp_path / "workspace")},
    }
    for name, values in sections.items():
        # A list is an array of tables ([[hooks]]): it replaces the default whole.
        data[name] = values if isinstance(values, list) else {**data.get(name, {}), **values}
    return Settings(**data)


@asynccontextmanager
async def running_bridge(
    tmp_path: Path,
    model: FakeOpenAI,
    /,
    *,
    extra_groups: tuple[ToolGroup, ...] = (),
    owners: list[str] | None = None,
    **sections: dict[str, Any] | list[dict[str, Any]],
) -> AsyncIterator[Harness]:
    """A started Bridge on the fake model; keyword sections (llm=, runs=...) merge into the settings."""
    settings = make_settings(tmp_path, model.base_url, owners=owners, **sections)
    bridge = Bridge(settings, extra_groups=extra_groups)
    sender = RecordingSender()
    bridge.add_sender(sender)
    async with bridge:
        yield Harness(bridge, sender, model)
