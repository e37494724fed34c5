"""The /tasks chat command: listing a chat's scheduled tasks, and who may cancel them where."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.store.tasks import TaskRow
from devkit.fakes.openai_server import FakeOpenAI, text
from tests.harness import OWNER, Harness, running_bridge
from tests.tasks.chat import GROUP, GROUP_KEY, Clock, in_group, scheduling

FRIEND = "bob"  # no owner; the "test" surface has no access rules, so their DM is open
FRIEND_KEY = f"test:dm:{FRIEND}"
NONE_TEXT = 'No scheduled tasks here. Ask the bot, e.g. "remind me tomorrow at 9 to call Sam".'


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with FakeOpenAI() as llm, running_bridge(tmp_path, llm) as running:
        running.bridge.tasks.clock = Clock()
        yield running


async def scheduled(harness: Harness, key: str, before: set[str]) -> TaskRow:
    """The one task of `key` whose id is not in `before`, checking the tool made it."""
    (task,) = [t for t in await harness.bridge.tasks.tasks_of(key) if t.id not in before]
    return task


async def schedule_in_main(harness: Harness, when: str, prompt: str, **extra: str) -> TaskRow:
    before = {t.id for t in await harness.bridge.tasks.tasks_of(None)}
    scheduling(harness, when, prompt, **extra)
    await harness.say(f"please: {prompt}, {when}")
    return await scheduled(harness, "main", before)


async def schedule_in_group(harness: Harness, when: str, prompt: str) -> TaskRow:
    before = {t.id for t in await harness.bridge.tasks.tasks_of(None)}
    scheduling(harness, when, prompt)
    await in_group(harness, f"please: {prompt}, {when}")
    return await scheduled(harness, GROUP_KEY, before)


def said_to(harness: Harness, chat: str) -> list[str]:
    """The notices (command answers) sent to one chat, oldest first."""
    return [item.text for item in harness.sender.sent if item.kind == "notice" and item.route.chat_id == chat]


async def command(harness: Harness, said: str, *, sender: str = OWNER) -> str:
    """A command in a DM; the one answer it got."""
    count = len(said_to(harness, sender))
    await harness.say(said, sender=sender)
    answers = said_to(harness, sender)
    assert len(answers) == count + 1, answers
    return answers[-1]


async def group_command(harness: Harness, said: str, *, sender: str = "alice") -> str:
    """A command in the group g1; the one answer it got."""
    count = len(said_to(harness, GROUP))
    await in_group(harness, said, sender=sender)
    answers = said_to(harness, GROUP)
    assert len(answers) == count + 1, answers
    return answers[-1]


async def live_ids(harness: Harness, key: str | None = None) -> set[str]:
    return {task.id for task in await harness.bridge.tasks.tasks_of(key)}


# -- listing -----------------------------------------------------------------------------------


async def test_tasks_with_none_scheduled_says_so_and_how_to_make_one(harness: Harness) -> None:
    assert await command(harness, "/tasks") == NONE_TEXT
    assert harness.llm.requests == []


async def test_tasks_lists_each_task_with_its_id_schedule_and_next_run_soonest_first(
    harness: Harness,
) -> None:
    daily = await schedule_in_main(harness, "0 18 * * *", "Summarise the day")
    stretch = await schedule_in_main(harness, "in 20 minutes", "Remind me to stretch")
    assert stretch.id != daily.id

    assert await command(harness, "/tasks") == "\n".join(
        [
            "Scheduled tasks:",
            f'• {stretch.id}: "Remind me to stretch" '
            "(once at 2026-11-25 17:20 (UTC); next 2026-11-25 17:20 UTC)",
            f'• {daily.id}: "Summarise the day" '
            "(at 18:00 every day (cron `0 18 * * *`, UTC); next 2026-11-25 18:00 UTC)",
            "Cancel one with /tasks cancel ID.",
        ]
    )


async def test_a_long_prompt_is_shortened_to_one_line_in_the_list(harness: Harness) -> None:
    prompt = "Check the build\n\nand then " + "write a very long report " * 5
    task = await schedule_in_main(harness, "in 1 hour", prompt)
    listed = (await command(harness, "/tasks")).splitlines()[1]
    assert listed.startswith(f'• {task.id}: "Check the build and then write a very long report')
    shown = listed.split('"')[1]
    assert len(shown) == 60 and shown.endswith("…")


async def test_a_paused_task_is_listed_as_paused_instead_of_a_next_run(harness: Harness) -> None:
    task = await schedule_in_main(harness, "*/10 * * * *", "Poll the feed")
    assert await harness.bridge.store.end_task(task.id, "paused") is not None
    listed = (await command(harness, "/tasks")).splitlines()[1]
    assert listed.startswith(f"• {task.id}: ") and listed.endswith("; paused)")
    assert "next " not in listed


async def test_a_task_posting_to_another_chat_says_where_and_is_listed_there_too(harness: Harness) -> None:
    harness.llm.push(text("hello group"))
    await in_group(harness, "hi")  # the group's session exists, so main may post there
    task = await schedule_in_main(harness, "in 1 hour", "Post the news", deliver_to=GROUP_KEY)
    assert (task.chat_key, task.deliver_to) == ("main", GROUP_KEY)

    in_main = (await command(harness, "/tasks")).splitlines()[1]
    assert in_main.startswith(f'• {task.id}: "Post the news" (')
    assert in_main.endswith(f"; next 2026-11-25 18:00 UTC, posts to {GROUP_KEY})")
    # In the chat it posts to, it is listed as that chat's own.
    in_the_group = (await group_command(harness, "/tasks")).splitlines()[1]
    assert in_the_group.startswith(f"• {task.id}: ") and "posts to" not in in_the_group


async def test_a_chat_lists_only_its_own_tasks(harness: Harness) -> None:
    await schedule_in_main(harness, "in 1 hour", "Owner's reminder")
    assert await group_command(harness, "/tasks") == NONE_TEXT
    assert await command(harness, "/tasks", sender=FRIEND) == NONE_TEXT


async def test_tasks_still_lists_a_chat_whose_task_has_a_schedule_that_cannot_be_read(
    harness: Harness,
) -> None:
    good = await schedule_in_main(harness, "0 18 * * *", "Summarise the day")
    # As tests/tasks/test_scheduler.py makes one: the scheduler pauses it and fires the others.
    broken = dataclasses.replace(good, id="broken01", expression="not a cron", state="paused")
    assert await harness.bridge.store.add_task(broken, max_per_chat=10)
    listing = await command(harness, "/tasks")
    assert good.id in listing and "broken01" in listing


# -- cancelling --------------------------------------------------------------------------------


async def test_the_owner_cancels_a_task_and_it_is_gone_from_the_list(harness: Harness) -> None:
    keep = await schedule_in_main(harness, "0 18 * * *", "Summarise the day")
    drop = await schedule_in_main(harness, "in 20 minutes", "Remind me to stretch")

    answer = await command(harness, f"/tasks cancel {drop.id}")
    assert answer == f"Cancelled task {drop.id}: Remind me to stretch"
    assert await live_ids(harness, "main") == {keep.id}
    ended = await harness.bridge.store.get_task(drop.id)
    assert ended is not None and ended.state == "cancelled"
    listing = await command(harness, "/tasks")
    assert keep.id in listing and drop.id not in listing

    # Cancelling it again finds no live task.
    again = await command(harness, f"/tasks cancel {drop.id}")
    assert again == f"No scheduled task {drop.id} here. /tasks shows this chat's tasks."


async def test_a_wrong_id_says_there_is_no_such_task_and_points_to_tasks(harness: Harness) -> None:
    task = await schedule_in_main(harness, "in 1 hour", "Keep me")
    answer = await command(harness, "/tasks cancel nope1234")
    assert answer == "No scheduled task nope1234 here. /tasks shows this chat's tasks."
    assert "list_tasks" not in answer
    assert await live_ids(harness) == {task.id}


async def test_tasks_cancel_needs_exactly_one_id(harness: Harness) -> None:
    task = await schedule_in_main(harness, "in 1 hour", "Keep me")
    usage = "Usage: /tasks cancel ID (/tasks lists the ids)."
    assert await command(harness, "/tasks cancel") == usage
    assert await command(harness, f"/tasks cancel {task.id} {task.id}") == usage
    assert await live_ids(harness) == {task.id}


async def test_another_member_in_a_group_cannot_cancel_a_members_task_and_it_stays(harness: Harness) -> None:
    task = await schedule_in_group(harness, "in 1 hour", "Group reminder")  # made by alice
    answer = await group_command(harness, f"/tasks cancel {task.id}", sender="carol")
    assert answer == (
        f"Task {task.id} was made by someone else: only they or an owner of this bot can cancel it."
    )
    assert await live_ids(harness, GROUP_KEY) == {task.id}
    still = await harness.bridge.store.get_task(task.id)
    assert still is not None and still.state == "active"


async def test_a_member_cancels_the_task_they_made_in_a_group(harness: Harness) -> None:
    task = await schedule_in_group(harness, "in 1 hour", "Group reminder")  # made by alice
    answer = await group_command(harness, f"/tasks cancel {task.id}", sender="alice")
    assert answer == f"Cancelled task {task.id}: Group reminder"
    assert await live_ids(harness) == set()


async def test_an_owner_cancels_a_groups_task_in_that_group(harness: Harness) -> None:
    task = await schedule_in_group(harness, "in 1 hour", "Group reminder")
    answer = await group_command(harness, f"/tasks cancel {task.id}", sender=OWNER)
    assert answer == f"Cancelled task {task.id}: Group reminder"
    assert await live_ids(harness) == set()


async def test_an_owner_in_main_may_cancel_any_chats_task(harness: Harness) -> None:
    # main is the owners' own thread, which sees every chat; the CLI may too.
    task = await schedule_in_group(harness, "in 1 hour", "Group reminder")
    answer = await command(harness, f"/tasks cancel {task.id}")  # from main, the owner's DM
    assert answer == f"Cancelled task {task.id}: Group reminder"
    assert await live_ids(harness, GROUP_KEY) == set()


async def test_another_chat_cannot_cancel_a_groups_task(harness: Harness) -> None:
    task = await schedule_in_group(harness, "in 1 hour", "Group reminder")
    answer = await command(harness, f"/tasks cancel {task.id}", sender=FRIEND)  # bob's own DM
    assert answer == f"No scheduled task {task.id} here. /tasks shows this chat's tasks."
    assert await live_ids(harness, GROUP_KEY) == {task.id}


async def test_a_non_owner_cancels_their_own_task_in_their_own_dm(harness: Harness) -> None:
    before = await live_ids(harness)
    scheduling(harness, "in 1 hour", "Water the plants")
    await harness.say("remind me to water the plants in an hour", sender=FRIEND)
    task = await scheduled(harness, FRIEND_KEY, before)
    assert task.chat_key == FRIEND_KEY

    listing = await command(harness, "/tasks", sender=FRIEND)
    assert f'• {task.id}: "Water the plants"' in listing
    answer = await command(harness, f"/tasks cancel {task.id}", sender=FRIEND)
    assert answer == f"Cancelled task {task.id}: Water the plants"
    assert await live_ids(harness, FRIEND_KEY) == set()


async def test_a_non_owner_in_their_dm_cannot_cancel_the_owners_task(harness: Harness) -> None:
    task = await schedule_in_main(harness, "in 1 hour", "Owner's reminder")
    answer = await command(harness, f"/tasks cancel {task.id}", sender=FRIEND)
    assert answer == f"No scheduled task {task.id} here. /tasks shows this chat's tasks."
    assert await live_ids(harness, "main") == {task.id}


# -- usage and help ----------------------------------------------------------------------------


@pytest.mark.parametrize("args", ["bogus", "list", "cancelall x"])
async def test_tasks_with_other_words_gives_its_usage(harness: Harness, args: str) -> None:
    assert await command(harness, f"/tasks {args}") == "Usage: /tasks, or /tasks cancel ID."


async def test_tasks_is_in_help(harness: Harness) -> None:
    answer = await command(harness, "/help")
    assert (
        "/tasks: List this chat's scheduled tasks and when they run next; /tasks cancel ID cancels one"
        in answer.splitlines()
    )
