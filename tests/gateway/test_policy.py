"""Send-policy resolution: override, then the first deny (or ignore), then an allow, then the default."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.config.session import SendPolicySettings
from bridge.gateway.policy import Place, SendPolicy


def policy(*rules: dict[str, Any], default: str = "allow") -> SendPolicy:
    return SendPolicy(SendPolicySettings.model_validate({"default": default, "rules": list(rules)}))


def deny(**match: str) -> dict[str, Any]:
    return {"action": "deny", "match": match}


def allow(**match: str) -> dict[str, Any]:
    return {"action": "allow", "match": match}


def ignore(**match: str) -> dict[str, Any]:
    return {"action": "ignore", "match": match}


GROUP = Place.of("telegram:group:-100")
CHANNEL = Place.of("discord:channel:7")


def test_with_no_rules_the_default_decides() -> None:
    assert policy().decide(GROUP).action == "allow"
    decision = policy(default="deny").decide(GROUP)
    assert (decision.action, decision.reason) == ("deny", "default (deny)")


def test_the_session_override_wins_over_every_rule() -> None:
    p = policy(deny(surface="telegram"), ignore(chat_type="group"), default="deny")
    decision = p.decide(GROUP, "allow")
    assert (decision.action, decision.reason) == ("allow", "session override (/send on)")
    p = policy(allow(surface="telegram"))
    assert p.decide(GROUP, "deny").reason == "session override (/send off)"


def test_a_matching_deny_wins_over_an_allow_listed_before_it() -> None:
    decision = policy(allow(key_prefix="telegram:group:-100"), deny(surface="telegram")).decide(GROUP)
    assert decision.action == "deny"
    assert decision.reason == "rule 2 (deny: surface=telegram)"


def test_the_first_matching_deny_is_the_one_named() -> None:
    decision = policy(deny(chat_type="group"), deny(surface="telegram")).decide(GROUP)
    assert decision.reason == "rule 1 (deny: chat_type=group)"


def test_a_matching_allow_beats_a_deny_default() -> None:
    decision = policy(deny(surface="discord"), allow(surface="telegram"), default="deny").decide(GROUP)
    assert (decision.action, decision.reason) == ("allow", "rule 2 (allow: surface=telegram)")


def test_rules_that_do_not_match_fall_through_to_the_default() -> None:
    decision = policy(deny(surface="discord"), allow(key_prefix="main")).decide(GROUP)
    assert decision.reason == "default (allow)"


def test_ignore_counts_as_a_deny_in_order_and_stops_processing() -> None:
    decision = policy(allow(surface="telegram"), ignore(key_prefix="telegram:group:")).decide(GROUP)
    assert decision.action == "ignore"
    assert not decision.processes and not decision.speaks
    assert policy(deny()).decide(GROUP).processes  # shadow mode still reads


def test_every_match_field_must_hold() -> None:
    p = policy(deny(surface="telegram", chat_type="dm"))
    assert p.decide(GROUP).action == "allow"
    assert p.decide(Place.of("telegram:dm:5")).action == "deny"


def test_an_empty_match_covers_everything() -> None:
    assert policy(deny()).decide(Place.of("cron:nightly")).reason == "rule 1 (deny: everything)"


@pytest.mark.parametrize(
    ("key", "chat_type", "group_rule_matches"),
    [
        ("telegram:group:-100", "group", True),
        ("telegram:group:-100:topic:3", "group", True),
        ("discord:channel:7", "channel", True),
        ("telegram:dm:5", "dm", False),
        ("main", "dm", False),
        ("cron:nightly", None, False),
    ],
)
def test_chat_type_comes_from_the_key_and_group_covers_channels(
    key: str, chat_type: str | None, group_rule_matches: bool
) -> None:
    place = Place.of(key, "telegram")
    assert place.chat_type == chat_type
    assert (policy(deny(chat_type="group")).decide(place).action == "deny") is group_rule_matches


def test_channel_matches_only_channels() -> None:
    p = policy(deny(chat_type="channel"))
    assert p.decide(CHANNEL).action == "deny"
    assert p.decide(GROUP).action == "allow"


def test_main_takes_the_surface_it_is_spoken_to_on() -> None:
    p = policy(deny(surface="discord", key_prefix="main"))
    assert p.decide(Place.of("main", "discord")).action == "deny"
    assert p.decide(Place.of("main", "telegram")).action == "allow"
    assert p.decide(Place.of("main")).action == "allow"


def test_the_key_surface_wins_over_the_delivery_surface() -> None:
    assert Place.of("discord:channel:7", "telegram").surface == "discord"


def test_update_swaps_the_rules_in_place() -> None:
    p = policy()
    p.update(SendPolicySettings.model_validate({"rules": [deny(surface="telegram")]}))
    assert p.decide(GROUP).action == "deny"


def test_explain_walks_every_rule_and_names_the_decider() -> None:
    p = policy(allow(key_prefix="telegram:group:-100"), deny(chat_type="group"), deny(surface="discord"))
    lines = p.explain(GROUP)
    text = "\n".join(lines)
    assert "rule 1 (allow: key_prefix=telegram:group:-100): matches" in text
    assert "rule 2 (deny: chat_type=group): matches" in text
    assert "rule 3 (deny: surface=discord): does not match" in text
    assert "decision: deny, decided by rule 2 (deny: chat_type=group)" in text
    assert "a matching deny or ignore wins over any allow" in text
    assert "Shadow mode" in text


def test_explain_shows_the_override() -> None:
    text = "\n".join(policy(deny()).explain(GROUP, "allow"))
    assert "session override: allow" in text
    assert "decision: allow, decided by session override (/send on)" in text
