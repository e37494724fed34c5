"""The docs' three send-policy examples (docs/send-policy.md) load and decide as the page says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from bridge.config import Settings
from bridge.gateway.policy import Place, SendPolicy

PAGE = Path(__file__).resolve().parent.parent / "docs" / "send-policy.md"


def examples() -> list[SendPolicy]:
    text = PAGE.read_text(encoding="utf-8")
    assert text.startswith("# Where the bot may speak\n")
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    # The first block shows the shape; the three worked examples follow it.
    return [SendPolicy(Settings(**tomllib.loads(b)).session.send_policy) for b in blocks[1:]]


def test_there_are_three_worked_examples() -> None:
    assert len(examples()) == 3


def test_quiet_in_all_discord_channels() -> None:
    quiet = examples()[0]
    assert quiet.decide(Place.of("discord:channel:1")).action == "deny"
    assert quiet.decide(Place.of("discord:dm:2")).action == "allow"
    assert quiet.decide(Place.of("main", "discord")).action == "allow"
    assert quiet.decide(Place.of("telegram:group:-3")).action == "allow"
    assert quiet.decide(Place.of("discord:channel:1"), "allow").action == "allow"


def test_shadow_a_new_group() -> None:
    shadow = examples()[1]
    decision = shadow.decide(Place.of("telegram:group:-1001234567890"))
    assert decision.action == "deny" and decision.processes
    assert shadow.decide(Place.of("telegram:group:-100999")).action == "allow"


def test_only_the_owners_dms() -> None:
    only = examples()[2]
    assert only.decide(Place.of("main", "telegram")).action == "allow"
    for key in ("telegram:dm:5", "telegram:group:-1", "discord:channel:2"):
        assert only.decide(Place.of(key)).action == "deny"
