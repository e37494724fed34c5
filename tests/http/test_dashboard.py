"""The dashboard's pages as HTML: each renders what the store holds, escapes chat text, and keeps the
admin server's locks (login, CSP); the browser tests (tests/browser) drive the same pages in Chromium."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bridge.events import Attachment
from bridge.http.dashboard import chat_of, timeline
from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.harness import Harness
from tests.http.conftest import admin_bridge, client_of


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[tuple[Harness, httpx.AsyncClient]]:
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm) as (harness, _, base),
        client_of(base) as client,
    ):
        yield harness, client


async def page(client: httpx.AsyncClient, path: str, status: int = 200) -> str:
    answer = await client.get(path, headers={"Accept": "text/html"})
    assert answer.status_code == status, answer.text
    assert answer.headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
    assert answer.headers["Cache-Control"] == "no-store"
    return answer.text


async def test_a_turn_shows_on_every_page_with_its_tool_call_folded_and_its_trace_as_a_timeline(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(tool_call("get_current_time", {"zone": "UTC"}), text("It is **noon**."))
    await harness.say("what time is it?")

    overview = await page(client, "/")
    assert "runs in progress" in overview
    assert re.search(r'<span class="pill ok">ok</span>', overview)

    sessions = await page(client, "/sessions")
    assert 'href="/sessions/main"' in sessions

    session = await page(client, "/sessions/main")
    assert "what time is it?" in session
    assert "It is **noon**." in session  # the stored text, shown as text
    # Folded: the details element has no `open` attribute.
    tool = re.search(r'<details class="tool" id="tool-\d+">(.*?)</details>', session, re.S)
    assert tool is not None, session
    assert "get_current_time" in tool.group(1)
    assert "&#34;zone&#34;: &#34;UTC&#34;" in tool.group(1)  # arguments, pretty and escaped
    assert "allow" in session  # the policy decision
    run_link = re.search(r'href="/runs/([^"]+)">run</a>', session)
    assert run_link is not None

    run = await page(client, f"/runs/{run_link.group(1)}")
    steps = re.findall(r'<li class="step (\w+)', run)
    assert steps == ["model", "tool", "model"]
    assert "Tool get_current_time" in run
    assert len(re.findall(r"<rect x=", run)) == 3

    runs = await page(client, "/runs?session=main")
    assert run_link.group(1) in runs
    outbox = await page(client, "/outbox")
    assert "It is **noon**." in outbox
    assert "sent" in outbox
    policy = await page(client, "/policy")
    assert 'id="policy-editor"' in policy
    pairing = await page(client, "/pairing")
    assert "No platform has" in pairing and "No codes waiting." in pairing


async def test_chat_text_that_looks_like_markup_is_shown_as_text(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(text("<img src=x onerror=alert(2)>"))
    await harness.say("<script>alert(1)</script>")
    session = await page(client, "/sessions/main")
    assert "<script>alert(1)" not in session
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in session
    assert "<img src=x" not in session
    outbox = await page(client, "/outbox")
    assert "<img src=x" not in outbox


async def test_pages_send_a_browser_without_the_cookie_to_the_login_form_but_serve_its_static_files(
    site: tuple[Harness, httpx.AsyncClient], tmp_path: Path
) -> None:
    _, client = site
    async with client_of(str(client.base_url), token=None) as stranger:
        answer = await stranger.get("/sessions/main", headers={"Accept": "text/html"})
        assert answer.status_code == 303
        assert answer.headers["Location"] == "/login?next=/sessions/main"
        login = await stranger.get("/login")
        assert login.status_code == 200
        assert 'href="/static/app.css"' in login.text
        assert "Log out" not in login.text  # no navigation before logging in
        css = await stranger.get("/static/app.css")
        assert css.status_code == 200
        assert css.headers["Content-Type"].startswith("text/css")
        script = await stranger.get("/static/app.js")
        assert script.status_code == 200
        # Only reading static files is open; the prefix gives no way around the lock.
        assert (await stranger.post("/static/app.js")).status_code == 401
        assert (await stranger.get("/static/../api/sessions")).status_code in (401, 404)


async def test_an_unknown_session_or_run_is_a_not_found_page(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    _, client = site
    assert "No session telegram:dm:1." in await page(client, "/sessions/telegram:dm:1", 404)
    assert "No run nope." in await page(client, "/runs/nope", 404)


async def test_the_sessions_page_filters_by_kind_and_search(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(text("hi"))
    await harness.say("hello")
    assert 'href="/sessions/main"' in await page(client, "/sessions?kind=main&q=mai")
    assert 'href="/sessions/main"' not in await page(client, "/sessions?kind=group")
    assert "No sessions match." in await page(client, "/sessions?q=nothing-like-it")


def test_a_tool_result_is_joined_to_its_call_and_an_orphan_result_is_still_shown() -> None:
    def row(i: int, kind: str, call: str | None = None) -> dict[str, object]:
        return {"id": i, "kind": kind, "tool_call_id": call, "content": kind}

    entries = chat_of(
        [row(1, "user"), row(2, "tool_call", "a"), row(3, "tool_result", "a"), row(4, "tool_result", "b")]
    )
    assert [e["kind"] for e in entries] == ["user", "tool", "tool"]
    assert entries[1]["result"]["id"] == 3
    assert entries[2]["row"]["id"] == 4


def test_timeline_bars_follow_each_other_and_fit_the_run() -> None:
    bars = timeline({"duration_ms": 100, "steps": [{"ms": 50}, {"ms": 25}, {"ms": 25}]})
    assert [(b.start, b.width) for b in bars] == [(0, 500), (500, 250), (750, 250)]
    # Steps longer than the recorded total are scaled to their own sum, never past the end.
    bars = timeline({"duration_ms": 10, "steps": [{"ms": 30}, {"ms": 10}]})
    assert bars[-1].start + bars[-1].width <= 1000


async def test_a_message_with_an_attachment_shows_it_by_name_escaped(
    site: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = site
    harness.llm.push(text("I can't open it here."))
    photo = Attachment("image", "<b>cat</b>.png", "ref-1", "image/png", 100)
    done = await harness.bridge.handle(dataclasses.replace(harness.inbound("look"), attachments=(photo,)))
    assert done is not None
    await asyncio.wait_for(done, 10)
    session = await page(client, "/sessions/main")
    assert "[image: &lt;b&gt;cat&lt;/b&gt;.png (this chat can&#39;t fetch it)]\nlook" in session
    assert "<b>cat</b>" not in session
