"""Session keys: the grammar round-trips, kinds are right, and junk fails only with SessionKeyError."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bridge.errors import SessionKeyError
from bridge.sessions import keys
from bridge.sessions.keys import RESERVED_KEYS, SessionKey, build, kind, parse

SURFACE_RE = re.compile(r"[a-z][a-z0-9_-]*")
SCOPE_WORDS = ("main", "dm", "group", "channel", "cron", "hook", "node", "agent", "global", "unknown")


def _valid_id(text: str) -> bool:
    return bool(text) and ":" not in text and not any(char.isspace() for char in text)


def _valid_surface(text: str) -> bool:
    return text not in SCOPE_WORDS and not text.startswith("node-")


surfaces = st.one_of(
    st.sampled_from(["telegram", "discord", "console", "slack_2", "x-y"]),
    st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True),
).filter(_valid_surface)

ids = st.one_of(
    st.integers().map(str),  # telegram user ids and (negative) chat ids
    st.integers(min_value=10**16, max_value=10**19).map(str),  # discord snowflakes
    st.uuids().map(str),  # hook ids
    st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),  # cron job ids like daily-report
    st.text(min_size=1, max_size=20).filter(_valid_id),  # anything else the grammar allows
)

# Matrix ids, whose server name (a host, an IPv4 or IPv6 address, maybe a port) follows a ':'.
servers = st.one_of(
    st.sampled_from(["example.org", "localhost", "127.0.0.1", "[::1]", "[2001:db8::1]", "topics", "topic1"]),
    st.from_regex(r"[a-z0-9][a-z0-9.-]{0,10}", fullmatch=True).filter(lambda host: host != "topic"),
)
matrix_ids = st.builds(
    "{}{}:{}{}".format,
    st.sampled_from("@!#$"),
    st.one_of(
        st.sampled_from(["ann", "topic", "AbC-_.=/+", "42"]),
        st.from_regex(r"[a-z0-9._=/-]{1,8}", fullmatch=True),
    ),
    servers,
    st.none().map(lambda _: "") | st.integers(min_value=1, max_value=65535).map(":{}".format),
)
# A chat's ids (users, chats, channels, threads): any id, or a Matrix id.
chat_ids = st.one_of(ids, matrix_ids)

# A sub-agent's number under its parent session.
children = st.integers(min_value=1, max_value=10**9)

session_keys = st.one_of(
    st.just(keys.main_key()),
    st.builds(keys.dm, surfaces, chat_ids),
    st.builds(keys.group, surfaces, chat_ids, st.none() | chat_ids),
    st.builds(keys.channel, surfaces, chat_ids),
    st.builds(keys.cron, ids),
    st.builds(keys.hook, ids),
    st.builds(keys.node, ids),
    st.builds(keys.agent, ids, children),
)

# Key strings written out by hand from the grammar, independently of build().
key_strings = st.one_of(
    st.just("main"),
    st.builds("{}:dm:{}".format, surfaces, chat_ids),
    st.builds("{}:group:{}".format, surfaces, chat_ids),
    st.builds("{}:group:{}:topic:{}".format, surfaces, chat_ids, chat_ids),
    st.builds("{}:channel:{}".format, surfaces, chat_ids),
    st.builds("cron:{}".format, ids),
    st.builds("hook:{}".format, ids),
    st.builds("node-{}".format, ids),
    st.builds("agent:{}:{}".format, ids, children),
)

# Strings made of grammar tokens, so junk is often nearly valid rather than only random.
tokens = st.sampled_from(
    [*SCOPE_WORDS, "topic", "node-", "telegram", "discord", "-1001234", "42", "", " ", ":", "\n", "Main"]
)
near_keys = st.lists(st.one_of(tokens, st.text(max_size=3)), max_size=7).map(":".join)
junk = st.one_of(st.text(), near_keys, near_keys.map(lambda text: text.replace(":", "", 1)))

invalid_ids = st.one_of(
    st.just(""),
    st.builds("{}:{}".format, st.text(max_size=5), st.text(max_size=5)).filter(
        lambda text: not keys.MATRIX_ID_RE.fullmatch(text)
    ),
    st.sampled_from(["@ann:topic", "@ann:topic:8448", "ann:example.org", "@:example.org", "@a:b:c", "@a:b:"]),
    st.builds("{}{}{}".format, st.text(max_size=5), st.sampled_from([" ", "\t", "\n", "\u00a0"]), st.text()),
)


@given(session_keys)
def test_every_built_key_parses_back_to_the_same_key(key: SessionKey) -> None:
    text = build(key)
    assert parse(text) == key
    assert str(key) == text


@given(key_strings)
def test_every_valid_key_string_builds_back_to_the_same_string(text: str) -> None:
    assert build(parse(text)) == text


@given(junk)
@example("")
@example("telegram:dm:")
@example("main:")
@example("node-")
@example("cron:a:b")
@example("telegram:dm:1:topic:2")
def test_any_text_either_round_trips_or_raises_session_key_error(text: str) -> None:
    try:
        key = parse(text)
    except SessionKeyError:
        return
    assert build(key) == text
    assert parse(build(key)) == key


@given(session_keys)
def test_kind_follows_the_scope(key: SessionKey) -> None:
    expected = {
        "main": "main",
        "dm": "other",
        "group": "group",
        "channel": "group",
        "cron": "cron",
        "hook": "hook",
        "node": "node",
        "agent": "agent",
    }[key.scope]
    assert key.kind == expected
    assert kind(key) == expected
    assert kind(str(key)) == expected


@given(surfaces, invalid_ids)
def test_constructors_reject_ids_that_are_empty_or_hold_colons_or_whitespace(surface: str, bad: str) -> None:
    for make in (
        lambda: keys.dm(surface, bad),
        lambda: keys.group(surface, bad),
        lambda: keys.group(surface, "1", bad),
        lambda: keys.channel(surface, bad),
        lambda: keys.cron(bad),
        lambda: keys.hook(bad),
        lambda: keys.node(bad),
        lambda: keys.agent(bad, 1),
    ):
        with pytest.raises(SessionKeyError):
            make()


@given(st.text(max_size=12).filter(lambda text: not (SURFACE_RE.fullmatch(text) and _valid_surface(text))))
def test_constructors_reject_surfaces_that_are_malformed_or_reserved(surface: str) -> None:
    with pytest.raises(SessionKeyError):
        keys.dm(surface, "1")


@pytest.mark.parametrize(
    ("text", "expected", "expected_kind"),
    [
        ("main", SessionKey("main"), "main"),
        ("telegram:dm:12345", SessionKey("dm", "telegram", "12345"), "other"),
        ("telegram:group:-1001234", SessionKey("group", "telegram", "-1001234"), "group"),
        ("telegram:group:-1001234:topic:7", SessionKey("group", "telegram", "-1001234", "7"), "group"),
        ("discord:channel:1122334455667788", SessionKey("channel", "discord", "1122334455667788"), "group"),
        ("console:dm:local", SessionKey("dm", "console", "local"), "other"),
        ("cron:daily-report", SessionKey("cron", id="daily-report"), "cron"),
        (
            "hook:5f0c7e9a-1b2c-4d3e-8f9a-0b1c2d3e4f5a",
            SessionKey("hook", id="5f0c7e9a-1b2c-4d3e-8f9a-0b1c2d3e4f5a"),
            "hook",
        ),
        ("node-worker-1", SessionKey("node", id="worker-1"), "node"),
        ("agent:5f0c7e9a1b2c4d3e:2", SessionKey("agent", id="5f0c7e9a1b2c4d3e", thread_id="2"), "agent"),
    ],
)
def test_table_examples_parse_build_and_have_their_kind(
    text: str, expected: SessionKey, expected_kind: str
) -> None:
    assert parse(text) == expected
    assert build(expected) == text
    assert kind(text) == expected_kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("matrix:dm:@ann:example.org", SessionKey("dm", "matrix", "@ann:example.org")),
        ("matrix:group:!abc:example.org", SessionKey("group", "matrix", "!abc:example.org")),
        (
            "matrix:group:!abc:example.org:topic:$root",
            SessionKey("group", "matrix", "!abc:example.org", "$root"),
        ),
        # A server with a port, an IPv6 server, and an event id of an old room version (with a server).
        (
            "matrix:group:!abc:localhost:8448:topic:$ev:example.org",
            SessionKey("group", "matrix", "!abc:localhost:8448", "$ev:example.org"),
        ),
        ("matrix:dm:@ann:[::1]:8448", SessionKey("dm", "matrix", "@ann:[::1]:8448")),
        # A group whose id only looks like a Matrix id before its topic: "topic" is no server name.
        ("telegram:group:@ann:topic:7", SessionKey("group", "telegram", "@ann", "7")),
    ],
)
def test_matrix_ids_stand_in_a_key_whole_colons_and_all(text: str, expected: SessionKey) -> None:
    assert parse(text) == expected
    assert build(expected) == text


def test_only_a_chats_ids_may_be_matrix_ids() -> None:
    assert str(keys.dm("matrix", "@ann:example.org")) == "matrix:dm:@ann:example.org"
    for make in (lambda: keys.cron("@a:b"), lambda: keys.hook("!a:b"), lambda: keys.node("@a:b")):
        with pytest.raises(SessionKeyError, match="contains ':'"):
            make()


def test_convenience_constructors_match_the_table() -> None:
    assert str(keys.main_key()) == "main"
    assert str(keys.dm("telegram", "42")) == "telegram:dm:42"
    assert str(keys.group("telegram", "-1001234")) == "telegram:group:-1001234"
    assert str(keys.group("telegram", "-1001234", "7")) == "telegram:group:-1001234:topic:7"
    assert str(keys.channel("discord", "99")) == "discord:channel:99"
    assert str(keys.cron("daily-report")) == "cron:daily-report"
    assert str(keys.hook("abc")) == "hook:abc"
    assert str(keys.node("n1")) == "node-n1"
    assert str(keys.agent("5f0c7e9a1b2c4d3e", 3)) == "agent:5f0c7e9a1b2c4d3e:3"


@pytest.mark.parametrize("reserved", sorted(RESERVED_KEYS))
def test_reserved_keys_are_rejected_by_parse_and_kind(reserved: str) -> None:
    with pytest.raises(SessionKeyError, match="reserved"):
        parse(reserved)
    with pytest.raises(SessionKeyError):
        kind(reserved)


@pytest.mark.parametrize("reserved", sorted(RESERVED_KEYS))
def test_reserved_words_cannot_be_built_as_scope_or_surface(reserved: str) -> None:
    with pytest.raises(SessionKeyError):
        SessionKey(reserved)  # type: ignore[arg-type]
    with pytest.raises(SessionKeyError):
        keys.dm(reserved, "1")


def test_reserved_keys_are_global_and_unknown() -> None:
    assert frozenset({"global", "unknown"}) == RESERVED_KEYS


@pytest.mark.parametrize("surface", ["main", "cron", "hook", "node", "dm", "group", "channel", "node-x"])
def test_surfaces_that_would_make_keys_ambiguous_are_rejected(surface: str) -> None:
    with pytest.raises(SessionKeyError, match="surface"):
        keys.dm(surface, "1")
    with pytest.raises(SessionKeyError):
        parse(f"{surface}:dm:1")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        (" main", "whitespace"),
        ("main\n", "whitespace"),
        ("telegram:dm:a b", "whitespace"),
        ("Main", "expected 'main'"),
        ("telegram", "expected 'main'"),
        ("main:dm:1", "'main' takes no"),
        ("telegram:dm:", "user id is empty"),
        ("telegram:dm", "user id is missing"),
        ("telegram:group:", "chat id is empty"),
        ("discord:channel", "channel id is missing"),
        ("telegram:chat:1", "unknown scope 'chat'"),
        (":dm:1", "surface is empty"),
        ("Telegram:dm:1", "lowercase"),
        ("telegram:dm:1:2", "extra part"),
        ("telegram:dm:1:", "trailing ':'"),
        ("telegram:dm:1:topic:2", "only valid on group"),
        ("discord:channel:1:topic:2", "only valid on group"),
        ("telegram:group:1:topic", "thread id is missing"),
        ("telegram:group:1:topic:", "thread id is empty"),
        ("telegram:group:1:topic:2:3", "extra part"),
        ("telegram:group:1:topic:2:", "trailing ':'"),
        ("telegram:group:1:thread:2", "extra part"),
        ("cron", "job id is missing"),
        ("cron:", "job id is empty"),
        ("cron:a:b", "extra part"),
        ("cron:a:", "trailing ':'"),
        ("hook:", "hook id is empty"),
        ("node-", "node id is empty"),
        ("node-a:b", "contains ':'"),
        ("node:1", "node-<node_id>"),
        ("agent", "parent session id is missing"),
        ("agent::1", "parent session id is empty"),
        ("agent:abc", "sub-agent number is missing"),
        ("agent:abc:", "sub-agent number is empty"),
        ("agent:abc:0", "whole number from 1"),
        ("agent:abc:01", "without leading zeros"),
        ("agent:abc:x", "whole number from 1"),
        ("agent:abc:1:2", "extra part"),
        ("agent:a b:1", "whitespace"),
        ("matrix:dm:@ann:example.org:x", "extra part"),
        ("matrix:dm:@ann:topic", "only valid on group"),
        ("matrix:group:!r:example.org:topic:a:b", "extra part"),
        ("cron:@ann:example.org", "extra part"),
        ("node-@ann:example.org", "contains ':'"),
        ("agent:@ann:example.org:1", "extra part"),
    ],
)
def test_parse_rejects_junk_and_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(SessionKeyError) as caught:
        parse(text)
    message = str(caught.value)
    assert message.startswith(f"invalid session key {text!r}: ")
    assert problem in message


def test_error_message_shows_the_bad_key_and_the_problem() -> None:
    with pytest.raises(SessionKeyError) as caught:
        parse("telegram:dm:")
    assert str(caught.value) == "invalid session key 'telegram:dm:': user id is empty"


def test_session_key_error_is_a_value_error() -> None:
    assert issubclass(SessionKeyError, ValueError)


@pytest.mark.parametrize(
    "fields",
    [
        {"scope": "main", "surface": "telegram"},
        {"scope": "main", "id": "1"},
        {"scope": "dm", "id": "1"},
        {"scope": "dm", "surface": "telegram"},
        {"scope": "dm", "surface": "telegram", "id": "1", "thread_id": "2"},
        {"scope": "channel", "surface": "discord", "id": "1", "thread_id": "2"},
        {"scope": "cron", "surface": "telegram", "id": "a"},
        {"scope": "cron"},
        {"scope": "node", "id": "n", "thread_id": "t"},
        {"scope": "topic", "surface": "telegram", "id": "1"},
    ],
)
def test_session_keys_with_missing_or_misplaced_parts_cannot_be_constructed(fields: dict[str, str]) -> None:
    with pytest.raises(SessionKeyError, match=r"^invalid session key SessionKey\("):
        SessionKey(**fields)  # type: ignore[arg-type]


def test_non_string_parts_are_a_type_error() -> None:
    with pytest.raises(TypeError):
        keys.dm("telegram", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        parse(None)  # type: ignore[arg-type]


def test_keys_are_immutable_and_hashable() -> None:
    key = keys.group("telegram", "-1001234", "7")
    assert {key: 1}[parse("telegram:group:-1001234:topic:7")] == 1
    with pytest.raises(AttributeError):
        key.id = "other"  # type: ignore[misc]


@pytest.mark.parametrize("n", [0, -1])
def test_a_sub_agent_is_numbered_from_one(n: int) -> None:
    with pytest.raises(SessionKeyError, match="whole number from 1"):
        keys.agent("5f0c7e9a1b2c4d3e", n)


def test_a_sub_agent_key_names_no_chat_to_post_in() -> None:
    assert keys.route_of_key("agent:5f0c7e9a1b2c4d3e:1") is None


def test_agent_is_no_surface_so_agent_keys_never_read_as_a_chat() -> None:
    with pytest.raises(SessionKeyError, match="surface"):
        keys.dm("agent", "1")
    # Whatever follows `agent:` is a parent session id and a number, never a surface's chat.
    assert parse("agent:dm:1") == SessionKey("agent", id="dm", thread_id="1")
