"""The scheduled tasks' tables on both backends: the per-chat cap, one claim per due time, failures
that pause a task, and firings a crash left running."""

from __future__ import annotations

import asyncio
import dataclasses

from bridge.store.tables import DatabaseStore
from bridge.store.tasks import TaskRow

NOW = 1_800_000_000.0


def task(task_id: str = "t1", chat: str = "main", due: float | None = NOW, **changes: object) -> TaskRow:
    row = TaskRow(
        id=task_id,
        chat_key=chat,
        deliver_to=chat,
        prompt="say hi",
        kind="cron",
        expression="0 9 * * *",
        zone="UTC",
        state="active",
        created_at=NOW - 100,
        next_due=due,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


async def test_a_chat_may_hold_only_max_per_chat_live_tasks(store: DatabaseStore) -> None:
    assert await store.add_task(task("a"), max_per_chat=2) == "added"
    assert await store.add_task(task("b"), max_per_chat=2) == "added"
    assert await store.add_task(task("c"), max_per_chat=2) == "chat_full"
    assert await store.add_task(task("d", chat="telegram:group:-1"), max_per_chat=2) == "added"
    # A cancelled task frees its place.
    assert await store.end_task("a", "cancelled") is not None
    assert await store.add_task(task("c"), max_per_chat=2) == "added"
    assert [t.id for t in await store.list_tasks("main")] == ["b", "c"]


async def test_a_member_may_hold_only_max_per_maker_live_tasks_in_a_chat(store: DatabaseStore) -> None:
    group = "telegram:group:-1"

    def by(task_id: str, maker: str) -> TaskRow:
        return dataclasses.replace(task(task_id, chat=group), maker=maker, authority='{"x":1}')

    assert await store.add_task(by("a", "telegram:7"), max_per_chat=10, max_per_maker=2) == "added"
    assert await store.add_task(by("b", "telegram:7"), max_per_chat=10, max_per_maker=2) == "added"
    assert await store.add_task(by("c", "telegram:7"), max_per_chat=10, max_per_maker=2) == "maker_full"
    # Another member's count is their own, and the maker and authority are kept.
    assert await store.add_task(by("d", "telegram:8"), max_per_chat=10, max_per_maker=2) == "added"
    stored = await store.get_task("a")
    assert stored is not None and (stored.maker, stored.authority) == ("telegram:7", '{"x":1}')
    assert await store.end_task("a", "cancelled") is not None
    assert await store.add_task(by("c", "telegram:7"), max_per_chat=10, max_per_maker=2) == "added"


async def test_two_claims_of_one_due_time_give_one_firing(store: DatabaseStore) -> None:
    await store.add_task(task(), max_per_chat=10)
    claims = await asyncio.gather(*(store.claim_firing("t1", NOW, NOW + 86400, NOW) for _ in range(5)))
    assert sorted(claims) == [False, False, False, False, True]
    moved = await store.get_task("t1")
    assert moved is not None and moved.next_due == NOW + 86400 and moved.last_fired == NOW
    (firing,) = await store.firings("t1")
    assert (firing.due_at, firing.state) == (NOW, "running")
    # The old due time can never be claimed again, even after the firing ended.
    await store.finish_firing("t1", NOW, "ok", NOW + 5, run_id="r1", detail=None, pause_after=3)
    assert not await store.claim_firing("t1", NOW, NOW + 86400, NOW + 10)


async def test_a_one_shot_task_ends_when_its_firing_is_claimed(store: DatabaseStore) -> None:
    await store.add_task(task(kind="once"), max_per_chat=10)
    assert await store.claim_firing("t1", NOW, None, NOW)
    ended = await store.get_task("t1")
    assert ended is not None and ended.state == "done" and ended.next_due is None
    assert await store.due_tasks(NOW + 1e6) == []
    assert await store.list_tasks("main") == []


async def test_consecutive_failures_pause_a_task_and_a_success_resets_the_count(store: DatabaseStore) -> None:
    await store.add_task(task(), max_per_chat=10)
    for day in range(2):
        due = NOW + day * 86400
        assert await store.claim_firing("t1", due, due + 86400, due)
        after = await store.finish_firing(
            "t1", due, "error", due + 1, run_id=None, detail="boom", pause_after=2
        )
    assert after is not None and after.state == "paused" and after.failures == 2
    assert await store.due_tasks(NOW + 10 * 86400) == []

    await store.add_task(task("t2"), max_per_chat=10)
    await store.claim_firing("t2", NOW, NOW + 1, NOW)
    await store.finish_firing("t2", NOW, "error", NOW, run_id=None, detail="x", pause_after=2)
    await store.claim_firing("t2", NOW + 1, NOW + 2, NOW + 1)
    ok = await store.finish_firing("t2", NOW + 1, "ok", NOW + 1, run_id="r", detail=None, pause_after=2)
    assert ok is not None and ok.failures == 0 and ok.state == "active"


async def test_a_firing_a_crash_left_running_is_listed_with_its_run_until_its_end_is_recorded(
    store: DatabaseStore,
) -> None:
    await store.add_task(task(), max_per_chat=10)
    await store.claim_firing("t1", NOW, NOW + 86400, NOW, run_id="r1")
    (running,) = await store.running_firings()
    assert (running.task_id, running.state, running.run_id) == ("t1", "running", "r1")
    after = await store.finish_firing(
        "t1", NOW, "interrupted", NOW + 60, run_id=None, detail="cut short", pause_after=1
    )
    # A crash is no fault of the task's: it neither counts towards pausing it nor keeps its run id from
    # being recorded.
    assert after is not None and after.failures == 0 and after.state == "active"
    assert await store.running_firings() == []
    (ended,) = await store.firings("t1")
    assert (ended.state, ended.run_id, ended.detail) == ("interrupted", "r1", "cut short")


async def test_a_run_asked_for_now_is_due_at_once_and_claimed_once(store: DatabaseStore) -> None:
    await store.add_task(task(due=NOW + 3600), max_per_chat=10)
    asked = await store.request_run("t1", NOW)
    assert asked is not None and asked.run_requested == NOW
    assert await store.next_due() == NOW
    claims = [store.claim_requested_run("t1", NOW, f"r{n}", NOW + 1) for n in range(5)]
    assert sorted(await asyncio.gather(*claims)) == [False] * 4 + [True]
    assert await store.requested_runs() == []
    left = await store.get_task("t1")
    # The schedule is untouched: the next due time is the one it had.
    assert left is not None and left.next_due == NOW + 3600 and left.run_requested is None
    (firing,) = await store.firings("t1")
    assert (firing.due_at, firing.state) == (NOW, "running")
    assert await store.request_run("missing", NOW) is None


async def test_due_tasks_and_next_due_skip_paused_and_cancelled_ones(store: DatabaseStore) -> None:
    await store.add_task(task("early", due=NOW), max_per_chat=10)
    await store.add_task(task("late", due=NOW + 50), max_per_chat=10)
    await store.add_task(task("off", due=NOW - 50), max_per_chat=10)
    await store.end_task("off", "paused")
    assert await store.next_due() == NOW
    assert [t.id for t in await store.due_tasks(NOW)] == ["early"]
    assert [t.id for t in await store.list_tasks(None)] == ["off", "early", "late"]


async def test_a_paused_task_asked_to_run_now_is_due_at_the_request_not_at_its_old_due_time(
    store: DatabaseStore,
) -> None:
    await store.add_task(task("off", due=NOW - 50), max_per_chat=10)
    await store.end_task("off", "paused")
    assert await store.next_due() is None
    assert await store.request_run("off", NOW) is not None
    assert await store.next_due() == NOW
