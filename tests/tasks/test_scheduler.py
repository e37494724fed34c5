"""Scheduled tasks end to end in one Bridge, on a clock the tests move: made from a chat with the tools,
fired once per due time in a cron session, delivered under the send policy, caught up or missed after
downtime, paused after failures, and never fired twice after a crash."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.jobs.tasks import TaskService
from bridge.sessions.authority import Authority
from bridge.store.tasks import TaskRow
from devkit.fakes.openai_server import FakeOpenAI, http_error, text, tool_call
from tests.harness import Harness, running_bridge
from tests.tasks.chat import T0, Clock, in_group, scheduling


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[tuple[Harness, Clock]]:
    clock = Clock()
    async with FakeOpenAI() as llm, running_bridge(tmp_path, llm, tasks={"max_per_chat": 2}) as harness:
        harness.bridge.tasks.clock = clock
        yield harness, clock


async def schedule(harness: Harness, when: str, prompt: str = "Remind me to stretch", **extra: str) -> None:
    scheduling(harness, when, prompt, **extra)
    await harness.say(f"please: {prompt}, {when}")


async def only_task(service: TaskService, key: str = "main") -> TaskRow:
    (task,) = await service.tasks_of(key)
    return task


async def fire(service: TaskService) -> int:
    started = await service.tick()
    await service.idle()
    return started


async def test_a_task_made_in_a_chat_fires_once_at_its_time_and_posts_in_that_chat(
    bot: tuple[Harness, Clock],
) -> None:
    harness, clock = bot
    service = harness.bridge.tasks
    await schedule(harness, "in 20 minutes")
    task = await only_task(service)
    assert task.next_due == T0 + 1200 and task.kind == "once"

    clock.now = T0 + 1199
    assert await fire(service) == 0
    clock.now = T0 + 1200
    harness.llm.push(text("Time to stretch!"))
    assert await fire(service) == 1
    assert harness.sender.of("reply")[-1] == "Time to stretch!"
    # The run saw the task's prompt in its own session; the one-shot task has ended.
    asked = harness.llm.requests[-1]["messages"][-1]["content"]
    assert "Remind me to stretch" in asked and f"Scheduled task {task.id}" in asked
    assert await harness.bridge.store.active_session(f"cron:{task.id}") is not None
    assert await service.tasks_of("main") == []
    clock.now = T0 + 5000
    assert await fire(service) == 0
    assert [f.state for f in await harness.bridge.store.firings(task.id)] == ["ok"]


async def test_a_cron_task_keeps_its_session_and_fires_at_each_due_time(bot: tuple[Harness, Clock]) -> None:
    harness, clock = bot
    service = harness.bridge.tasks
    await schedule(harness, "0 18 * * *", "Summarise the day")
    task = await only_task(service)
    for day in range(2):
        clock.now = T0 + 3600 + day * 86400
        harness.llm.push(text(f"Summary {day}"))
        assert await fire(service) == 1
    assert harness.sender.of("reply")[-2:] == ["Summary 0", "Summary 1"]
    # Both firings ran in one cron session: the second saw the first in its history.
    second = harness.llm.requests[-1]["messages"]
    assert any(m.get("content") == "Summary 0" for m in second)
    assert (await only_task(service)).next_due == T0 + 3600 + 2 * 86400
    assert task.id in {t.id for t in await service.tasks_of("main")}


async def test_a_firing_missed_while_down_runs_once_within_catch_up_and_is_told_past_it(
    bot: tuple[Harness, Clock],
) -> None:
    harness, clock = bot
    service = harness.bridge.tasks
    await schedule(harness, "0 * * * *", "Hourly check")
    task = await only_task(service)
    # Down for five hours, back 5 minutes after the hour: the latest due time runs, once.
    clock.now = T0 + 5 * 3600 + 300
    harness.llm.push(text("Checked."))
    assert await fire(service) == 1
    assert harness.sender.of("reply")[-1] == "Checked."
    states = [f.state for f in await harness.bridge.store.firings(task.id)]
    assert states == ["ok", "missed"]
    assert (await only_task(service)).next_due == T0 + 6 * 3600

    # Back 30 minutes after the hour, past catch_up_s (600 s): recorded as missed, the chat told.
    clock.now = T0 + 8 * 3600 + 1800
    assert await fire(service) == 0
    (notice,) = [t for t in harness.sender.of("notice") if task.id in t]
    assert "did not run" in notice and "bot was down" in notice
    assert (await only_task(service)).next_due == T0 + 9 * 3600
    assert (await harness.bridge.store.firings(task.id))[0].state == "missed"


async def test_a_task_aimed_at_a_shadowed_chat_is_suppressed_and_recorded(tmp_path: Path) -> None:
    policy = {"send_policy": {"rules": [{"action": "deny", "match": {"key_prefix": "test:group:"}}]}}
    clock = Clock()
    async with FakeOpenAI() as llm, running_bridge(tmp_path, llm, session=policy) as harness:
        harness.bridge.tasks.clock = clock
        llm.push(text("hello group"))
        await in_group(harness, "hi")
        await schedule(harness, "in 1 hour", "Post the news", deliver_to="test:group:g1")
        task = await only_task(harness.bridge.tasks)
        assert task.deliver_to == "test:group:g1"
        clock.now = T0 + 3600
        llm.push(text("Secret news"))
        assert await fire(harness.bridge.tasks) == 1
        assert "Secret news" not in harness.sender.of("reply")
        (row,) = [
            r for r in await harness.bridge.store.outbox(state="suppressed") if r.item.text == "Secret news"
        ]
        assert row.item.session_key == "test:group:g1" and "rule" in (row.item.reason or "")


async def test_only_main_may_deliver_to_another_chat(bot: tuple[Harness, Clock]) -> None:
    harness, _ = bot
    # From a group, the owner's main is not visible: the tool refuses as for a missing session.
    scheduling(harness, "in 1 hour", "x", deliver_to="main")
    await in_group(harness, "schedule into main")
    result = harness.llm.requests[-1]["messages"][-1]["content"]
    assert "not_found" in result
    assert await harness.bridge.tasks.tasks_of(None) == []


async def test_three_failures_in_a_row_pause_a_task_and_tell_its_chat(bot: tuple[Harness, Clock]) -> None:
    harness, clock = bot
    service = harness.bridge.tasks
    await schedule(harness, "*/10 * * * *", "Poll")
    task = await only_task(service)
    for n in range(3):
        clock.now = T0 + 600 * (n + 1)
        harness.llm.push(http_error(400, "bad request"))
        assert await fire(service) == 1
    paused = await only_task(service)
    assert paused.state == "paused" and paused.failures == 3
    (notice,) = [t for t in harness.sender.of("notice") if "paused" in t]
    assert task.id in notice
    clock.now = T0 + 600 * 10
    assert await fire(service) == 0


async def test_a_chat_past_max_per_chat_is_refused_with_a_clear_error(bot: tuple[Harness, Clock]) -> None:
    harness, _ = bot
    await schedule(harness, "in 1 hour", "one")
    await schedule(harness, "in 2 hours", "two")
    await schedule(harness, "in 3 hours", "three")
    refused = harness.llm.requests[-1]["messages"][-1]["content"]
    assert "max_per_chat" in refused
    assert len(await harness.bridge.tasks.tasks_of("main")) == 2


async def test_a_bad_when_is_refused_with_what_is_accepted(bot: tuple[Harness, Clock]) -> None:
    harness, _ = bot
    await schedule(harness, "whenever you like")
    refused = harness.llm.requests[-1]["messages"][-1]["content"]
    assert refused.startswith("Error [invalid]")
    assert await harness.bridge.tasks.tasks_of(None) == []


async def daily_claimed(harness: Harness, run_id: str) -> TaskRow:
    """A daily task made from main, its 18:00 firing claimed for `run_id` (and nothing more)."""
    await schedule(harness, "0 18 * * *", "Daily")
    task = await only_task(harness.bridge.tasks)
    assert await harness.bridge.store.claim_firing(
        task.id, T0 + 3600, T0 + 3600 + 86400, T0 + 3600, run_id=run_id
    )
    return task


async def test_a_firing_a_crash_cut_short_is_never_run_again_and_its_chat_is_told(
    bot: tuple[Harness, Clock],
) -> None:
    harness, clock = bot
    service, store = harness.bridge.tasks, harness.bridge.store
    # The claim is made, the run begins, and the process dies: as kill -9 right after firing started.
    task = await daily_claimed(harness, "r-cut")
    session = await store.ensure_active_session(f"cron:{task.id}")
    await store.start_run("r-cut", session.id, "task", "hash")
    await store.abort_interrupted_runs()  # what the next start does before the tasks' loop begins
    clock.now = T0 + 3600 + 5
    asked = len(harness.llm.requests)
    await service.start(alone=True)  # the next start
    try:
        assert await fire(service) == 0
    finally:
        await service.stop()
    assert [f.state for f in await store.firings(task.id)] == ["interrupted"]
    assert len(harness.llm.requests) == asked
    (notice,) = [n for n in harness.sender.of("notice") if "cut short by a restart" in n]
    assert task.id in notice and "Next run" in notice


async def test_a_firing_claimed_but_never_begun_before_a_crash_runs_once_at_the_next_start(
    bot: tuple[Harness, Clock],
) -> None:
    harness, clock = bot
    service, store = harness.bridge.tasks, harness.bridge.store
    task = await daily_claimed(harness, "r-never")
    clock.now = T0 + 3600 + 5
    harness.llm.push(text("Daily summary"))
    await service.start(alone=True)
    try:
        await service.idle()
        assert await fire(service) == 0
    finally:
        await service.stop()
    assert harness.sender.of("reply").count("Daily summary") == 1
    (firing,) = await store.firings(task.id)
    assert (firing.state, firing.run_id) == ("ok", "r-never")


async def test_a_firing_whose_run_ended_before_a_crash_is_recorded_ok_and_not_run_again(
    bot: tuple[Harness, Clock],
) -> None:
    harness, _ = bot
    service, store = harness.bridge.tasks, harness.bridge.store
    task = await daily_claimed(harness, "r-done")
    harness.llm.push(text("answered before the crash"))
    await harness.bridge.headless.run(
        key=f"cron:{task.id}",
        prompt="Daily",
        sender="scheduler",
        channel="task",
        run_id="r-done",
        deliver_to="main",
        fallback=task.route,
        authority=Authority("owner", "main"),
    )
    asked = len(harness.llm.requests)
    await service.start(alone=True)
    try:
        await service.idle()
    finally:
        await service.stop()
    assert [f.state for f in await store.firings(task.id)] == ["ok"]
    assert len(harness.llm.requests) == asked
    assert harness.sender.of("reply").count("answered before the crash") == 1
    assert not [n for n in harness.sender.of("notice") if "cut short" in n]


async def test_bridge_tasks_run_now_fires_a_task_once_outside_its_schedule(
    bot: tuple[Harness, Clock],
) -> None:
    harness, clock = bot
    service, store = harness.bridge.tasks, harness.bridge.store
    await schedule(harness, "0 18 * * *", "Daily")
    task = await only_task(service)
    # As `bridge tasks run-now` does from another process: a request in the database.
    assert await store.request_run(task.id, T0 + 60) is not None
    clock.now = T0 + 61
    harness.llm.push(text("Ran now"))
    assert await fire(service) == 1
    assert await fire(service) == 0
    assert harness.sender.of("reply")[-1] == "Ran now"
    after = await only_task(service)
    assert after.next_due == task.next_due and after.run_requested is None
    (firing,) = await store.firings(task.id)
    assert (firing.due_at, firing.state, firing.detail) == (T0 + 60, "ok", "run now")


async def test_a_task_that_cannot_be_worked_out_is_paused_and_the_others_still_fire(
    bot: tuple[Harness, Clock],
) -> None:
    harness, clock = bot
    service, store = harness.bridge.tasks, harness.bridge.store
    await schedule(harness, "in 10 minutes", "good")
    good = await only_task(service)
    broken = dataclasses.replace(good, id="broken", expression="not a cron", kind="cron", next_due=T0 + 60)
    assert await store.add_task(broken, max_per_chat=10)
    clock.now = T0 + 600
    harness.llm.push(text("still fired"))
    assert await fire(service) == 1
    assert harness.sender.of("reply")[-1] == "still fired"
    after = await store.get_task("broken")
    assert after is not None and after.state == "paused"


async def test_sessions_list_shows_a_fired_tasks_session_as_kind_cron(bot: tuple[Harness, Clock]) -> None:
    harness, clock = bot
    service = harness.bridge.tasks
    await schedule(harness, "in 20 minutes")
    task = await only_task(service)
    clock.now = T0 + 1200
    harness.llm.push(text("Stretch!"))
    assert await fire(service) == 1
    harness.llm.push(
        tool_call("load_tool_group", {"group_name": "sessions"}),
        tool_call("sessions_list", {"kinds": ["cron"]}),
        text("One cron session."),
    )
    await harness.say("which scheduled sessions are there?")
    listed = json.loads(harness.llm.requests[-1]["messages"][-1]["content"])
    assert [(s["key"], s["kind"]) for s in listed["sessions"]] == [(f"cron:{task.id}", "cron")]
