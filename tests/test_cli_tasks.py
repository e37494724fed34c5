"""`bridge tasks list | cancel | run-now` on a bot's database, with and without a running bot."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pytest

from bridge.cli import main
from bridge.config.io import load_settings
from bridge.store.backends import store_for
from bridge.store.tables import DatabaseStore
from bridge.store.tasks import TaskRow
from tests.test_cli import write_config

T = TypeVar("T")
DUE = datetime(2030, 1, 2, 9, 0, tzinfo=UTC).timestamp()
GROUP = "telegram:group:-100"
LONG_PROMPT = "Summarise\nthe   day: " + "every open ticket and its owner, " * 6


def task(task_id: str, **changes: object) -> TaskRow:
    row = TaskRow(
        id=task_id,
        chat_key="main",
        deliver_to="main",
        prompt="Say good morning",
        kind="cron",
        expression="0 9 * * *",
        zone="UTC",
        state="active",
        created_at=DUE - 86400,
        next_due=DUE,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


def on_store(config: Path, work: Callable[[DatabaseStore], Awaitable[T]]) -> T:
    """Run `work` on the database of this config (made where missing), then close it."""

    async def run() -> T:
        store = store_for(load_settings(config).storage)
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    (config.parent / "state").mkdir(exist_ok=True)
    return asyncio.run(run())


def with_tasks(config: Path, *rows: TaskRow) -> None:
    async def add(store: DatabaseStore) -> None:
        for row in rows:
            assert await store.add_task(row, max_per_chat=100)

    on_store(config, add)


def stored(config: Path, task_id: str) -> TaskRow:
    found = on_store(config, lambda store: store.get_task(task_id))
    assert found is not None
    return found


def tasks(config: Path, *args: str) -> int:
    return main(["tasks", *args, "--config", str(config)])


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, None)


@pytest.fixture
def three(config: Path) -> Path:
    """A database with a daily task, a one-shot one posting to a group, and a paused one in Berlin."""
    with_tasks(
        config,
        task("daily001"),
        task(
            "news0002",
            chat_key="main",
            deliver_to=GROUP,
            prompt="Post the release notes",
            kind="once",
            expression="2030-01-01T12:00:00+00:00",
            next_due=datetime(2030, 1, 1, 12, 0, tzinfo=UTC).timestamp(),
        ),
        task(
            "berlin03",
            chat_key="telegram:dm:555",
            deliver_to="telegram:dm:555",
            prompt=LONG_PROMPT,
            zone="Europe/Berlin",
            state="paused",
            next_due=datetime(2030, 1, 3, 8, 0, tzinfo=UTC).timestamp(),
        ),
    )
    return config


# -- list --------------------------------------------------------------------------------------


def test_list_shows_each_live_task_soonest_first_with_its_schedule_and_prompt(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tasks(three, "list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.match(r"^id\s+state\s+next run\s+made in\s+posts to$", lines[0])
    assert [line.split()[0] for line in lines[1::2]] == ["news0002", "daily001", "berlin03"]
    assert re.match(rf"^news0002\s+active\s+2030-01-01 12:00 UTC\s+main\s+{GROUP}$", lines[1])
    assert lines[2].strip() == "once at 2030-01-01 12:00 (UTC): Post the release notes"
    assert re.match(r"^daily001\s+active\s+2030-01-02 09:00 UTC\s+main\s+main$", lines[3])
    assert lines[4].strip() == "at 09:00 every day (cron `0 9 * * *`, UTC): Say good morning"
    # The next run in the task's own zone; the prompt on one line, cut at 100 characters.
    assert re.match(
        r"^berlin03\s+paused\s+2030-01-03 09:00 CET\s+telegram:dm:555\s+telegram:dm:555$", lines[5]
    )
    schedule, _, prompt = lines[6].strip().partition(": ")
    assert schedule == "at 09:00 every day (cron `0 9 * * *`, Europe/Berlin)"
    assert prompt == " ".join(LONG_PROMPT.split())[:100]
    assert prompt.startswith("Summarise the day: every open ticket")
    assert len(lines) == 7


def test_list_on_a_database_without_tasks_says_none(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_tasks(config)
    assert tasks(config, "list") == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["(none)"]


def test_list_leaves_out_ended_tasks_and_all_includes_them(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_tasks(
        three,
        task("done0004", kind="once", expression="2029-12-31T08:00:00+00:00", state="done", next_due=None),
    )
    assert tasks(three, "cancel", "daily001") == 0
    capsys.readouterr()

    assert tasks(three, "list") == 0
    live = capsys.readouterr().out
    assert "daily001" not in live and "done0004" not in live
    assert "news0002" in live and "berlin03" in live

    assert tasks(three, "list", "--all") == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[1::2]}
    assert rows == {"news0002": "active", "daily001": "cancelled", "berlin03": "paused", "done0004": "done"}


def test_list_all_shows_no_next_run_for_a_cancelled_task(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tasks(three, "cancel", "daily001") == 0
    capsys.readouterr()
    assert tasks(three, "list", "--all") == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("daily001")]
    assert "2030-01-02 09:00" not in row


def test_list_still_shows_the_other_tasks_beside_one_whose_schedule_cannot_be_read(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As the scheduler's own test makes one (it pauses such a task and fires the others).
    with_tasks(three, task("broken05", expression="not a cron", state="paused"))
    assert tasks(three, "list") == 0
    out = capsys.readouterr().out
    assert "broken05" in out and "daily001" in out


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_ends_a_task_once_and_a_second_cancel_fails_clearly(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tasks(three, "cancel", "news0002") == 0
    assert capsys.readouterr().out == "cancelled task news0002: it never fires again\n"
    assert stored(three, "news0002").state == "cancelled"
    assert stored(three, "daily001").state == "active"

    assert tasks(three, "cancel", "news0002") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "bridge: no live task 'news0002'; `bridge tasks list` shows them\n"


def test_cancel_ends_a_paused_task_too(three: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tasks(three, "cancel", "berlin03") == 0
    assert stored(three, "berlin03").state == "cancelled"


# -- run-now -----------------------------------------------------------------------------------


def test_run_now_asks_for_a_firing_and_says_it_waits_for_the_next_start_when_no_bot_runs(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stored(three, "daily001").run_requested is None
    assert tasks(three, "run-now", "daily001") == 0
    assert capsys.readouterr().out == "task daily001 fires when `bridge run` starts (it is not running now)\n"
    after = stored(three, "daily001")
    assert after.run_requested is not None
    # The schedule stays as it is.
    assert (after.state, after.next_due) == ("active", DUE)
    assert stored(three, "news0002").run_requested is None


def test_run_now_while_a_bot_runs_says_it_fires_soon_and_where_it_answers(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_store(three, lambda store: store.register_worker("w1", role="active", holds="everything"))
    assert tasks(three, "run-now", "news0002") == 0
    assert (
        capsys.readouterr().out == f"task news0002 fires within a few seconds; its answer goes to {GROUP}\n"
    )
    assert stored(three, "news0002").run_requested is not None


def test_run_now_of_an_ended_task_fails_and_asks_for_nothing(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tasks(three, "cancel", "daily001") == 0
    capsys.readouterr()
    assert tasks(three, "run-now", "daily001") == 1
    assert capsys.readouterr().err == "bridge: no live task 'daily001'; `bridge tasks list` shows them\n"
    assert stored(three, "daily001").run_requested is None


# -- pause and resume --------------------------------------------------------------------------


def test_pause_then_resume_keeps_the_schedule_and_a_cancelled_task_cannot_be_resumed(
    three: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tasks(three, "pause", "daily001") == 0
    assert "paused task daily001" in capsys.readouterr().out
    assert stored(three, "daily001").state == "paused"
    assert tasks(three, "resume", "daily001") == 0
    assert capsys.readouterr().out.startswith("resumed task daily001")
    assert stored(three, "daily001").state == "active"

    assert tasks(three, "cancel", "news0002") == 0
    capsys.readouterr()
    assert tasks(three, "resume", "news0002") == 1
    assert "cancelled" in capsys.readouterr().err
    assert stored(three, "news0002").state == "cancelled"


# -- wrong ids and no database -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["cancel", "run-now", "pause", "resume"])
def test_a_wrong_id_fails_naming_it_and_changes_nothing(
    three: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    assert tasks(three, command, "nope9999") == 1
    captured = capsys.readouterr()
    assert captured.err == "bridge: no live task 'nope9999'; `bridge tasks list` shows them\n"
    assert captured.out == ""
    for task_id in ("daily001", "news0002", "berlin03"):
        row = stored(three, task_id)
        assert row.state in ("active", "paused") and row.run_requested is None


@pytest.mark.parametrize("args", [["list"], ["cancel", "daily001"], ["run-now", "daily001"]])
def test_without_a_database_it_says_where_it_looked_and_makes_none(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert tasks(config, *args) == 1
    database = tmp_path / "state" / "bridge.db"
    assert f"no database at {database}" in capsys.readouterr().err
    assert not database.exists()


def test_a_subcommand_needs_its_id(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        tasks(config, "cancel")
    assert exited.value.code == 2
    assert "the following arguments are required: ID" in capsys.readouterr().err
