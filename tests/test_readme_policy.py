"""The README's three send-policy examples load and decide as the README says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from bridge.config import Settings
from bridge.gateway.policy import Place, SendPolicy

README = Path(__file__).resolve().parent.parent / "README.md"


def examples() -> list[SendPolicy]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Where the bot may speak", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```toml\n(.*?)```", section, re.S)
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
