"""The admin JSON API: sessions with their history and policy, runs and traces, the outbox, and the
owner's actions (/clear, /send, /stop, a retry), each going through the chat commands' own code."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.events import Inbound, Outbound
from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.harness import Harness
from tests.http.conftest import TOKEN, admin_bridge, client_of


class Api:
    def __init__(self, harness: Harness, client: httpx.AsyncClient) -> None:
        self.harness = harness
        self.client = client

    async def get(self, path: str, **params: Any) -> Any:
        answer = await self.client.get(path, params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()

    async def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = await self.client.post(path, json=body or {})
        assert answer.status_code == 200, answer.text
        return answer.json()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm) as (harness, _, base),
        client_of(base) as client,
    ):
        yield Api(harness, client)


async def turn(api: Api, said: str, answer: str, **kwargs: Any) -> None:
    api.harness.llm.push(tool_call("get_current_time", {}), text(answer))
    await api.harness.say(said, **kwargs)


async def group_turn(api: Api, said: str, answer: str) -> None:
    api.harness.llm.push(tool_call("get_current_time", {}), text(answer))
    inbound = Inbound(
        "test", "group", "g1", "alice", said, message_id="g1", mentioned=True, chat_title="Team"
    )
    done = await api.harness.bridge.handle(inbound)
    assert done is not None
    await asyncio.wait_for(done, 10)


async def test_sessions_are_listed_and_filtered_by_kind_surface_and_search(api: Api) -> None:
    await turn(api, "hello", "hi owner")
    await group_turn(api, "hello group", "hi group")
    listed = (await api.get("/api/sessions"))["sessions"]
    assert sorted(s["key"] for s in listed) == ["main", "test:group:g1"]
    groups = (await api.get("/api/sessions", kind="group"))["sessions"]
    assert [s["key"] for s in groups] == ["test:group:g1"]
    assert groups[0]["messages"] == 4
    assert (await api.get("/api/sessions", q="team"))["sessions"][0]["key"] == "test:group:g1"
    assert (await api.get("/api/sessions", surface="discord"))["sessions"] == []
    bad = await api.client.get("/api/sessions", params={"active_minutes": "soon"})
    assert bad.status_code == 400 and "active_minutes" in bad.json()["detail"]


async def test_a_session_shows_its_history_with_tool_calls_groups_policy_and_runs(api: Api) -> None:
    api.harness.llm.push(tool_call("load_tool_group", {"group_name": "sessions"}), text("loaded"))
    await api.harness.say("load sessions")
    one = await api.get("/api/sessions/main")
    history = one["history"]
    assert [m["kind"] for m in history] == ["user", "tool_call", "tool_result", "assistant"]
    assert history[1]["tool_name"] == "load_tool_group"
    assert one["loaded_groups"] == ["sessions"]
    assert one["loaded_skills"] == []
    assert one["policy"]["action"] == "allow" and one["policy"]["override"] is None
    assert any(line.startswith("decision: allow") for line in one["policy"]["explain"])
    assert one["model_profile"] == "default" and one["queue_depth"] == 0 and one["running"] is False
    assert len(one["runs"]) == 1 and one["runs"][0]["status"] == "ok"


async def test_an_unknown_session_is_404_and_a_malformed_key_is_400(api: Api) -> None:
    missing = await api.client.get("/api/sessions/telegram:dm:404")
    assert missing.status_code == 404 and "no session" in missing.json()["detail"]
    # No action makes a session for a key nobody has spoken in.
    for action in ("clear", "stop", "send"):
        answer = await api.client.post(f"/api/sessions/telegram:dm:404/{action}", json={"mode": "off"})
        assert answer.status_code == 404, action
    assert (await api.get("/api/sessions"))["sessions"] == []
    bad = await api.client.get("/api/sessions/no such key")
    assert bad.status_code == 400


async def test_clear_starts_a_fresh_session_under_the_same_key(api: Api) -> None:
    await turn(api, "hello", "hi")
    before = (await api.get("/api/sessions/main"))["session"]["id"]
    said = await api.post("/api/sessions/main/clear")
    assert "new session" in said["said"]
    after = await api.get("/api/sessions/main")
    assert after["session"]["id"] != before and after["history"] == []


async def test_send_off_shadows_the_chat_and_inherit_lets_it_speak_again(api: Api) -> None:
    await turn(api, "hello", "first answer")
    said = await api.post("/api/sessions/main/send", {"mode": "off"})
    assert "deny" in said["said"] or "off" in said["said"]
    one = await api.get("/api/sessions/main")
    assert one["policy"]["action"] == "deny" and one["policy"]["override"] == "deny"
    await turn(api, "again", "shadowed answer")
    assert "shadowed answer" not in api.harness.sender.of("reply")
    suppressed = (await api.get("/api/outbox", state="suppressed"))["outbox"]
    assert any(row["text"] == "shadowed answer" for row in suppressed)
    await api.post("/api/sessions/main/send", {"mode": "inherit"})
    await turn(api, "once more", "spoken again")
    assert "spoken again" in api.harness.sender.of("reply")
    wrong = await api.client.post("/api/sessions/main/send", json={"mode": "loud"})
    assert wrong.status_code == 400


async def test_stop_with_nothing_running_says_so(api: Api) -> None:
    await turn(api, "hello", "hi")
    assert (await api.post("/api/sessions/main/stop"))["said"] == "Nothing is running."


async def test_runs_are_listed_and_a_runs_trace_shows_each_step(api: Api) -> None:
    await turn(api, "hello", "hi")
    runs = (await api.get("/api/runs", session="main"))["runs"]
    assert len(runs) == 1 and runs[0]["session_key"] == "main"
    detail = await api.get(f"/api/runs/{runs[0]['id']}")
    steps = detail["trace"]["steps"]
    assert [s["type"] for s in steps] == ["model", "tool", "model"]
    # Expanded: the second request carries the whole conversation again, not a count.
    assert steps[2]["request"]["messages"][-1]["role"] == "tool"
    assert (await api.client.get("/api/runs/nope")).status_code == 404


async def test_a_failed_outbox_row_is_listed_and_sent_again_on_retry(api: Api) -> None:
    sender = api.harness.sender
    real_send = sender.send
    failing = True

    async def flaky(item: Outbound) -> str | None:
        if failing and item.kind == "reply":
            raise RuntimeError("the platform said no")
        return await real_send(item)

    sender.send = flaky  # type: ignore[method-assign]
    await turn(api, "hello", "the answer")
    failed = (await api.get("/api/outbox", state="failed"))["outbox"]
    assert [row["text"] for row in failed] == ["the answer"]
    assert "the platform said no" in failed[0]["reason"]
    failing = False
    # Two operators press retry at once: the reply goes out once.
    both = await asyncio.gather(*(api.client.post(f"/api/outbox/{failed[0]['id']}/retry") for _ in range(2)))
    assert sorted(answer.status_code for answer in both) == [200, 404]
    retried = next(answer.json() for answer in both if answer.status_code == 200)
    assert retried["ok"]
    await api.harness.bridge.delivery.idle()
    assert "the answer" in sender.of("reply")
    assert sender.of("reply").count("the answer") == 1
    assert (await api.get("/api/outbox", state="failed"))["outbox"] == []
    again = await api.client.post(f"/api/outbox/{failed[0]['id']}/retry")
    assert again.status_code == 404  # sent now: nothing failed to retry
    assert (await api.client.get("/api/outbox", params={"state": "lost"})).status_code == 400


async def test_a_browser_posts_to_the_api_with_the_csrf_header(api: Api) -> None:
    await turn(api, "hello", "hi")
    async with client_of(str(api.client.base_url), None) as browser:
        login = await browser.post("/login", data={"token": TOKEN, "next": "/"})
        assert login.status_code == 303
        page = (await browser.get("/")).text
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        refused = await browser.post("/api/sessions/main/stop", json={})
        assert refused.status_code == 403
        allowed = await browser.post("/api/sessions/main/stop", json={}, headers={"X-CSRF-Token": csrf})
        assert allowed.status_code == 200


async def test_the_event_stream_shows_a_turn_as_it_happens(api: Api) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    subscribed = asyncio.Event()

    async def watch() -> None:
        async with api.client.stream("GET", "/api/events") as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            kind = ""
            async for line in stream.aiter_lines():
                if line == ": connected":
                    subscribed.set()
                elif line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    seen.append((kind, json.loads(line.removeprefix("data: "))))
                    if kind == "message_out" and seen[-1][1]["kind"] == "reply":
                        return

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(subscribed.wait(), 10)  # subscribed before the turn starts
    await turn(api, "what time is it", "noon")
    await asyncio.wait_for(watcher, 10)
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "message_in" and seen[0][1]["text"] == "what time is it"
    assert kinds.index("run_started") < kinds.index("tool") < kinds.index("run_finished")
    assert seen[kinds.index("tool")][1] == {**seen[kinds.index("tool")][1], "tool": "get_current_time"}
    finished = seen[kinds.index("run_finished")][1]
    assert finished["status"] == "ok" and finished["session_key"] == "main" and finished["steps"] == 2
    assert seen[-1][1]["text"] == "noon"


async def test_stopping_the_server_ends_an_open_event_stream_at_once(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, admin_bridge(tmp_path, llm) as (harness, server, base):
        async with client_of(base) as client, client.stream("GET", "/api/events") as stream:
            lines = stream.aiter_lines()
            assert await anext(lines) == ": connected"
            started = asyncio.get_running_loop().time()
            await server.stop()
            assert asyncio.get_running_loop().time() - started < 5
        assert not harness.bridge.live.watched
