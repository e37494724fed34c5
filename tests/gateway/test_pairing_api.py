"""The admin API of DM pairing (bridge/http/pairing_api.py), on an aiohttp app of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.events import Inbound
from bridge.gateway.pairing import MAX_WRONG
from bridge.http.pairing_api import PairingApi
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import Harness, RecordingSender, running_bridge

STRANGER = "777"


@pytest.fixture
async def api(tmp_path: Path, fake_llm: FakeOpenAI) -> AsyncIterator[tuple[Harness, TestClient[Any, Any]]]:
    async with running_bridge(
        tmp_path, fake_llm, owners=["telegram:42"], telegram={"dm_policy": "pairing"}
    ) as h:
        h.bridge.add_sender(RecordingSender(surface="telegram"))
        app = web.Application()
        PairingApi(h.bridge).routes(app)
        async with TestClient(TestServer(app)) as client:
            yield h, client


async def stranger_writes(h: Harness, user: str = STRANGER) -> str:
    """A stranger DMs the bot; the code they were given."""
    sent = await h.bridge.handle(Inbound("telegram", "dm", user, user, "hello", sender_name="Ann"))
    assert sent is not None
    await asyncio.wait_for(sent, 10)
    [code] = [p.code for p in await h.bridge.pairing.pending() if p.user_id == user]
    return code


async def test_the_listing_shows_codes_waiting_and_people_approved(
    api: tuple[Harness, TestClient[Any, Any]],
) -> None:
    h, client = api
    empty = await client.get("/api/pairing")
    assert empty.status == 200 and await empty.json() == {"pending": [], "approved": []}

    code = await stranger_writes(h)
    listed = await (await client.get("/api/pairing")).json()
    [pending] = listed["pending"]
    assert {k: pending[k] for k in ("surface", "user_id", "display_name", "code")} == {
        "surface": "telegram",
        "user_id": STRANGER,
        "display_name": "Ann",
        "code": code,
    }
    assert pending["expires_at"] > pending["created_at"]
    assert listed["approved"] == []


async def test_approve_then_revoke(api: tuple[Harness, TestClient[Any, Any]]) -> None:
    h, client = api
    code = await stranger_writes(h)
    approved = await client.post("/api/pairing/approve", json={"code": code.lower()})
    assert approved.status == 200
    body = await approved.json()
    assert body["ok"] is True
    assert body["approved"]["user_id"] == STRANGER and body["approved"]["approved_by"] == "dashboard"
    assert h.bridge.pairing.is_paired("telegram", STRANGER)
    listed = await (await client.get("/api/pairing")).json()
    assert listed["pending"] == [] and [u["user_id"] for u in listed["approved"]] == [STRANGER]

    revoked = await client.post("/api/pairing/revoke", json={"surface": "telegram", "user_id": int(STRANGER)})
    assert revoked.status == 200 and await revoked.json() == {"ok": True}
    assert not h.bridge.pairing.is_paired("telegram", STRANGER)
    again = await client.post("/api/pairing/revoke", json={"surface": "telegram", "user_id": STRANGER})
    assert again.status == 404
    assert (await again.json())["error"] == "not_found"


async def test_a_wrong_code_is_not_found_and_too_many_are_refused_for_a_while(
    api: tuple[Harness, TestClient[Any, Any]],
) -> None:
    h, client = api
    code = await stranger_writes(h)
    wrong = "ABCD-EFGH" if code != "ABCD-EFGH" else "HGFE-DCBA"
    for _ in range(MAX_WRONG):
        answer = await client.post("/api/pairing/approve", json={"code": wrong})
        assert answer.status == 404
        assert await answer.json() == {
            "error": "not_found",
            "detail": "no such code: it is wrong, or it expired",
        }
    limited = await client.post("/api/pairing/approve", json={"code": code})
    assert limited.status == 429
    assert (await limited.json())["error"] == "too_many_attempts"
    assert int(limited.headers["Retry-After"]) > 0
    assert not h.bridge.pairing.is_paired("telegram", STRANGER)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/pairing/approve", {}),
        ("/api/pairing/approve", {"code": "  "}),
        ("/api/pairing/revoke", {"surface": "telegram"}),
        ("/api/pairing/revoke", {"surface": ["telegram"], "user_id": "1"}),
    ],
)
async def test_a_missing_field_is_a_bad_request(
    api: tuple[Harness, TestClient[Any, Any]], path: str, body: dict[str, Any]
) -> None:
    _, client = api
    answer = await client.post(path, json=body)
    assert answer.status == 400
    assert (await answer.json())["error"] == "bad_request"


async def test_a_form_post_works_too(api: tuple[Harness, TestClient[Any, Any]]) -> None:
    h, client = api
    code = await stranger_writes(h)
    answer = await client.post("/api/pairing/approve", data={"code": code})
    assert answer.status == 200
    assert h.bridge.pairing.is_paired("telegram", STRANGER)
