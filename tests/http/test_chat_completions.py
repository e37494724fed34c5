"""POST /v1/chat/completions with plain httpx, as an OpenAI client calls it: answers whole and streamed,
`model` picking the session's profile, sessions that keep their history across calls, the session named
by header or `user`, OpenAI-shaped errors, and the token."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.app import Bridge
from bridge.http.server import AdminServer
from bridge.http.webchat import WEB_OPERATOR
from devkit.fakes.openai_server import FakeOpenAI, delay, text, tool_call
from tests.harness import OWNER, Harness, make_settings
from tests.http.conftest import TOKEN, admin_bridge, client_of
from tests.pg import PostgresServer, free_port

URL = "/v1/chat/completions"


@dataclass
class Api:
    harness: Harness
    client: httpx.AsyncClient
    # The second model server, behind the profile "other".
    other: FakeOpenAI

    @property
    def llm(self) -> FakeOpenAI:
        return self.harness.llm

    async def ask(self, words: str, *, status: int = 200, **fields: Any) -> dict[str, Any]:
        headers = fields.pop("headers", {})
        body = {"model": "bridge", "messages": [{"role": "user", "content": words}], **fields}
        answer = await self.client.post(URL, json=body, headers=headers)
        assert answer.status_code == status, answer.text
        data: dict[str, Any] = answer.json()
        return data

    async def history(self, key: str) -> list[tuple[str, str | None, str]]:
        store = self.harness.bridge.store
        session = await store.active_session(key)
        assert session is not None, key
        return [(m.kind, m.sender, m.content) for m in await store.history(session.id, 100)]


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with FakeOpenAI() as other, FakeOpenAI() as llm:
        profiles = {"profiles": {"other": {"base_url": other.base_url, "model": "other-model"}}}
        async with admin_bridge(tmp_path, llm, llm=profiles) as (harness, _, base), client_of(base) as client:
            yield Api(harness, client, other)


def content(data: dict[str, Any]) -> str:
    return str(data["choices"][0]["message"]["content"])


async def test_an_answer_comes_whole_with_its_id_model_and_usage(api: Api) -> None:
    api.llm.push(text("Hello from Bridge.", prompt_tokens=42, completion_tokens=7))
    data = await api.ask("hi")
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    assert data["model"] == "bridge" and isinstance(data["created"], int)
    assert data["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello from Bridge."},
            "finish_reason": "stop",
        }
    ]
    assert data["usage"] == {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
    # No session named: the default web session, a member's DM of its own.
    assert await api.history("web:dm:api") == [
        ("user", "web:api", "hi"),
        ("assistant", None, "Hello from Bridge."),
    ]


async def test_a_streamed_answer_comes_in_chunks_then_done(api: Api) -> None:
    api.llm.push(tool_call("get_current_time", {}), text("It is noon, more or less."))
    body = {
        "model": "bridge",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "what time is it?"}],
    }
    chunks: list[dict[str, Any]] = []
    async with api.client.stream("POST", URL, json=body) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in answer.aiter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    deltas = [c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]]
    assert len([d for d in deltas if d]) > 1, "the answer came in one piece, not streamed"
    assert "".join(deltas) == "It is noon, more or less."
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finished = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finished[-1] == "stop" and set(finished[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 30


async def test_model_picks_the_sessions_profile_as_model_name_does_and_bridge_keeps_it(api: Api) -> None:
    api.other.push(text("from the other model"), text("still the other"))
    assert content(await api.ask("hi", model="other", user="p")) == "from the other model"
    assert api.other.last_request["model"] == "other-model" and api.llm.requests == []
    session = await api.harness.bridge.store.active_session("web:dm:p")
    assert session is not None and session.model_profile == "other"
    # "bridge": whatever the session runs on now.
    assert content(await api.ask("again", user="p")) == "still the other"
    api.llm.push(text("back on the default"))
    assert content(await api.ask("and now", model="default", user="p")) == "back on the default"
    assert api.llm.last_request["model"] == "fake"
    listed = (await api.client.get("/v1/models")).json()
    assert [m["id"] for m in listed["data"]] == ["bridge", "default", "other"]


async def test_a_session_keeps_its_history_across_calls(api: Api) -> None:
    api.llm.push(text("Nice to meet you, Ada."), text("You are Ada."))
    await api.ask("my name is Ada", user="ada")
    # A client sends the whole conversation each time; Bridge takes only the last user message.
    again = [
        {"role": "system", "content": "ignored: Bridge has its own prompt"},
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": [{"type": "text", "text": "what is my name?"}]},
    ]
    data = await api.ask("", messages=again, user="ada")
    assert content(data) == "You are Ada."
    sent = [(m["role"], m.get("content")) for m in api.llm.last_request["messages"] if m["role"] != "system"]
    assert sent == [
        ("user", "my name is Ada"),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "what is my name?"),
    ]
    assert [row[2] for row in await api.history("web:dm:ada")] == [
        "my name is Ada",
        "Nice to meet you, Ada.",
        "what is my name?",
        "You are Ada.",
    ]


async def test_the_header_names_the_session_before_user_and_main_is_the_operators(api: Api) -> None:
    api.llm.push(text("one"), text("two"))
    answer = await api.client.post(
        URL,
        json={"model": "bridge", "user": "from-user", "messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Bridge-Session": "from-header"},
    )
    assert answer.status_code == 200 and answer.headers["X-Bridge-Session-Key"] == "web:dm:from-header"
    assert await api.harness.bridge.store.active_session("web:dm:from-user") is None
    await api.ask("hello main", headers={"X-Bridge-Session": "main"})
    assert await api.history("main") == [("user", WEB_OPERATOR, "hello main"), ("assistant", None, "two")]


async def test_a_command_is_answered_by_its_notice(api: Api) -> None:
    assert "/clear" in content(await api.ask("/help", user="c"))
    assert "This chat now uses the model profile other" in content(
        await api.ask("/model other", headers={"X-Bridge-Session": "main"})
    )
    assert api.llm.requests == []


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}, 404, "model_not_found"),
        ({"model": "bridge", "messages": [{"role": "system", "content": "hi"}]}, 400, "no_user_message"),
        ({"model": "bridge", "messages": []}, 400, "invalid_body"),
        ({"messages": [{"role": "user", "content": "hi"}]}, 400, "invalid_body"),
        ({"model": "bridge", "messages": [{"role": "user", "content": "  "}]}, 400, "empty_message"),
        (
            {"model": "bridge", "user": "a b", "messages": [{"role": "user", "content": "hi"}]},
            400,
            "invalid_session",
        ),
        (
            {"model": "bridge", "user": "operator", "messages": [{"role": "user", "content": "hi"}]},
            400,
            "invalid_session",
        ),
        (
            {
                "model": "bridge",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            },
            400,
            "unsupported_content",
        ),
    ],
)
async def test_a_bad_request_gets_an_openai_error_and_nothing_is_stored(
    api: Api, body: dict[str, Any], status: int, code: str
) -> None:
    answer = await api.client.post(URL, json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == code and error["message"]
    assert api.llm.requests == [] and await api.harness.bridge.store.list_sessions(limit=5) == []


async def test_no_answer_in_time_is_a_504_and_the_message_stays_stored(api: Api) -> None:
    api.llm.push(delay(1.5, text("late, but here")))
    error = await api.ask("slow one", status=504, user="slow", headers={"X-Bridge-Timeout": "0.3"})
    assert error["error"]["code"] == "timeout" and "web:dm:slow" in error["error"]["message"]
    assert await api.history("web:dm:slow") == [("user", "web:slow", "slow one")]
    # The run went on, and wrote its answer after the next message came in: that message's caller gets
    # the answer of the run that took it up, not the slow run's (whose input ends before it).
    api.llm.push(text("quick"))
    assert content(await api.ask("next", user="slow")) == "quick"
    assert [row[2] for row in await api.history("web:dm:slow")] == [
        "slow one",
        "next",
        "late, but here",
        "quick",
    ]


async def test_the_endpoint_needs_the_token(api: Api) -> None:
    body = {"model": "bridge", "messages": [{"role": "user", "content": "hi"}]}
    base = str(api.client.base_url)
    async with (
        client_of(base, token=None) as nobody,
        client_of(base, token="not-the-token-0123456789") as wrong,
    ):
        assert (await nobody.post(URL, json=body)).status_code == 401
        assert (await wrong.post(URL, json=body)).status_code == 401
        assert (await nobody.get("/v1/models")).status_code == 401
    assert api.llm.requests == []


async def test_where_workers_share_a_database_the_call_waits_for_the_answer_in_it(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """On PostgreSQL a message is queued for whichever worker claims its chat, so no future of this
    process says when it is answered: the call finds the answer in the database."""
    async with FakeOpenAI() as llm:
        settings = make_settings(
            tmp_path,
            llm.base_url,
            owners=[f"test:{OWNER}", WEB_OPERATOR],
            storage={"url": postgres.database()},
            admin={"enabled": True, "port": free_port(), "token": TOKEN},
        )
        async with Bridge(settings, standby=asyncio.Event()) as bridge:
            assert bridge.shared
            server = AdminServer(bridge, [], settings)
            await server.start()
            try:
                await bridge.recover()  # starts claiming
                llm.push(text("Answered by a worker."), text("Streamed by a worker."))
                async with client_of(server.url.rstrip("/")) as client:
                    body = {"model": "bridge", "messages": [{"role": "user", "content": "hi"}]}
                    answer = await client.post(URL, json=body, headers={"X-Bridge-Session": "main"})
                    assert answer.status_code == 200, answer.text
                    assert content(answer.json()) == "Answered by a worker."
                    async with client.stream("POST", URL, json={**body, "stream": True}) as streamed:
                        lines = [line async for line in streamed.aiter_lines() if line]
                chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
                said = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
                assert said == "Streamed by a worker." and lines[-1] == "data: [DONE]"
            finally:
                await server.stop()
