"""The dashboard's tasks and hooks: GET /api/tasks and /tasks, pause, resume, run now and cancel as the
operator under the tasks' own authority rule, webhook events listed, and the firings and events
counted on /metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.store.tasks import TaskRow
from devkit.fakes.openai_server import FakeOpenAI, http_error, text
from tests.harness import Harness
from tests.http.conftest import admin_bridge, client_of
from tests.tasks.chat import GROUP_KEY, T0, Clock, in_group, scheduling
from tests.tasks.test_hooks import hook, signed


@dataclass
class Site:
    harness: Harness
    client: httpx.AsyncClient
    clock: Clock

    async def schedule(self, when: str, prompt: str) -> TaskRow:
        """A task made by the owner in main, through the model's schedule_task call."""
        before = {t.id for t in await self.harness.bridge.tasks.tasks_of(None)}
        scheduling(self.harness, when, prompt)
        await self.harness.say(f"please: {prompt}, {when}")
        (task,) = [t for t in await self.harness.bridge.tasks.tasks_of(None) if t.id not in before]
        return task

    async def fire(self) -> int:
        """One pass of the tasks' loop, as the running bot makes it, and its runs to their end."""
        started = await self.harness.bridge.tasks.tick()
        await self.harness.bridge.tasks.idle()
        return started

    async def task(self, task_id: str) -> TaskRow:
        row = await self.harness.bridge.store.get_task(task_id)
        assert row is not None
        return row


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    async with FakeOpenAI() as llm, admin_bridge(tmp_path, llm, hooks=[hook()]) as (harness, _, base):
        clock = Clock()
        harness.bridge.tasks.clock = clock
        async with client_of(base) as client:
            yield Site(harness, client, clock)


