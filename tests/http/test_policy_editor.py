"""The policy editor: read the rules, test a key against a draft, save a draft into the config file with
its comments kept, live at once; an invalid draft is refused with its key and reason and changes nothing."""

from __future__ import annotations

import asyncio
import errno
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.config.io import load_settings
from bridge.events import Inbound
from devkit.fakes.openai_server import FakeOpenAI, text
from tests.harness import Harness
from tests.http.conftest import admin_bridge, client_of

GROUP = "test:group:g1"

CONFIG = """\
# The operator's own notes: they must survive every save.
owners = ["test:owner"]  # me

[session.send_policy]
# Quiet by default in groups, say I.
default = "allow"
rules = []
"""


@dataclass
class Editor:
    harness: Harness
    client: httpx.AsyncClient
    path: Path

    async def put(self, draft: dict[str, Any]) -> httpx.Response:
        return await self.client.put("/api/policy", json=draft)


@pytest.fixture
async def editor(tmp_path: Path) -> AsyncIterator[Editor]:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG, encoding="utf-8")
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, config_path=path) as (harness, _, base),
        client_of(base) as client,
    ):
        yield Editor(harness, client, path)


async def group_says(h: Harness, said: str, answer: str) -> None:
    h.llm.push(text(answer))
    inbound = Inbound(
        "test", "group", "g1", "alice", said, message_id=said, mentioned=True, chat_title="Team"
    )
    done = await h.bridge.handle(inbound)
    assert done is not None
    await asyncio.wait_for(done, 10)


DENY_GROUPS = {"default": "allow", "rules": [{"action": "deny", "match": {"chat_type": "group"}}]}


async def test_the_editor_shows_the_live_rules_and_the_file_it_writes(editor: Editor) -> None:
    shown = (await editor.client.get("/api/policy")).json()
    assert shown == {
        "default": "allow",
        "rules": [],
        "config_file": str(editor.path),
        "editable": True,
        "read_only": None,
    }


async def test_explain_tests_a_key_against_a_draft_without_saving_it(editor: Editor) -> None:
    answer = await editor.client.post("/api/policy/explain", json={"key": GROUP, "draft": DENY_GROUPS})
    assert answer.status_code == 200
    body = answer.json()
    assert body["action"] == "deny" and "rule 1" in body["reason"]
    assert any(line.startswith("decision: deny") for line in body["explain"])
    # Only a test: the live policy and the file are as they were.
    live = await editor.client.post("/api/policy/explain", json={"key": GROUP})
    assert live.json()["action"] == "allow"
    assert editor.path.read_text(encoding="utf-8") == CONFIG


async def test_saving_a_draft_keeps_the_comments_and_goes_live_at_once(editor: Editor) -> None:
    h = editor.harness
    await group_says(h, "before", "spoken")
    assert "spoken" in h.sender.of("reply")
    saved = await editor.put(DENY_GROUPS)
    assert saved.status_code == 200, saved.text
    written = editor.path.read_text(encoding="utf-8")
    assert "# The operator's own notes: they must survive every save." in written
    assert "# Quiet by default in groups, say I." in written and "# me" in written
    assert tomllib.loads(written)["session"]["send_policy"]["rules"] == DENY_GROUPS["rules"]
    assert load_settings(editor.path).session.send_policy.rules[0].action == "deny"
    # Live without a restart: the next reply in the group is suppressed, and listed in the outbox.
    await group_says(h, "after", "shadowed")
    assert "shadowed" not in h.sender.of("reply")
    suppressed = (await editor.client.get("/api/outbox", params={"state": "suppressed"})).json()["outbox"]
    assert [row["text"] for row in suppressed] == ["shadowed"]
    assert "rule 1" in suppressed[0]["reason"]


