"""Delivery truth and stuck chats in the admin API and the dashboard's HTML: each bot message shows how
it went out (sent, failed with Retry, uncertain with a Retry that says it may show twice, suppressed by
its rule), failures are live events, queues show how long each chat has run and waited, and a failed
run can be answered again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.errors import DeliveryRefused, DeliveryUncertain
from bridge.events import Outbound
from devkit.fakes.openai_server import FakeOpenAI, delay, http_error, text
from tests.harness import Harness
from tests.http.conftest import admin_bridge, client_of
from tests.waiting import eventually


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[tuple[Harness, httpx.AsyncClient]]:
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm) as (harness, _, base),
        client_of(base) as client,
    ):
        yield harness, client


def refuse_replies(harness: Harness, error: Exception) -> list[bool]:
    """Make the test platform raise `error` for replies while the returned flag's [0] is True."""
    sender, real_send = harness.sender, harness.sender.send
    failing = [True]

    async def send(item: Outbound) -> str | None:
        if failing[0] and item.kind == "reply":
            raise error
        return await real_send(item)

    sender.send = send  # type: ignore[method-assign]
    return failing


@contextlib.asynccontextmanager
async def watching(client: httpx.AsyncClient) -> AsyncIterator[list[tuple[str, dict[str, Any]]]]:
    """The admin event stream, read in the background: (kind, data) as they come."""
    seen: list[tuple[str, dict[str, Any]]] = []
    opened = asyncio.Event()

    async def read() -> None:
        async with client.stream("GET", "/api/events") as stream:
            kind = ""
            async for line in stream.aiter_lines():
                if line.startswith(": connected"):
                    opened.set()
                elif line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    seen.append((kind, json.loads(line[6:])))

    task = asyncio.create_task(read())
    await asyncio.wait_for(opened.wait(), 10)
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def delivery_events(seen: list[tuple[str, dict[str, Any]]], state: str) -> list[dict[str, Any]]:
    return [data for kind, data in seen if kind == "delivery" and data["state"] == state]


async def test_a_refused_reply_is_marked_failed_in_the_conversation_live_and_retry_sends_it(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    failing = refuse_replies(harness, DeliveryRefused("Forbidden: bot was blocked by the user"))
    async with watching(client) as seen:
        harness.llm.push(text("the answer"))
        await harness.say("hello")
        await eventually(lambda: delivery_events(seen, "failed"), "a failure on the live stream")
    failure = delivery_events(seen, "failed")[0]
    assert failure["session_key"] == "main" and "blocked" in failure["reason"]

    detail = (await client.get("/api/sessions/main")).json()
    [(run_id, reply)] = detail["delivery"]["replies"].items()
    assert reply["state"] == "failed" and "blocked by the user" in reply["reason"]
    page = (await client.get("/sessions/main")).text
    bubble = page.split("the answer", 1)[1].split('<div class="msg', 1)[0]
    assert 'class="pill failed"' in bubble and "blocked by the user" in bubble
    assert f"/api/outbox/{reply['retry'][0]['id']}/retry" in bubble and ">Retry<" in bubble

    failing[0] = False
    async with watching(client) as seen:
        answer = await client.post(f"/api/outbox/{reply['retry'][0]['id']}/retry")
        assert answer.status_code == 200, answer.text
        await eventually(lambda: delivery_events(seen, "sent"), "the retried reply marked sent, live")
    assert [event["state"] for event in delivery_events(seen, "pending")] == ["pending"]
    assert harness.sender.of("reply") == ["the answer"]
    now = (await client.get("/api/sessions/main")).json()["delivery"]["replies"][run_id]
    assert (now["state"], now["retry"], now["text"]) == ("sent", [], "the answer")
    assert 'class="pill sent"' in (await client.get("/sessions/main")).text


async def test_a_reply_that_may_have_arrived_is_uncertain_and_its_retry_says_it_may_show_twice(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    failing = refuse_replies(harness, DeliveryUncertain("no answer from the platform in time"))
    harness.llm.push(text("maybe delivered"))
    await harness.say("hello")
    await harness.bridge.delivery.idle()
    [row] = (await client.get("/api/outbox", params={"state": "uncertain"})).json()["outbox"]
    assert row["text"] == "maybe delivered" and "in time" in row["reason"]
    assert (await client.get("/api/outbox", params={"state": "failed"})).json()["outbox"] == []

    page = (await client.get("/sessions/main")).text
    assert "may have arrived" in page and "Send again (may show twice)" in page
    assert "may show it twice" in page  # the confirmation asked before it is sent
    outbox = (await client.get("/outbox", params={"state": "uncertain"})).text
    assert "Send again (may show twice)" in outbox and ">Retry<" not in outbox

    failing[0] = False
    assert (await client.post(f"/api/outbox/{row['id']}/retry")).status_code == 200
    await harness.bridge.delivery.idle()
    assert harness.sender.of("reply") == ["maybe delivered"]


async def test_a_reply_the_send_policy_denies_shows_as_suppressed_with_its_rule(tmp_path: Path) -> None:
    policy = {"default": "deny"}
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, session={"send_policy": policy}) as (harness, _, base),
        client_of(base) as client,
    ):
        llm.push(text("kept quiet"))
        await harness.say("hello", sender="stranger")
        key = "test:dm:stranger"
        detail = (await client.get(f"/api/sessions/{key}")).json()
        [reply] = detail["delivery"]["replies"].values()
        assert reply["state"] == "suppressed" and reply["retry"] == []
        assert "default" in reply["reason"]
        page = (await client.get(f"/sessions/{key}")).text
        bubble = page.split("kept quiet", 1)[1].split('<div class="msg', 1)[0]
        assert 'class="pill suppressed"' in bubble and "not sent:" in bubble and "Retry" not in bubble
        assert harness.sender.of("reply") == []


