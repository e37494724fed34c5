"""`bridge run` with [slack] enabled: the entry point, the config and the process, end to end, and a
kill -9 mid-send with what Slack's missing idempotency key means for it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.processes import bridge_process, bridge_running, kill9
from tests.adapters.slack.conftest import OWNER
from tests.fakes.slack_api import FakeSlack
from tests.invariants import assert_intact
from tests.waiting import eventually


def slack_config(tmp_path: Path, slack: FakeSlack, llm: FakeOpenAI, extra: str = "") -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        f'owners = ["slack:{OWNER}"]\n'
        f'[llm]\nbase_url = "{llm.base_url}"\nmodel = "fake"\nmax_retries = 0\nstream = false\n'
        f'[storage]\npath = "{tmp_path / "bridge.db"}"\n'
        f'[slack]\nenabled = true\nbot_token = "{slack.bot_token}"\napp_token = "{slack.app_token}"\n'
        f'api_base = "{slack.api_base}"\n{extra}',
        encoding="utf-8",
    )
    return config


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return list(connection.execute(sql))


async def test_bridge_run_answers_on_slack_and_a_kill_mid_send_is_sent_again_at_the_next_start(
    tmp_path: Path, slack: FakeSlack
) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.text("the answer"), fake.text("next answer"))
        config = slack_config(tmp_path, slack, llm)
        # Slack carries the post out but its answer never comes; the process is killed meanwhile.
        slack.fail_next("chat.postMessage", "hang")
        async with bridge_process(tmp_path, config) as process:
            await slack.wait_for(lambda: slack.connections == 1, 30)
            asked = slack.dm(OWNER, "question")
            await slack.wait_for(lambda: len(slack.calls("chat.postMessage")) == 1, 30)
            await kill9(process)
        db = tmp_path / "bridge.db"
        assert rows(db, "SELECT kind, state FROM outbox") == [("reply", "sending")]
        async with bridge_running(tmp_path, config):
            await slack.wait_for(lambda: len(slack.messages_in(asked["channel"])) == 2, 30)
            slack.dm(OWNER, "and then?")
            await slack.wait_for(lambda: len(slack.messages_in(asked["channel"])) == 3, 30)
    # chat.postMessage has no idempotency key: with [delivery] resend_uncertain (the default) the
    # post in doubt went again, and this one had arrived, so it shows twice. Nothing is lost.
    assert [m["text"] for m in slack.messages_in(asked["channel"])] == [
        "the answer",
        "the answer",
        "next answer",
    ]
    assert len(llm.requests) == 2
    assert_intact(db, ["question", "and then?"])


async def test_with_resend_uncertain_off_a_post_in_doubt_is_kept_uncertain_and_shown_once(
    tmp_path: Path, slack: FakeSlack
) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.text("the answer"))
        config = slack_config(tmp_path, slack, llm, extra="[delivery]\nresend_uncertain = false\n")
        slack.fail_next("chat.postMessage", "hang")
        async with bridge_process(tmp_path, config) as process:
            await slack.wait_for(lambda: slack.connections == 1, 30)
            asked = slack.dm(OWNER, "question")
            await slack.wait_for(lambda: len(slack.calls("chat.postMessage")) == 1, 30)
            await kill9(process)
        db = tmp_path / "bridge.db"
        async with bridge_running(tmp_path, config):
            await eventually(lambda: rows(db, "SELECT state FROM outbox") == [("uncertain",)], "uncertain")
    assert slack.connections == 2 and len(slack.calls("chat.postMessage")) == 1
    assert [m["text"] for m in slack.messages_in(asked["channel"])] == ["the answer"]
