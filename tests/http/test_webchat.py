"""The dashboard's web chat: a message goes through the dispatcher like any surface's, into `main` as the
operator or `web:dm:<name>` as a member of that chat alone; what the bot says streams to the chat's
watchers; commands work; bad names and callers without the token are refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.http.auth import COOKIE, AdminAuth
from bridge.http.webchat import WEB_OPERATOR
from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.harness import OWNER, Harness
from tests.http.conftest import TOKEN, admin_bridge, client_of

SECRET = "the owner's secret 7781"
Event = tuple[str, dict[str, Any]]


class Watch:
    """A chat's event stream as a page reads it (GET /chat/events), collected as it comes."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.seen: list[Event] = []

    async def until(self, wanted: Callable[[Event], bool], within: float = 10) -> Event:
        """The first event from now on that is `wanted`; every one read on the way is kept in `seen`."""
        async with asyncio.timeout(within):
            while True:
                event = await self.queue.get()
                self.seen.append(event)
                if wanted(event):
                    return event


@asynccontextmanager
async def watching(client: httpx.AsyncClient, session: str) -> AsyncIterator[Watch]:
    watch, opened = Watch(), asyncio.Event()

    async def read() -> None:
        params = {"session": session}
        async with client.stream("GET", "/chat/events", params=params, timeout=None) as response:
            assert response.status_code == 200
            # The server watches the chat before it answers: from here on nothing is missed.
            opened.set()
            kind = None
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: ") and kind is not None:
                    watch.queue.put_nowait((kind, json.loads(line.removeprefix("data: "))))
                    kind = None

    task = asyncio.create_task(read())
    await asyncio.wait_for(opened.wait(), 10)
    try:
        yield watch
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def item(kind: str) -> Callable[[Event], bool]:
    return lambda event: event[0] == "item" and event[1]["kind"] == kind


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[tuple[Harness, httpx.AsyncClient]]:
    profiles = {"profiles": {"cheap": {"model": "cheap-model"}}}
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, llm=profiles) as (harness, _, base),
        client_of(base) as client,
    ):
        yield harness, client


async def say(client: httpx.AsyncClient, session: str, words: str) -> dict[str, Any]:
    answer = await client.post("/api/chat", json={"session": session, "text": words})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def history(harness: Harness, key: str) -> list[tuple[str, str | None, str]]:
    session = await harness.bridge.store.active_session(key)
    assert session is not None, key
    return [(m.kind, m.sender, m.content) for m in await harness.bridge.store.history(session.id, 100)]