async def test_a_notice_the_chat_was_sent_appears_in_the_conversation_with_its_state(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(text("first"))
    await harness.say("hello")
    await harness.say("/send off")
    await harness.bridge.delivery.idle()
    page = (await client.get("/sessions/main")).text
    assert "bot notice" in page
    notice = page.split("bot notice", 1)[1].split('<div class="msg', 1)[0]
    assert "Send policy for this session" in notice and 'class="pill sent"' in notice


async def test_queues_show_how_long_a_chat_has_run_and_waited_with_stop_in_the_row(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(delay(30, text("slow")))
    first = await harness.bridge.handle(harness.inbound("take your time"))
    await harness.llm.wait_for_requests(1, timeout=10)
    second = await harness.bridge.handle(harness.inbound("and another thing"))
    assert first is not None and second is not None

    async def queued() -> list[dict[str, Any]]:
        queues: list[dict[str, Any]] = (await client.get("/api/queues")).json()["queues"]
        return queues

    [lane] = await queued()
    assert lane["session_key"] == "main" and lane["running"] and lane["waiting"] == 1
    assert lane["running_s"] >= 0 and lane["waiting_s"] >= 0
    overview = (await client.get("/")).text
    queues = overview.split("<h2>Queues</h2>", 1)[1].split("</table>", 1)[0]
    assert re.search(r'for <span data-since="[\d.]+">[01] s</span>', queues), queues
    assert "1 message, the oldest for" in queues
    assert 'data-api="POST /api/sessions/main/stop"' in queues
    runs = (await client.get("/runs")).text
    assert "running for" in runs and 'data-api="POST /api/sessions/main/stop"' in runs

    stopped = await client.post("/api/sessions/main/stop")
    assert stopped.json()["said"] == "Stopped the answer in progress."
    await asyncio.wait_for(asyncio.gather(first, second), 10)
    assert await queued() == []


async def test_answer_again_reruns_a_failed_turn_as_retry_does_and_says_when_there_is_nothing(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(http_error(500))
    await harness.say("hello")
    await harness.bridge.delivery.idle()
    [run] = (await client.get("/api/runs")).json()["runs"]
    assert run["status"] == "error"
    runs_page = (await client.get("/runs")).text
    assert 'data-api="POST /api/sessions/main/retry"' in runs_page and "Answer again" in runs_page
    assert "Answer again" in (await client.get("/sessions/main")).text

    harness.llm.push(text("second time lucky"))
    answered = await client.post("/api/sessions/main/retry")
    assert answered.status_code == 200 and answered.json()["said"] == "Answering the last message again."
    await eventually(lambda: "second time lucky" in harness.sender.of("reply"), "the answer")
    await harness.bridge.lanes.idle()
    statuses = [r["status"] for r in (await client.get("/api/runs")).json()["runs"]]
    assert statuses == ["ok", "error"]

    nothing = await client.post("/api/sessions/main/retry")
    assert nothing.status_code == 409
    assert nothing.json()["detail"] == "Nothing to retry: your last message has its answer."
    assert "Answer again" not in (await client.get("/sessions/main")).text
    assert (await client.post("/api/sessions/test:dm:nobody/retry")).status_code == 404
