"""Access policy: owners, allowlists, mention gating, one refusal an hour."""

from __future__ import annotations

import logging
from typing import Any

from bridge.config import Settings
from bridge.events import Inbound
from bridge.gateway import access as access_module
from bridge.gateway.access import AccessPolicy, SurfaceAccess, Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy(clock: Clock | None = None, **rules: Any) -> AccessPolicy:
    access = SurfaceAccess(
        allowed_users=frozenset(rules.get("users", ())),
        allowed_chats=frozenset(rules.get("chats", ())),
        require_mention=rules.get("require_mention", True),
    )
    return AccessPolicy(["telegram:1"], {"telegram": access}, clock=clock or Clock())


def dm(user: str, surface: str = "telegram") -> Inbound:
    return Inbound(surface, "dm", user, user, "hi")


def group(user: str, chat: str = "-100", *, mentioned: bool = False) -> Inbound:
    return Inbound("telegram", "group", chat, user, "hi", mentioned=mentioned)


def test_owners_are_always_allowed_and_strangers_refused_by_default() -> None:
    access = policy()
    assert access.check(dm("1")) is Verdict.ALLOW
    assert access.check(dm("2")) is Verdict.REFUSE


def test_allowed_users_and_the_wildcard() -> None:
    assert policy(users={"2"}).check(dm("2")) is Verdict.ALLOW
    assert policy(users={"2"}).check(dm("3")) is Verdict.REFUSE
    assert policy(users={"*"}).check(dm("3")) is Verdict.ALLOW


def test_a_stranger_is_refused_at_most_once_an_hour() -> None:
    clock = Clock()
    access = policy(clock)
    assert access.check(dm("9")) is Verdict.REFUSE
    clock.now += 3599
    assert access.check(dm("9")) is Verdict.IGNORE
    assert access.check(dm("8")) is Verdict.REFUSE
    clock.now += 2
    assert access.check(dm("9")) is Verdict.REFUSE


def test_groups_need_a_mention_unless_turned_off() -> None:
    access = policy(chats={"-100"})
    assert access.check(group("5")) is Verdict.IGNORE
    assert access.check(group("5", mentioned=True)) is Verdict.ALLOW
    assert policy(chats={"-100"}, require_mention=False).check(group("5")) is Verdict.ALLOW


def test_mention_gating_applies_to_owners_too_but_allowlists_do_not() -> None:
    access = policy()
    assert access.check(group("1", "-999")) is Verdict.IGNORE
    assert access.check(group("1", "-999", mentioned=True)) is Verdict.ALLOW


def test_unlisted_groups_get_silence_not_refusals() -> None:
    access = policy(chats={"-100"}, users={"*"})
    assert access.check(group("5", "-200", mentioned=True)) is Verdict.IGNORE
    assert policy(chats={"*"}).check(group("5", "-200", mentioned=True)) is Verdict.ALLOW


def test_surfaces_without_access_rules_are_open_in_direct_chats() -> None:
    assert policy().check(dm("anyone", surface="console")) is Verdict.ALLOW


def discord_message(*, channel: str, guild: str | None, parent: str | None = None) -> Inbound:
    return Inbound("discord", "channel", channel, "5", "hi", mentioned=True, guild_id=guild, parent_id=parent)


def test_discord_channels_pass_by_guild_by_channel_or_by_a_thread_s_parent() -> None:
    rules = SurfaceAccess(frozenset(), frozenset({"c1"}), True, frozenset({"g1"}))
    access = AccessPolicy([], {"discord": rules})
    assert access.check(discord_message(channel="c9", guild="g1")) is Verdict.ALLOW
    assert access.check(discord_message(channel="c1", guild="g2")) is Verdict.ALLOW
    assert access.check(discord_message(channel="thread7", guild="g2", parent="c1")) is Verdict.ALLOW
    assert access.check(discord_message(channel="c9", guild="g2")) is Verdict.IGNORE


def test_discord_access_comes_from_its_config_section() -> None:
    settings = Settings(
        discord={"allowed_guilds": [111], "allowed_channels": ["222"], "allowed_users": [333]}
    )
    access = AccessPolicy.from_settings(settings, [])
    assert access.check(discord_message(channel="9", guild="111")) is Verdict.ALLOW
    assert access.check(discord_message(channel="222", guild=None)) is Verdict.ALLOW
    assert access.check(Inbound("discord", "dm", "d", "333", "hi")) is Verdict.ALLOW
    assert access.check(Inbound("discord", "dm", "d", "444", "hi")) is Verdict.REFUSE