async def test_the_operators_message_is_stored_in_main_and_the_answer_streams_to_the_chat(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(text("Hello, operator. Nice to see you."))
    async with watching(client, "main") as watch:
        said = await say(client, "main", "hello from the dashboard")
        assert said["key"] == "main" and said["session_id"]
        reply = await watch.until(item("reply"))
    assert reply[1]["text"] == "Hello, operator. Nice to see you."
    deltas = [data["text"] for kind, data in watch.seen if kind == "delta"]
    assert len(deltas) > 1, "the answer came whole, not streamed"
    assert "".join(deltas) == "Hello, operator. Nice to see you."
    assert ("in", {"text": "hello from the dashboard", "kind": None, "id": None}) in watch.seen
    assert await history(harness, "main") == [
        ("user", WEB_OPERATOR, "hello from the dashboard"),
        ("assistant", None, "Hello, operator. Nice to see you."),
    ]
    # The owners' one thread: the same session a Telegram owner writes in.
    harness.llm.push(text("Same thread."))
    await harness.say("and from the test surface")
    assert [row[2] for row in await history(harness, "main")][-2:] == [
        "and from the test surface",
        "Same thread.",
    ]


async def test_tool_activity_is_one_message_edited_in_place_as_each_tool_finishes(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(tool_call("get_current_time", {}), text("It is noon."))
    async with watching(client, "main") as watch:
        await say(client, "main", "what time is it?")
        activity = await watch.until(item("activity"))
        await watch.until(item("reply"))
    assert "get_current_time" in activity[1]["text"]
    edits = [data for kind, data in watch.seen if kind == "edit"]
    assert edits and all(edit["id"] == activity[1]["id"] for edit in edits)
    assert "✓" in edits[-1]["text"]


async def test_a_named_session_is_a_web_dm_of_its_own_with_its_own_history(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(text("Hi scratch."))
    async with watching(client, "scratch") as watch, watching(client, "main") as main:
        said = await say(client, "scratch", "hello")
        assert said["key"] == "web:dm:scratch"
        await watch.until(item("reply"))
        assert main.queue.empty(), "main's watchers saw another chat's answer"
    assert await history(harness, "web:dm:scratch") == [
        ("user", "web:scratch", "hello"),
        ("assistant", None, "Hi scratch."),
    ]
    assert await harness.bridge.store.active_session("main") is None
    page = await client.get("/chat", params={"session": "main"})
    assert page.status_code == 200
    assert '<option value="scratch"' in page.text, "the picker lists the web session"


async def test_commands_go_through_the_dispatcher_clear_help_model_and_retry(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(text("First answer."))
    async with watching(client, "main") as watch:
        first = await say(client, "main", "remember this")
        await watch.until(item("reply"))

        helped = await say(client, "main", "/help")
        assert "/clear" in (await watch.until(item("notice")))[1]["text"]
        assert helped["session_id"] == first["session_id"]

        await say(client, "main", "/retry")
        assert "Nothing to retry" in (await watch.until(item("notice")))[1]["text"]

        await say(client, "main", "/model cheap")
        assert "now uses the model profile cheap" in (await watch.until(item("notice")))[1]["text"]
        main = await harness.bridge.store.active_session("main")
        assert main is not None and main.model_profile == "cheap"

        cleared = await say(client, "main", "/clear")
        assert "Started a new session" in (await watch.until(item("notice")))[1]["text"]
        assert cleared["session_id"] != first["session_id"]

        harness.llm.push(text("A fresh start."))
        await say(client, "main", "who are you?")
        await watch.until(item("reply"))
    # The new session's model request holds none of the old session's turns.
    words = json.dumps(harness.llm.last_request["messages"])
    assert "remember this" not in words and "who are you?" in words
    assert harness.llm.last_request["model"] == "cheap-model"


async def test_a_member_web_session_cannot_read_main_but_the_operator_in_main_can(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    main = await harness.bridge.store.ensure_active_session("main")
    await harness.bridge.store.add_user_message(main.id, f"remember {SECRET}", sender=f"test:{OWNER}")

    async def reads_main(session: str) -> str:
        harness.llm.push(
            tool_call("load_tool_group", {"group_name": "sessions"}),
            tool_call("sessions_history", {"session_key": "main"}),
            text("done"),
        )
        async with watching(client, session) as watch:
            said = await say(client, session, "read main's history")
            await watch.until(item("reply"))
        rows = await history(harness, said["key"])
        results = [content for kind, _, content in rows if kind == "tool_result"]
        assert len(results) == 2, rows
        return results[-1]

    refused = await reads_main("stranger")
    assert SECRET not in refused and "not_found" in refused
    # The same call as the operator, in main: the probe can see a secret where there is one to see.
    assert SECRET in await reads_main("main")


@pytest.mark.parametrize("name", ["operator", "a b", "x:y", "web:dm:x", "-dash", "é", "n" * 65])
async def test_bad_session_names_are_refused(site: tuple[Harness, httpx.AsyncClient], name: str) -> None:
    harness, client = site
    answer = await client.post("/api/chat", json={"session": name, "text": "hi"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "bad_request"
    page = await client.get("/chat", params={"session": name})
    assert page.status_code == 400 and "No web chat" in page.text
    events = await client.get("/chat/events", params={"session": name})
    assert events.status_code == 400
    assert harness.llm.requests == []


async def test_an_empty_message_is_refused_and_nothing_is_stored(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    for body in ({"session": "main", "text": "   "}, {"session": "main"}, {"session": "main", "text": 5}):
        answer = await client.post("/api/chat", json=body)
        assert answer.status_code == 400, body
    assert await harness.bridge.store.active_session("main") is None


async def test_the_chat_needs_the_token_and_a_browsers_post_its_csrf_value(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    async with client_of(str(client.base_url), token=None) as stranger:
        assert (await stranger.post("/api/chat", json={"session": "main", "text": "hi"})).status_code == 401
        assert (await stranger.get("/chat/events", params={"session": "main"})).status_code == 401
        page = await stranger.get("/chat", headers={"Accept": "text/html"})
        assert page.status_code == 303 and page.headers["Location"].startswith("/login")
    async with client_of(str(client.base_url), token="a-wrong-token-0123456789") as wrong:
        assert (await wrong.post("/api/chat", json={"session": "main", "text": "hi"})).status_code == 401
    # Logged in by cookie, as a browser is: a POST without the page's CSRF value is refused.
    auth = AdminAuth(TOKEN)
    async with client_of(str(client.base_url), token=None) as browser:
        browser.cookies.set(COOKIE, auth.session)
        forged = await browser.post("/api/chat", json={"session": "main", "text": "hi"})
        assert forged.status_code == 403
        sent = await browser.post(
            "/api/chat", json={"session": "main", "text": "/help"}, headers={"X-CSRF-Token": auth.csrf}
        )
        assert sent.status_code == 200
    assert harness.llm.requests == []


async def test_main_is_refused_where_the_web_operator_is_no_owner(tmp_path: Path) -> None:
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, owners=[f"test:{OWNER}"]) as (harness, _, base),
        client_of(base) as client,
    ):
        answer = await client.post("/api/chat", json={"session": "main", "text": "hi"})
        assert answer.status_code == 409 and "not an owner" in answer.json()["detail"]
        # Never filed as a member's DM beside main instead.
        assert await harness.bridge.store.active_session("web:dm:operator") is None
        assert await harness.bridge.store.active_session("main") is None


async def test_the_page_shows_the_conversation_from_the_store_with_tool_calls_folded(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(tool_call("get_current_time", {}), text("It is <b>noon</b>."))
    async with watching(client, "main") as watch:
        await say(client, "main", "time?")
        await watch.until(item("reply"))
    page = await client.get("/chat")
    assert page.status_code == 200
    assert "time?" in page.text and "It is &lt;b&gt;noon&lt;/b&gt;." in page.text
    assert 'class="tool"' in page.text and "get_current_time" in page.text
    assert "/static/chat.js" in page.text and 'data-session="main"' in page.text
