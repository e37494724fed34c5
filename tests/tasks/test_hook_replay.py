"""Webhook replay (issue 30, break 6): a captured signed request, sent again as it was or with a new
Idempotency-Key header, makes no second event; a signature covers a timestamp, and one too old, too
far ahead or missing is refused with 401; the Idempotency-Key header counts only inside the
signature. On 65a0060 the header was not signed, so each resend with a new one was a new event."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.tasks.hooks import IDEMPOTENCY_HEADER, TIMESTAMP_HEADER, signature
from devkit.fakes.openai_server import FakeOpenAI, text
from tests.tasks.test_hooks import SECRET, answered, events, hook, hooked, signed


async def post(client: httpx.AsyncClient, request: dict[str, Any], name: str = "deploys") -> httpx.Response:
    return await client.post(f"/hooks/{name}", **request)


async def test_a_fresh_signed_request_is_accepted_and_its_run_answers(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        sent = await post(client, signed({"id": "r-1", "app": "shop", "status": "green"}))
        assert sent.status_code == 202, sent.text
        llm.push(text("Shop is green."))
        assert await answered(harness) == 1
        assert harness.sender.of("reply")[-1] == "Shop is green."


async def test_a_captured_request_sent_again_with_new_idempotency_keys_makes_no_new_event(
    tmp_path: Path,
) -> None:
    # A hook without id_field: before, only the header told events apart, and it was not signed.
    plain = hook(id_field=None)
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, plain) as (harness, client):
        captured = signed({"app": "shop", "status": "green"})
        captured["headers"][IDEMPOTENCY_HEADER] = "first"  # not signed: as a sender may add one
        assert (await post(client, captured)).status_code == 202
        for n in range(3):
            resent = {**captured, "headers": {**captured["headers"], IDEMPOTENCY_HEADER: f"forged-{n}"}}
            refused = await post(client, resent)
            assert refused.status_code == 401, refused.text
            assert "taken before" in refused.json()["detail"]
        # One whose key is inside the signature: a new key breaks the signature.
        keyed = signed({"app": "shop", "status": "red"}, key="second")
        assert (await post(client, keyed)).status_code == 202
        forged = {**keyed, "headers": {**keyed["headers"], IDEMPOTENCY_HEADER: "forged"}}
        assert (await post(client, forged)).json()["detail"] == "missing or wrong signature"
        assert len(await events(harness)) == 2
        llm.push(text("once"), text("twice"))
        assert await answered(harness) == 2


async def test_a_body_signed_request_of_an_old_sender_is_refused_and_names_the_missing_header(
    tmp_path: Path,
) -> None:
    """What the attack of issue 30 replayed: a signature of the body alone, sent again as it was and
    with a new header each time (on 65a0060: one event each). Now nothing in it says when it was
    made, so it is refused, and stores nothing."""
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, hook(id_field=None)) as (harness, client):
        raw = json.dumps({"app": "shop", "status": "green"}).encode()
        for key in (None, None, "k-1", "k-2"):
            headers = {
                "X-Bridge-Signature": signature(SECRET, raw),
                **({IDEMPOTENCY_HEADER: key} if key else {}),
            }
            refused = await client.post("/hooks/deploys", content=raw, headers=headers)
            assert refused.status_code == 401
            assert TIMESTAMP_HEADER in refused.json()["detail"]
        assert await events(harness) == []


async def test_a_plain_replay_is_refused_and_of_six_copies_at_once_one_is_taken(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, hook(id_field=None)) as (harness, client):
        captured = signed({"app": "shop", "status": "green"})
        assert (await post(client, captured)).status_code == 202
        again = await post(client, captured)
        assert again.status_code == 401 and "taken before" in again.json()["detail"]
        # Six copies of another captured request at once: one is taken, whichever comes first.
        other = signed({"app": "shop", "status": "red"})
        answers = await asyncio.gather(*(post(client, other) for _ in range(6)))
        assert sorted(a.status_code for a in answers) == [202] + [401] * 5
        assert len(await events(harness)) == 2


@pytest.mark.parametrize(("off", "said"), [(-301, "s ago"), (301, "ahead")], ids=["stale", "future"])
async def test_a_timestamp_further_than_max_age_s_is_refused(tmp_path: Path, off: int, said: str) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        refused = await post(client, signed({"id": 1}, at=time.time() + off))
        assert refused.status_code == 401
        detail = refused.json()["detail"]
        assert said in detail and "max_age_s (300)" in detail
        assert await events(harness) == []
        # Inside the window, either way, it is taken.
        assert (await post(client, signed({"id": 2}, at=time.time() - 290))).status_code == 202
        assert (await post(client, signed({"id": 3}, at=time.time() + 290))).status_code == 202


async def test_max_age_s_is_the_hooks_own(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, hook(max_age_s=30)) as (harness, client):
        refused = await post(client, signed({"id": 1}, at=time.time() - 40))
        assert refused.status_code == 401 and "max_age_s (30)" in refused.json()["detail"]
        assert await events(harness) == []


@pytest.mark.parametrize("stamp", ["", "soon", "-5", "1.5e9", "17000000000000"])
async def test_a_timestamp_that_is_not_unix_seconds_is_refused(tmp_path: Path, stamp: str) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        request = signed({"id": 1})
        request["headers"][TIMESTAMP_HEADER] = stamp
        refused = await post(client, request)
        assert refused.status_code == 401 and "unix seconds" in refused.json()["detail"]
        assert await events(harness) == []


async def test_a_signature_is_bound_to_its_timestamp(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        old = signed({"id": 1}, at=time.time() - 1000)
        # The stale request's timestamp moved to now: its signature no longer holds.
        old["headers"][TIMESTAMP_HEADER] = str(int(time.time()))
        refused = await post(client, old)
        assert refused.status_code == 401 and refused.json()["detail"] == "missing or wrong signature"
        assert await events(harness) == []


async def test_a_signed_idempotency_key_names_the_event_and_an_unsigned_one_is_ignored(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, hook(id_field=None)) as (harness, client):
        body = {"app": "shop", "status": "green"}
        assert (await post(client, signed(body, key="deploy-4812"))).status_code == 202
        # The sender's retry, signed again a second later with the same key: a redelivery.
        retry = await post(client, signed(body, at=time.time() - 1, key="deploy-4812"))
        assert retry.status_code == 200 and retry.json()["status"] == "duplicate"
        # A key sent beside a signature that leaves it out names nothing: another event.
        unsigned = signed(body, at=time.time() - 2, **{IDEMPOTENCY_HEADER: "deploy-4812"})
        assert (await post(client, unsigned)).status_code == 202
        keys = sorted(str(e.event_key) for e in await events(harness))
        assert keys == ["None", "deploy-4812"]


async def test_bearer_senders_are_still_taken_and_can_be_replayed_as_documented(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, hook(id_field=None)) as (harness, client):
        bearer = {"json": {"app": "shop"}, "headers": {"Authorization": f"Bearer {SECRET}"}}
        for _ in range(2):
            assert (await post(client, bearer)).status_code == 202
        assert len(await events(harness)) == 2


async def test_require_timestamp_false_takes_a_signature_of_the_body_alone(tmp_path: Path) -> None:
    legacy = hook(require_timestamp=False)
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, legacy) as (harness, client):
        raw = json.dumps({"id": 1}).encode()
        sent = await client.post(
            "/hooks/deploys", content=raw, headers={"X-Bridge-Signature": signature(SECRET, raw)}
        )
        assert sent.status_code == 202
        # A timestamped request is still held to its window and taken once.
        assert (await post(client, signed({"id": 2}, at=time.time() - 1000))).status_code == 401
        fresh = signed({"id": 3})
        assert (await post(client, fresh)).status_code == 202
        assert (await post(client, fresh)).status_code == 401
        assert len(await events(harness)) == 2


async def test_replays_are_logged_once_a_minute_not_once_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (_, client):
        captured = signed({"id": 1})
        assert (await post(client, captured)).status_code == 202
        with caplog.at_level(logging.WARNING, logger="bridge.http.hooks"):
            for _ in range(5):
                assert (await post(client, captured)).status_code == 401
        lines = [r for r in caplog.records if "taken before" in r.getMessage()]
        assert len(lines) == 1 and TIMESTAMP_HEADER in lines[0].getMessage()