async def metrics(client: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = await client.get("/metrics")
    assert answer.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def firings_counted(found: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {
        dict(labels)["state"]: value
        for (name, labels), value in found.items()
        if name == "bridge_task_firings_total"
    }


async def act(site: Site, task_id: str, action: str) -> httpx.Response:
    return await site.client.post(f"/api/tasks/{task_id}/{action}")


# -- listing -----------------------------------------------------------------------------------


async def test_the_api_lists_each_task_with_its_chat_maker_schedule_next_run_and_firings(site: Site) -> None:
    task = await site.schedule("0 18 * * *", "Summarise the day")
    site.clock.now = T0 + 3600
    site.harness.llm.push(text("The day, summed up."))
    assert await site.fire() == 1

    listed = (await site.client.get("/api/tasks")).json()["tasks"]
    (shown,) = listed
    assert shown["id"] == task.id and shown["state"] == "active"
    assert (shown["chat_key"], shown["deliver_to"], shown["session_key"]) == (
        "main",
        "main",
        f"cron:{task.id}",
    )
    assert shown["maker"] == "test:owner" and shown["acts_as"] == "owner test:owner in main"
    assert shown["schedule"].startswith("at 18:00") and "0 18 * * *" in shown["schedule"]
    assert shown["next_due"] == T0 + 3600 + 86400
    (firing,) = shown["firings"]
    assert firing["state"] == "ok" and firing["due_at"] == T0 + 3600
    run = await site.harness.bridge.store.get_run(firing["run_id"])
    assert run is not None and run.channel == "task"
    # The stored route and authority are not shown as raw JSON.
    assert "route" not in shown and "authority" not in shown


async def test_the_page_shows_each_task_with_its_buttons_and_the_webhook_events(site: Site) -> None:
    task = await site.schedule("0 18 * * *", "Summarise the day")
    site.clock.now = T0 + 3600
    site.harness.llm.push(text("Summed up."))
    await site.fire()
    (firing,) = await site.harness.bridge.store.firings(task.id)

    page = await site.client.get("/tasks")
    assert page.status_code == 200
    html = page.text
    assert (
        'data-live="tasks"' in html
        and 'id="tasks" data-live' in html
        and 'id="hook-events" data-live' in html
    )
    assert task.id in html and "Summarise the day" in html and "test:owner" in html
    assert f'href="/runs/{firing.run_id}"' in html and 'href="/sessions/main"' in html
    assert f'data-api="POST /api/tasks/{task.id}/pause"' in html
    assert f'data-api="POST /api/tasks/{task.id}/run"' in html
    assert f'data-confirm="Cancel task {task.id}? It never fires again."' in html
    # Times in the dashboard's zone (UTC here), as the `when` filter shows them.
    assert "2026-11-26 18:00:00" in html
    assert "POST /hooks/deploys" in html and f'href="/sessions/{GROUP_KEY}"' in html
    assert "No webhook events yet." in html


# -- actions -----------------------------------------------------------------------------------


async def test_pause_keeps_a_task_from_firing_and_resume_skips_the_due_times_it_slept_through(
    site: Site,
) -> None:
    task = await site.schedule("0 18 * * *", "Summarise the day")
    paused = await act(site, task.id, "pause")
    assert paused.status_code == 200, paused.text
    assert paused.json()["said"] == f"Paused task {task.id}: it fires nothing until it is resumed."
    assert (await site.task(task.id)).state == "paused"
    # Pausing a paused task changes nothing and is no error.
    assert (await act(site, task.id, "pause")).status_code == 200

    site.clock.now = T0 + 2 * 86400 + 3600 + 60  # two due times passed meanwhile
    assert await site.fire() == 0
    resumed = await act(site, task.id, "resume")
    assert resumed.status_code == 200, resumed.text
    after = await site.task(task.id)
    assert after.state == "active" and after.next_due == T0 + 3 * 86400 + 3600
    assert resumed.json()["said"] == f"Resumed task {task.id}: next run 2026-11-28 18:00 UTC."
    assert resumed.json()["task"]["state"] == "active"
    # Neither fired nor told as missed: pausing asked for that.
    assert await site.fire() == 0
    assert await site.harness.bridge.store.firings(task.id) == []
    assert not [t for t in site.harness.sender.of("notice") if "did not run" in t]


async def test_run_now_fires_a_paused_task_once_with_a_run_and_keeps_its_schedule(site: Site) -> None:
    task = await site.schedule("0 18 * * *", "Summarise the day")
    assert (await act(site, task.id, "pause")).status_code == 200
    asked = await act(site, task.id, "run")
    assert asked.status_code == 200, asked.text
    assert asked.json()["said"] == f"Task {task.id} fires now, once; its schedule stays as it is."

    site.harness.llm.push(text("Here is the summary, early."))
    assert await site.fire() == 1
    assert await site.fire() == 0
    assert site.harness.sender.of("reply")[-1] == "Here is the summary, early."
    (firing,) = (await site.client.get("/api/tasks")).json()["tasks"][0]["firings"]
    assert (firing["state"], firing["detail"]) == ("ok", "run now")
    run = await site.harness.bridge.store.get_run(firing["run_id"])
    assert run is not None and run.status == "ok"
    after = await site.task(task.id)
    assert (after.state, after.next_due) == ("paused", task.next_due)


async def test_cancel_ends_a_task_and_an_ended_task_is_refused_with_409_and_a_sentence(site: Site) -> None:
    task = await site.schedule("in 1 hour", "Call Sam")
    cancelled = await act(site, task.id, "cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["said"] == f"Cancelled task {task.id}: it never fires again."
    assert (await site.task(task.id)).state == "cancelled"
    assert (await site.client.get("/api/tasks")).json()["tasks"] == []
    ended = (await site.client.get("/api/tasks", params={"ended": "1"})).json()["tasks"]
    assert [(t["id"], t["state"]) for t in ended] == [(task.id, "cancelled")]

    for action, verb in [
        ("resume", "resumed"),
        ("pause", "paused"),
        ("run", "run now"),
        ("cancel", "cancelled"),
    ]:
        refused = await act(site, task.id, action)
        assert refused.status_code == 409, (action, refused.text)
        assert refused.json() == {
            "error": "conflict",
            "detail": f"Task {task.id} was cancelled, so it can't be {verb}.",
        }
    site.clock.now = T0 + 7200
    assert await site.fire() == 0


async def test_an_unknown_task_or_action_answers_404_in_json(site: Site) -> None:
    for action in ("pause", "resume", "run", "cancel"):
        answer = await act(site, "nope1234", action)
        assert answer.status_code == 404
        assert answer.json() == {"error": "not_found", "detail": "No scheduled task nope1234."}
    task = await site.schedule("in 1 hour", "Call Sam")
    answer = await act(site, task.id, "explode")
    assert answer.status_code == 404 and "pause, resume, run or cancel" in answer.json()["detail"]
    assert (await site.task(task.id)).state == "active"


async def test_the_dashboard_acts_with_the_operators_authority_through_the_tasks_rule(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = site.harness
    harness.llm.push(text("hello group"))
    await in_group(harness, "hi")
    scheduling(harness, "in 1 hour", "Group reminder")
    await in_group(harness, "please: Group reminder, in 1 hour")  # a member, alice, makes it
    (task,) = await harness.bridge.tasks.tasks_of(GROUP_KEY)
    assert task.maker == "test:alice"

    # Were the dashboard's authority another member of that group, the rule would refuse it.
    carol = harness.bridge.authorities.for_chat(GROUP_KEY, "test:carol")
    monkeypatch.setattr(harness.bridge.authorities, "operator", lambda: carol)
    for action in ("pause", "run", "cancel"):
        refused = await act(site, task.id, action)
        assert refused.status_code == 403, refused.text
        assert "made by someone else" in refused.json()["detail"]
    assert (await site.task(task.id)).state == "active"
    monkeypatch.undo()
    # The operator may, in any chat.
    assert (await act(site, task.id, "cancel")).status_code == 200
    assert (await site.task(task.id)).state == "cancelled"


# -- webhook events and the metrics -------------------------------------------------------------


async def answer_hook(site: Site, body: dict[str, Any]) -> None:
    sent = await site.client.post("/hooks/deploys", **signed(body))
    assert sent.status_code == 202, sent.text
    await site.harness.bridge.hooks.tick()
    await site.harness.bridge.hooks.idle()


async def test_webhook_events_are_listed_newest_first_with_their_state_and_run(site: Site) -> None:
    harness = site.harness
    harness.llm.push(text("hello group"))
    await in_group(harness, "hi")  # the group gets an address
    harness.llm.push(text("Shop is green."))
    await answer_hook(site, {"id": "e1", "app": "shop", "status": "green"})
    harness.llm.push(http_error(400, "bad request"))
    await answer_hook(site, {"id": "e2", "app": "shop", "status": "red"})

    events = (await site.client.get("/api/hooks/events")).json()["events"]
    assert [(e["hook"], e["event_key"], e["state"]) for e in events] == [
        ("deploys", "e2", "error"),
        ("deploys", "e1", "ok"),
    ]
    run = await harness.bridge.store.get_run(events[1]["run_id"])
    assert run is not None and run.channel == "hook"
    assert (await site.client.get("/api/hooks/events", params={"limit": "1"})).json()["events"][0][
        "event_key"
    ] == "e2"
    assert (await site.client.get("/api/hooks/events", params={"limit": "x"})).status_code == 400
    html = (await site.client.get("/tasks")).text
    assert f'href="/runs/{events[1]["run_id"]}"' in html and "e2" in html


async def test_task_firings_and_hook_events_are_counted_on_metrics_by_state(site: Site) -> None:
    harness = site.harness
    before = firings_counted(await metrics(site.client))
    assert before == {"ok": 0, "error": 0, "missed": 0, "interrupted": 0}

    task = await site.schedule("0 * * * *", "Hourly check")
    site.clock.now = T0 + 3600
    harness.llm.push(text("Checked."))
    assert await site.fire() == 1
    site.clock.now = T0 + 2 * 3600
    harness.llm.push(http_error(400, "bad request"))
    assert await site.fire() == 1
    # Back 30 minutes after the hour, past catch_up_s: missed.
    site.clock.now = T0 + 5 * 3600 + 1800
    assert await site.fire() == 0
    states = [f.state for f in await harness.bridge.store.firings(task.id)]
    assert sorted(states) == ["error", "missed", "ok"]

    harness.llm.push(text("hello group"))
    await in_group(harness, "hi")
    harness.llm.push(text("Shop is green."))
    await answer_hook(site, {"id": "e1", "app": "shop", "status": "green"})

    found = await metrics(site.client)
    assert firings_counted(found) == {"ok": 1, "error": 1, "missed": 1, "interrupted": 0}
    hooks = {labels: value for (name, labels), value in found.items() if name == "bridge_hook_events_total"}
    assert hooks == {(("hook", "deploys"), ("state", "ok")): 1.0}


async def test_a_firing_a_crash_cut_short_is_counted_as_interrupted_at_the_next_start(site: Site) -> None:
    harness, store, service = site.harness, site.harness.bridge.store, site.harness.bridge.tasks
    task = await site.schedule("0 18 * * *", "Summarise the day")
    # Claimed, its run begun, and the process dies (as in test_scheduler's crash tests).
    assert await store.claim_firing(task.id, T0 + 3600, T0 + 3600 + 86400, T0 + 3600, run_id="r-cut")
    session = await store.ensure_active_session(f"cron:{task.id}")
    await store.start_run("r-cut", session.id, "task", "hash")
    await store.abort_interrupted_runs()
    site.clock.now = T0 + 3600 + 5
    await service.start(alone=True)  # the next start
    await service.stop()
    assert [f.state for f in await store.firings(task.id)] == ["interrupted"]
    assert firings_counted(await metrics(site.client))["interrupted"] == 1
    shown = (await site.client.get("/api/tasks")).json()["tasks"][0]["firings"][0]
    assert (shown["state"], shown["detail"]) == ("interrupted", "cut short by a restart")
    assert harness.sender.of("notice")
