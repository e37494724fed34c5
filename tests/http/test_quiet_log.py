"""An ordinary session leaves no ERROR in the log: turns, a page view, a viewer leaving the event
stream, a chat that refuses the bot. An ERROR line is for something an operator must look at."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.errors import DeliveryRefused
from bridge.events import Outbound
from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.harness import RecordingSender
from tests.http.conftest import admin_bridge, client_of
from tests.waiting import eventually


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record at ERROR or above, and every record that carries a traceback."""
    return [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR or r.exc_info is not None
    ]


@dataclass
class BlockedSender(RecordingSender):
    """The test surface, where chat "blocked" has blocked the bot."""

    async def send(self, item: Outbound) -> str | None:
        if item.route.chat_id == "blocked":
            raise DeliveryRefused("Forbidden: bot was blocked by the user")
        return await super().send(item)


async def test_a_viewer_leaving_the_event_stream_is_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeOpenAI() as llm, admin_bridge(tmp_path, llm) as (harness, _, base):
        live = harness.bridge.live
        async with client_of(base) as client, client.stream("GET", "/api/events") as stream:
            lines = stream.aiter_lines()
            assert await anext(lines) == ": connected"
            live.publish("message_in", text="one")
            assert [await anext(lines) for _ in range(2)] == ["", "event: message_in"]
        # The viewer is gone; the next event finds the connection closed and ends the stream.
        live.publish("message_in", text="two")
        await eventually(lambda: not live.watched, "the event stream to end")
        live.publish("message_in", text="three")
    assert errors(caplog) == []


async def test_an_ordinary_session_logs_no_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeOpenAI() as llm, admin_bridge(tmp_path, llm) as (harness, _, base):
        bridge = harness.bridge
        bridge.add_sender(BlockedSender())
        for turn in range(3):
            llm.push(tool_call("get_current_time", {}), text(f"answer {turn}"))
            await harness.say(f"question {turn}")
        async with client_of(base) as client:
            page = await client.get("/", headers={"Accept": "text/html"})
            assert page.status_code == 200
            async with client.stream("GET", "/api/events") as stream:
                assert await anext(stream.aiter_lines()) == ": connected"
        llm.push(text("you will not see this"))
        await harness.say("hello", chat_id="blocked", sender="blocked")
        await eventually(lambda: not bridge.live.watched, "the event stream to end")
        failed = await bridge.store.outbox(state="failed", newest=10)
        assert [row.item.reason for row in failed] == ["Forbidden: bot was blocked by the user"]
    assert errors(caplog) == []
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
