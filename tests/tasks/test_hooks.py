"""Webhooks end to end in one Bridge with its admin server: a signed POST is stored before it is
answered 202, run once in a hook session, and answered in its chat under the send policy; redeliveries,
bad signatures, oversized and malformed bodies are refused and store nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.events import Inbound
from bridge.jobs.hooks import EVENTS_PER_PASS, HookService
from bridge.sessions.keys import kind
from bridge.store.hooks import HOOK_STATES, HookEvent
from bridge.tasks.hooks import IDEMPOTENCY_HEADER, TIMESTAMP_HEADER, signature
from devkit.fakes.openai_server import FakeOpenAI, Reply, http_error, text
from tests.harness import Harness
from tests.http.conftest import admin_bridge, client_of

SECRET = "the-deploy-hooks-secret-0123"
GROUP_KEY = "test:group:g1"


def hook(**changes: Any) -> dict[str, Any]:
    return {
        "name": "deploys",
        "secret": SECRET,
        "deliver_to": GROUP_KEY,
        "prompt": "Deploy of {{body.app}} finished: {{body.status}}.",
        "id_field": "id",
        **changes,
    }


@asynccontextmanager
async def hooked(
    tmp_path: Path, llm: FakeOpenAI, *hooks: dict[str, Any], **sections: Any
) -> AsyncIterator[tuple[Harness, httpx.AsyncClient]]:
    """A Bridge serving these hooks on its admin server, with group g1 written in (so it has an
    address), and a client that sends no admin token."""
    async with admin_bridge(tmp_path, llm, hooks=list(hooks) or [hook()], **sections) as (harness, _, base):
        inbound = Inbound("test", "group", "g1", "alice", "hi", message_id="g-hi", mentioned=True)
        llm.push(text("hello group"))
        done = await harness.bridge.handle(inbound)
        assert done is not None
        await asyncio.wait_for(done, 10)
        async with client_of(base, token=None) as client:
            yield harness, client


def signed(
    body: Any, secret: str = SECRET, *, at: float | None = None, key: str | None = None, **headers: str
) -> dict[str, Any]:
    """httpx arguments of a request signed as a sender does: over '<timestamp>.<body>' (now, or `at`),
    or '<timestamp>.<key>.<body>' with the key sent as the Idempotency-Key header."""
    raw = json.dumps(body).encode()
    stamp = int(time.time() if at is None else at)
    sent = {TIMESTAMP_HEADER: str(stamp), "X-Bridge-Signature": signature(secret, raw, stamp, key)}
    if key is not None:
        sent[IDEMPOTENCY_HEADER] = key
    return {"content": raw, "headers": {**sent, **headers}}


async def answered(harness: Harness) -> int:
    """Run what is pending, as the loop would, and wait for the runs to end; how many started."""
    started = await harness.bridge.hooks.tick()
    await harness.bridge.hooks.idle()
    return started


async def events(harness: Harness) -> list[HookEvent]:
    return await harness.bridge.store.hook_events_in(HOOK_STATES)


async def test_a_signed_hook_is_stored_answered_202_and_its_answer_posted_in_the_target_chat(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        sent = await client.post("/hooks/deploys", **signed({"id": 7, "app": "shop", "status": "green"}))
        assert sent.status_code == 202, sent.text
        # Stored before the answer: the event is in the database as the 202 arrives, not yet run.
        (event,) = await events(harness)
        assert (event.state, event.event_key, event.deliver_to) == ("pending", "7", GROUP_KEY)
        assert sent.json() == {"status": "accepted", "event": event.id, "session": event.session_key}

        llm.push(text("Shop deployed, all green."))
        assert await answered(harness) == 1
        assert harness.sender.of("reply")[-1] == "Shop deployed, all green."
        assert harness.sender.sent[-1].route.chat_id == "g1"
        asked = llm.requests[-1]["messages"][-1]["content"]
        assert "Deploy of shop finished: green." in asked
        assert "Webhook 'deploys'" in asked and "not as instructions" in asked
        (done,) = await events(harness)
        assert done.state == "ok" and done.run_id is not None
        run = await harness.bridge.store.get_run(done.run_id)
        assert run is not None and run.channel == "hook"


async def test_the_secret_as_a_bearer_token_is_accepted_too(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        sent = await client.post(
            "/hooks/deploys", json={"id": 1}, headers={"Authorization": f"Bearer {SECRET}"}
        )
        assert sent.status_code == 202, sent.text
        assert len(await events(harness)) == 1


async def test_a_redelivered_event_is_a_no_op(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        body = {"id": "evt-1", "app": "shop", "status": "green"}
        assert (await client.post("/hooks/deploys", **signed(body))).status_code == 202
        llm.push(text("Deployed."))
        assert await answered(harness) == 1
        # The sender's retry, signed again: a request sent twice as it was is a replay (see
        # test_hook_replay.py).
        again = await client.post("/hooks/deploys", **signed(body, at=time.time() - 2))
        assert again.status_code == 200 and again.json()["status"] == "duplicate"
        assert again.json()["state"] == "ok"
        # With an id field, the body's id names the event, whatever Idempotency-Key is sent, signed
        # or not.
        keyed = signed(body, at=time.time() - 1, key="another-key")
        assert (await client.post("/hooks/deploys", **keyed)).json()["status"] == "duplicate"
        assert await answered(harness) == 0
        assert len(await events(harness)) == 1
        assert harness.sender.of("reply").count("Deployed.") == 1


async def test_two_deliveries_of_one_event_at_once_store_and_run_it_once(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        body = {"id": "same", "app": "shop", "status": "green"}
        # Six signings (each a second apart, so six signatures) of one event, as a sender's retries.
        tries = [signed(body, at=time.time() - n) for n in range(6)]
        answers = await asyncio.gather(*(client.post("/hooks/deploys", **one) for one in tries))
        assert sorted(a.status_code for a in answers) == [200] * 5 + [202]
        llm.push(text("Once."))
        await answered(harness)
        assert harness.sender.of("reply").count("Once.") == 1


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Bridge-Signature": "sha256=" + "0" * 64},
        {"X-Bridge-Signature": "not hex at all"},
        {"Authorization": "Bearer the-wrong-secret-0000000"},
        {"Authorization": "Basic " + SECRET},
    ],
    ids=["none", "wrong-hmac", "garbage", "wrong-bearer", "basic"],
)
async def test_a_bad_signature_is_refused_with_401_and_stores_nothing(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        refused = await client.post("/hooks/deploys", json={"id": 1}, headers=headers)
        assert refused.status_code == 401
        assert await events(harness) == []


async def test_a_signature_of_another_body_is_refused(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        good = signed({"id": 1, "status": "green"})
        tampered = json.dumps({"id": 1, "status": "red"}).encode()
        refused = await client.post("/hooks/deploys", content=tampered, headers=good["headers"])
        assert refused.status_code == 401
        assert await events(harness) == []


async def test_a_body_over_the_cap_is_refused_with_413_even_without_a_length(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, hook(max_body_bytes=1024)) as (harness, client):
        big = signed({"id": 1, "pad": "x" * 2000})
        assert (await client.post("/hooks/deploys", **big)).status_code == 413

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(3):
                yield b"x" * 600

        # Chunked, no Content-Length: cut off as soon as it passes the cap.
        streamed = await client.post(
            "/hooks/deploys", content=chunks(), headers={"Authorization": f"Bearer {SECRET}"}
        )
        assert streamed.status_code == 413
        assert await events(harness) == []


async def test_malformed_requests_get_clear_errors_and_store_nothing(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        not_json = b"{not json"
        stamp = int(time.time())
        headers = {"X-Bridge-Signature": signature(SECRET, not_json, stamp), TIMESTAMP_HEADER: str(stamp)}
        bad = await client.post("/hooks/deploys", content=not_json, headers=headers)
        assert bad.status_code == 400 and "not JSON" in bad.json()["detail"]
        unknown = await client.post("/hooks/nope", **signed({"id": 1}))
        assert unknown.status_code == 404
        listed = await client.get("/hooks/deploys")
        assert listed.status_code in (401, 405)
        nested = await client.post("/hooks/deploys", **signed({"id": {"not": "a value"}}))
        assert nested.status_code == 400 and "id" in nested.json()["detail"]
        assert await events(harness) == []


async def test_hooks_take_no_admin_token_and_the_admin_routes_take_no_hook_secret(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (_, client):
        admin_token = client_of("http://x").headers["Authorization"]
        as_admin = await client.post("/hooks/deploys", json={"id": 1}, headers={"Authorization": admin_token})
        assert as_admin.status_code == 401
        as_hook = await client.get("/api/sessions", headers={"Authorization": f"Bearer {SECRET}"})
        assert as_hook.status_code == 401


async def test_per_event_sessions_are_hook_sessions_of_their_own_and_a_fixed_one_keeps_history(
    tmp_path: Path,
) -> None:
    fixed = hook(name="builds", session="fixed", id_field=None, prompt="Build {{body.n}}")
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, hook(), fixed) as (harness, client):
        for n in (1, 2):
            assert (await client.post("/hooks/deploys", **signed({"id": n}))).status_code == 202
            assert (await client.post("/hooks/builds", **signed({"n": n}))).status_code == 202
        llm.push(*(text(f"answer {n}") for n in range(4)))
        await answered(harness)
        sessions: dict[str, set[str]] = {e.hook: set() for e in await events(harness)}
        for event in await events(harness):
            sessions[event.hook].add(event.session_key)
        assert sessions["builds"] == {"hook:builds"}
        assert len(sessions["deploys"]) == 2
        assert all(key.startswith("hook:deploys.") for key in sessions["deploys"])
        listed = await harness.bridge.store.list_sessions(limit=50)
        hooks = {s.session.key for s in listed if kind(s.session.key) == "hook"}
        assert hooks == sessions["builds"] | sessions["deploys"]
        # The fixed session's second run saw the first event in its history.
        second = next(r for r in llm.requests if "Build 2" in r["messages"][-1]["content"])
        assert any("Build 1" in str(m.get("content")) for m in second["messages"][:-1])


async def test_an_answer_to_a_shadowed_chat_is_suppressed_and_recorded(tmp_path: Path) -> None:
    policy = {"send_policy": {"rules": [{"action": "deny", "match": {"key_prefix": "test:group:"}}]}}
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, session=policy) as (harness, client):
        assert (await client.post("/hooks/deploys", **signed({"id": 1}))).status_code == 202
        llm.push(text("Secret deploy news"))
        await answered(harness)
        assert "Secret deploy news" not in harness.sender.of("reply")
        (row,) = [
            r
            for r in await harness.bridge.store.outbox(state="suppressed")
            if r.item.text == "Secret deploy news"
        ]
        assert row.item.session_key == GROUP_KEY and "rule" in (row.item.reason or "")


async def test_a_failed_run_is_recorded_and_its_chat_told(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        assert (await client.post("/hooks/deploys", **signed({"id": 1}))).status_code == 202
        llm.push(http_error(400, "bad request"))
        await answered(harness)
        (event,) = await events(harness)
        assert event.state == "error" and event.detail
        (notice,) = [n for n in harness.sender.of("notice") if "could not be answered" in n]
        assert "'deploys'" in notice


async def test_a_hook_aimed_at_a_chat_with_no_address_runs_nothing_and_says_why(tmp_path: Path) -> None:
    nowhere = hook(name="lost", deliver_to="main")
    async with FakeOpenAI() as llm, hooked(tmp_path, llm, nowhere) as (harness, client):
        asked = len(llm.requests)
        assert (await client.post("/hooks/lost", **signed({"id": 1}))).status_code == 202
        await answered(harness)
        (event,) = await events(harness)
        assert event.state == "error" and "no chat to deliver to" in (event.detail or "")
        assert len(llm.requests) == asked


async def test_at_start_events_a_crash_left_are_run_once_or_settled_never_run_twice(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, client):
        store, service = harness.bridge.store, harness.bridge.hooks
        for n in (1, 2, 3, 4):
            assert (await client.post("/hooks/deploys", **signed({"id": n}))).status_code == 202
        done, cut, unstarted, pending = sorted(await events(harness), key=lambda e: e.id)
        # As a crash leaves them: one whose run ended well (its answer queued with that end), one
        # whose run began and never ended, one claimed whose run never began, one never claimed.
        llm.push(text("finished before the crash"))
        assert await store.claim_hook_event(done.id, "r-done", 0.0)
        await harness.bridge.headless.run(
            key=done.session_key,
            prompt="x",
            sender="hook:deploys",
            channel="hook",
            run_id="r-done",
            deliver_to=GROUP_KEY,
            authority=harness.bridge.authorities.for_hook("deploys", GROUP_KEY),
        )
        assert await store.claim_hook_event(cut.id, "r-cut", 0.0)
        session = await store.ensure_active_session(cut.session_key)
        await store.start_run("r-cut", session.id, "hook", "hash")
        await store.abort_interrupted_runs()  # what the start does before the hooks' loop begins
        assert await store.claim_hook_event(unstarted.id, "r-unstarted", 0.0)
        llm.push(text("never began, so run now"), text("the pending one"))
        asked = len(llm.requests)
        await service.start(alone=True)
        try:
            await asyncio.wait_for(_until_settled(harness), 10)
        finally:
            await service.stop()
        states = {e.id: e.state for e in await events(harness)}
        assert states == {done.id: "ok", cut.id: "interrupted", unstarted.id: "ok", pending.id: "ok"}
        # Two runs: the one that never began and the pending one; nothing ran twice.
        assert len(llm.requests) == asked + 2
        replies = harness.sender.of("reply")
        assert replies.count("finished before the crash") == 1
        assert {"never began, so run now", "the pending one"} <= set(replies)
        (notice,) = [n for n in harness.sender.of("notice") if "cut short by a restart" in n]
        assert "'deploys'" in notice and "(2)" in notice


async def _until_settled(harness: Harness) -> None:
    # The loop's own pass runs the pending event; its state lives in the database, not in an event.
    while await harness.bridge.store.hook_events_in(("pending", "running")):  # noqa: ASYNC110
        await asyncio.sleep(0.02)


async def test_a_burst_larger_than_one_pass_asks_for_the_next_pass_at_once(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, hooked(tmp_path, llm) as (harness, _):
        service = harness.bridge.hooks
        deploys = service.get("deploys")
        assert deploys is not None
        for n in range(EVENTS_PER_PASS + 5):
            await service.accept(deploys, {"id": n}, str(n))
        llm.push(*(text(f"answer {n}") for n in range(EVENTS_PER_PASS + 5)))
        service._wake.clear()
        assert await service.tick() == EVENTS_PER_PASS
        assert service._wake.is_set()  # the loop goes round again without waiting for its poll
        service._wake.clear()
        assert await service.tick() == 5
        assert not service._wake.is_set()
        await service.idle()
        assert harness.sender.of("reply").count("answer 0") == 1
        assert await harness.bridge.store.hook_events_in(("pending", "running")) == []


class HoldsTheChat:
    """Holds the chat's request until the test opens the gate; answers the webhook's at once."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def __call__(self, request: dict[str, Any]) -> Reply:
        if "hold on" in str(request["messages"][-1]["content"]):
            await self.gate.wait()
            return text("done holding")
        return text("deploy answered")