def pairing_policy(paired: set[tuple[str, str]] | None = None, **rules: Any) -> AccessPolicy:
    access = SurfaceAccess(
        allowed_users=frozenset(rules.get("users", ())),
        allowed_chats=frozenset(rules.get("chats", ())),
        require_mention=True,
        dm_policy=rules.get("dm_policy", "pairing"),
    )
    approved = paired or set()
    return AccessPolicy(
        ["telegram:1"], {"telegram": access}, clock=Clock(), paired=lambda s, u: (s, u) in approved
    )


def test_with_pairing_a_strangers_dm_goes_to_pairing_instead_of_a_refusal() -> None:
    access = pairing_policy(users={"2"})
    assert access.check(dm("9")) is Verdict.PAIR
    assert access.check(dm("9")) is Verdict.PAIR  # not once an hour: pairing rate-limits its own codes
    assert access.check(dm("1")) is Verdict.ALLOW
    assert access.check(dm("2")) is Verdict.ALLOW
    # Groups are decided by place, as before: strangers there get silence, never codes.
    assert access.check(group("9", "-200", mentioned=True)) is Verdict.IGNORE


def test_paired_people_are_allowed_whatever_the_dm_policy() -> None:
    assert pairing_policy({("telegram", "9")}).check(dm("9")) is Verdict.ALLOW
    allowlist = pairing_policy({("telegram", "9")}, dm_policy="allowlist")
    assert allowlist.check(dm("9")) is Verdict.ALLOW
    assert allowlist.check(dm("8")) is Verdict.REFUSE
    # A pairing is per platform.
    assert pairing_policy({("discord", "9")}).check(dm("9")) is Verdict.PAIR


def test_only_dms_of_people_neither_owner_nor_allowlisted_hang_on_pairing() -> None:
    access = pairing_policy(users={"2"})
    assert access.pairing_decides(dm("9"))
    assert not access.pairing_decides(dm("1"))
    assert not access.pairing_decides(dm("2"))
    assert not access.pairing_decides(group("9", mentioned=True))
    assert not access.pairing_decides(dm("9", surface="console"))


def test_dm_policy_and_the_code_lifetime_come_from_each_platforms_section() -> None:
    settings = Settings(
        telegram={"dm_policy": "pairing", "pairing_code_ttl_s": 600}, discord={"dm_policy": "allowlist"}
    )
    access = AccessPolicy.from_settings(settings, [])
    assert access.check(dm("9")) is Verdict.PAIR
    assert access.check(Inbound("discord", "dm", "d", "9", "hi")) is Verdict.REFUSE
    assert access.code_ttl_s("telegram") == 600
    access.update(Settings(telegram={"dm_policy": "allowlist"}))
    assert access.check(dm("9")) is Verdict.REFUSE


def test_an_ignored_group_is_logged_once_an_hour_with_the_id_to_allow(caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="bridge.gateway.access")
    clock = Clock()
    access = policy(clock, chats={"-100"})

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]

    assert access.check(group("7", "-1001234", mentioned=True)) is Verdict.IGNORE
    assert access.check(group("8", "-1001234", mentioned=True)) is Verdict.IGNORE
    assert lines() == [
        "telegram: ignored a message from group -1001234 (not in [telegram] allowed_chats; "
        "add it there to let the bot answer)"
    ]
    assert access.check(group("7", "-1005678", mentioned=True)) is Verdict.IGNORE
    assert len(lines()) == 2 and "group -1005678" in lines()[1]
    clock.now += 3601
    assert access.check(group("7", "-1001234", mentioned=True)) is Verdict.IGNORE
    assert len(lines()) == 3 and "group -1001234" in lines()[2]
    # An allowed group, and a stranger's DM: the DM names the key to add the user to.
    assert access.check(group("7", "-100", mentioned=True)) is Verdict.ALLOW
    assert access.check(dm("9")) is Verdict.REFUSE
    assert access.check(dm("9")) is Verdict.IGNORE
    assert lines()[3:] == [
        "telegram: refused a direct message from user 9 (not in [telegram] allowed_users; "
        "add it there to let the bot answer)"
    ]


def test_the_memory_of_logged_groups_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(access_module, "REMEMBERED_MAX", 50)
    clock = Clock()
    access = policy(clock)
    for chat in range(500):
        access.check(group("7", f"-{chat}", mentioned=True))
        clock.now += 1
    assert len(access._noted_at) <= 50