@pytest.mark.parametrize(
    ("draft", "key", "reason"),
    [
        ({"rules": [{"action": "shout"}]}, "session.send_policy.rules.0.action", "allow"),
        ({"default": "maybe"}, "session.send_policy.default", "allow"),
        ({"rules": [{"action": "deny", "match": {"chat_type": "room"}}]}, "chat_type", "dm"),
        ({"rules": [{"action": "deny", "match": {"colour": "red"}}]}, "colour", "Extra inputs"),
    ],
)
async def test_an_invalid_draft_is_refused_with_its_key_and_reason_and_changes_nothing(
    editor: Editor, draft: dict[str, Any], key: str, reason: str
) -> None:
    answer = await editor.put(draft)
    assert answer.status_code == 422
    body = answer.json()
    assert key in body["key"] and reason in body["reason"]
    assert editor.path.read_text(encoding="utf-8") == CONFIG
    assert editor.harness.bridge.policy.settings.rules == []


async def test_a_save_that_would_break_the_rest_of_the_file_is_refused(editor: Editor) -> None:
    # The file was broken by hand meanwhile: the editor writes nothing over it.
    broken = CONFIG + "\n[llm]\ntemperature = 9\n"
    editor.path.write_text(broken, encoding="utf-8")
    answer = await editor.put(DENY_GROUPS)
    assert answer.status_code == 422
    assert "temperature" in answer.json()["reason"]
    assert editor.path.read_text(encoding="utf-8") == broken


async def test_a_config_without_the_section_gets_it_added(editor: Editor) -> None:
    editor.path.write_text('owners = ["test:owner"]\n', encoding="utf-8")
    assert (await editor.put(DENY_GROUPS)).status_code == 200
    data = tomllib.loads(editor.path.read_text(encoding="utf-8"))
    assert data["owners"] == ["test:owner"]
    assert data["session"]["send_policy"] == DENY_GROUPS


async def test_explain_refuses_a_malformed_key(editor: Editor) -> None:
    answer = await editor.client.post("/api/policy/explain", json={"key": "nonsense here"})
    assert answer.status_code == 422 and answer.json()["key"] == "key"


async def test_a_read_only_config_file_makes_the_editor_read_only_and_a_save_answers_409(
    editor: Editor,
) -> None:
    # No write bit at all: read-only on purpose. The tests run as root, whom chmod doesn't stop, so the
    # bits themselves decide (in Docker, a `:ro` mount is EROFS, which os.access sees for root too).
    editor.path.chmod(0o444)
    shown = (await editor.client.get("/api/policy")).json()
    assert shown["editable"] is False
    assert "config.toml is read-only: mounted read-only?" in shown["read_only"]
    page = await editor.client.get("/policy")
    assert page.status_code == 200
    assert 'data-editable="no"' in page.text and 'type="submit"' not in page.text
    assert (
        "is read-only: mounted read-only? edit it on the host and restart, or mount it writable" in page.text
    )
    answer = await editor.put(DENY_GROUPS)
    assert answer.status_code == 409
    body = answer.json()
    assert body["error"] == "read_only" and "mount it writable" in body["detail"]
    assert editor.path.read_text(encoding="utf-8") == CONFIG
    assert editor.harness.bridge.policy.settings.rules == []
    # Made writable again: the editor saves, without a restart.
    editor.path.chmod(0o644)
    assert (await editor.put(DENY_GROUPS)).status_code == 200


@pytest.mark.parametrize("code", [errno.EROFS, errno.EBUSY, errno.EACCES])
async def test_a_write_the_file_system_refuses_answers_409_not_500(
    editor: Editor, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # What no look beforehand sees: a file system made read-only meanwhile, or a bind mount of the
    # file itself, which a rename can't replace (EBUSY).
    def refuse(path: Path, text: str) -> None:
        raise OSError(code, "refused", str(path))

    monkeypatch.setattr("bridge.http.policy_edit._replace_file", refuse)
    answer = await editor.put(DENY_GROUPS)
    assert answer.status_code == 409
    assert answer.json()["error"] == "read_only" and "read-only" in answer.json()["detail"]
    assert editor.harness.bridge.policy.settings.rules == []
