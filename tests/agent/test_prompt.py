"""The system prompt: where the chat is, in words a small model does not mistake for a group name."""

from __future__ import annotations

from pathlib import Path

from bridge.agent.prompt import build_system_prompt
from bridge.app.registry import build_registry
from bridge.store.base import SessionRow
from tests.harness import make_settings


def test_the_place_of_the_chat_is_a_sentence_not_a_parenthesis(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1")
    session = SessionRow(
        "s", "telegram:group:-100", 0.0, 0.0, surface="telegram", chat_type="group", display_name="Team"
    )
    prompt = build_system_prompt(settings, build_registry(settings), session, set(), [])
    assert "session key telegram:group:-100, a group chat on telegram named 'Team'." in prompt
    assert "(telegram group" not in prompt


def test_a_summary_of_older_turns_is_in_the_prompt_and_only_when_there_is_one(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1")
    session = SessionRow("s", "main", 0.0, 0.0)
    registry = build_registry(settings)
    assert "Earlier in this conversation" not in build_system_prompt(settings, registry, session, set(), [])
    prompt = build_system_prompt(settings, registry, session, set(), [], "They like tea.")
    assert "## Earlier in this conversation" in prompt and "They like tea." in prompt
