"""Live reload: the config file is watched; a bad edit keeps the last good settings and says why."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bridge.config import Settings
from bridge.config.io import load_settings
from bridge.reload import ConfigReloader, restart_needed
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import running_bridge

GOOD = """
[session.send_policy]
default = "allow"
rules = [{ action = "deny", match = { surface = "telegram" } }]
"""
BAD = """
[session.send_policy]
default = "allow"
rules = [{ action = "silence", match = { surface = "telegram" } }]
"""


@pytest.fixture(autouse=True)
def _no_outer_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


def reloader_for(path: Path, applied: list[Settings], interval_s: float = 0.05) -> ConfigReloader:
    return ConfigReloader(path, load_settings(path), applied.append, interval_s=interval_s)


class Recorder(logging.Handler):
    """Collects applied settings and error logs, with an event to wait on for each."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.applied: list[Settings] = []
        self.errors: list[str] = []
        self.news = asyncio.Event()

    def __call__(self, settings: Settings) -> None:
        self.applied.append(settings)
        self.news.set()

    def emit(self, record: logging.LogRecord) -> None:
        self.errors.append(record.getMessage())
        self.news.set()

    async def next(self) -> None:
        await asyncio.wait_for(self.news.wait(), 5)
        self.news.clear()


def test_a_valid_edit_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("")
    applied: list[Settings] = []
    reloader = reloader_for(path, applied)
    path.write_text(GOOD)
    assert reloader.reload()
    assert applied[-1].session.send_policy.rules[0].action == "deny"


def test_an_invalid_edit_keeps_the_last_good_settings_and_names_the_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(GOOD)
    applied: list[Settings] = []
    reloader = reloader_for(path, applied)
    path.write_text(BAD)
    with caplog.at_level(logging.ERROR, logger="bridge.reload"):
        assert not reloader.reload()
    assert applied == []
    assert reloader.current.session.send_policy.rules[0].action == "deny"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "session.send_policy.rules[0].action" in errors[0].getMessage()
    assert "keeping the last good settings" in errors[0].getMessage()


async def test_the_watcher_reloads_on_change_and_reports_a_bad_file_once(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("")
    seen = Recorder()
    reloader = ConfigReloader(path, load_settings(path), seen, interval_s=0.05)
    logging.getLogger("bridge.reload").addHandler(seen)
    reloader.start()
    try:
        path.write_text(GOOD)
        await seen.next()
        assert len(seen.applied) == 1
        path.write_text(BAD)
        await seen.next()
        assert len(seen.errors) == 1
        path.write_text(GOOD.replace("telegram", "discord"))
        await seen.next()
        # The broken file was polled several times before the fix: it was still reported once.
        assert len(seen.errors) == 1
        assert seen.applied[-1].session.send_policy.rules[0].match.surface == "discord"
    finally:
        logging.getLogger("bridge.reload").removeHandler(seen)
        await reloader.stop()


async def test_a_change_is_applied_only_once_it_has_stayed_the_same_for_an_interval(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(GOOD)
    applied: list[Settings] = []
    reloader = reloader_for(path, applied)
    await reloader.poll()
    await reloader.poll()  # the file as loaded at startup: nothing to apply
    assert applied == []
    path.write_text("")  # an editor caught halfway: truncated, not yet written
    await reloader.poll()
    path.write_text(GOOD.replace("telegram", "discord"))
    await reloader.poll()
    assert applied == []  # never saw the same content twice: the empty file was never applied
    await reloader.poll()
    assert [s.session.send_policy.rules[0].match.surface for s in applied] == ["discord"]
    await reloader.poll()
    assert len(applied) == 1


async def test_an_edit_made_while_the_bot_started_is_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("")
    applied: list[Settings] = []
    reloader = reloader_for(path, applied)  # loaded the empty file...
    path.write_text(GOOD)  # ...and the operator saved before the watcher's first look
    await reloader.poll()
    await reloader.poll()
    assert applied and applied[-1].session.send_policy.rules[0].action == "deny"


async def test_rewriting_the_same_settings_applies_nothing(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(GOOD)
    applied: list[Settings] = []
    reloader = reloader_for(path, applied)
    path.write_text(GOOD + "\n# a comment\n")
    await reloader.poll()
    await reloader.poll()
    assert applied == []


def test_changes_outside_the_live_settings_are_named_for_a_restart() -> None:
    old = Settings()
    new = Settings(
        llm={"model": "other"},
        telegram={"allowed_users": ["5"]},
        session={"send_policy": {"default": "deny"}, "agent_to_agent": {"max_ping_pong_turns": 1}},
    )
    assert restart_needed(old, new) == ["llm.model", "session.agent_to_agent.max_ping_pong_turns"]


async def test_a_reload_changes_the_running_bridges_policy_and_access(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("before"), fake.text("after"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("one")
        reloaded = h.bridge.settings.model_copy(
            update={"session": Settings(session={"send_policy": {"default": "deny"}}).session}
        )
        h.bridge.apply_live_settings(reloaded)
        await h.say("two")
        assert h.sender.of("reply") == ["before"]
        h.bridge.apply_live_settings(Settings(telegram={"allowed_users": ["77"]}))
        assert h.bridge.access.surfaces["telegram"].user_allowed("77")