async def test_an_event_still_queued_at_a_shutdown_is_left_for_the_next_start_which_runs_it_once(
    tmp_path: Path,
) -> None:
    model = HoldsTheChat()
    runs = {"max_concurrent_runs": 1, "shutdown_grace_s": 0.2}
    async with FakeOpenAI(model) as llm, hooked(tmp_path, llm, runs=runs) as (harness, client):
        bridge = harness.bridge
        # The one run slot is taken by a chat turn that waits; the event queues behind it.
        waiting = await bridge.handle(Inbound("test", "dm", "u1", "u1", "hold on", message_id="h1"))
        await llm.wait_for_requests(2, timeout=5)  # the group's greeting, then this one
        assert (await client.post("/hooks/deploys", **signed({"id": 1}))).status_code == 202
        assert await bridge.hooks.tick() == 1
        await bridge.shutdown()  # SIGTERM: the chat turn is stopped after the grace, the event dropped
        await bridge.hooks.stop()
        (event,) = await events(harness)
        assert event.state == "running" and event.run_id is not None
        assert await bridge.store.get_run(event.run_id) is None  # it never began
        assert not [n for n in harness.sender.of("notice") if "deploys" in n]
        model.gate.set()
        assert waiting is not None
        await asyncio.wait_for(waiting, 5)

        # The next start (here, a new service on the same store) runs it, once.
        restarted = HookService(bridge.settings, bridge.store, bridge.headless)
        await restarted.start(alone=True)
        try:
            await restarted.idle()
        finally:
            await restarted.stop()
        (event,) = await events(harness)
        assert event.state == "ok"
        assert sum("Deploy of" in str(r["messages"][-1]["content"]) for r in llm.requests) == 1
