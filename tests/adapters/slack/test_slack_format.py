"""mrkdwn from Markdown, the pieces a reply is sent as, and message events read as Inbound."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.slack.adapter import TEXT_LIMIT, SlackAdapter
from adapters.slack.events import Identity, NotAMessage, Remembered, normalize
from adapters.slack.format import escape, to_mrkdwn
from bridge.config.platforms import SlackSettings

ME = Identity(user_id="U0BOT", bot_id="B0BOT", team_id="T0", name="bridge")
# A control sequence Slack acts on: a mention, @channel/@here/@everyone, a user group, a channel.
PING = re.compile(r"<[!@#]")


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold**, *italic*, ~~gone~~ and `a<b`", "*bold*, _italic_, ~gone~ and `a&lt;b`"),
        ("# A heading\n\ntext", "*A heading*\ntext"),
        ("[the docs](https://example.com/a|b>c)", "<https://example.com/a%7Cb%3Ec|the docs>"),
        ("[x](javascript:alert(1)) and <https://example.com>", "x and <https://example.com>"),
        ("> quoted\n> twice", "> quoted\n> twice"),
        ("- one\n- two\n  - nested", "• one\n• two\n    • nested"),
        ("```python\nif a < b: pass\n```", "```\nif a &lt; b: pass\n```"),
        ("| a | b |\n|---|--:|\n| 1 | 22 |", "```\na |  b\n--+---\n1 | 22\n```"),
        ("Tom & Jerry &amp; friends", "Tom &amp; Jerry &amp; friends"),
    ],
)
def test_markdown_renders_as_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


@pytest.mark.parametrize("text", ["<!channel>", "<!here|here>", "<@U123>", "<#C1|general>", "<!subteam^S1>"])
def test_control_sequences_in_model_text_are_shown_not_acted_on(text: str) -> None:
    for rendered in (
        to_mrkdwn(f"hey {text}"),
        to_mrkdwn(f"`{text}`"),
        to_mrkdwn(f"[{text}](<{text}>)"),
        escape(text),
    ):
        assert not PING.search(rendered), rendered


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>!@#|&*_~`[]()-:/ \nabcU1^")), max_size=60))
def test_no_text_whatever_its_markup_renders_into_a_ping(text: str) -> None:
    assert not PING.search(to_mrkdwn(text))
    assert not PING.search(escape(text))


def test_a_long_reply_splits_into_pieces_that_fit_once_rendered_and_split_again_unchanged() -> None:
    adapter = SlackAdapter(SlackSettings())
    table = "| name | value |\n|---|---|\n" + "".join(
        f"| row {i} & more | {'x' * 40} |\n" for i in range(200)
    )
    text = "Intro **bold**\n\n" + table + "\n\n" + "word & <tag> " * 800
    pieces = adapter.split("reply", text)
    assert len(pieces) > 2
    for piece in pieces:
        assert adapter.split("reply", piece) == [piece]
        assert all(len(sent) <= TEXT_LIMIT for sent, _ in adapter._chunks("reply", piece))
    plain = adapter.split("notice", "<&>" * 3000)
    assert all(len(escape(piece)) <= TEXT_LIMIT for piece in plain) and "".join(plain) == "<&>" * 3000


def event(**fields: object) -> dict[str, object]:
    return {"type": "message", "channel": "C1", "user": "U1", "text": "hi", "ts": "1.000001", **fields}


def test_a_channel_message_is_read_as_people_wrote_it_and_addressed_by_mention() -> None:
    raw = "<@U0BOT>  look at <https://example.com|this> in <#C2|random> &amp; tell <@U2> &lt;3 <!here>"
    inbound = normalize(event(text=raw, channel_type="channel"), ME, Remembered())
    assert inbound is not None
    assert inbound.text == "look at this (https://example.com) in #random & tell @U2 <3 @here"
    assert inbound.mentioned and inbound.chat_type == "group" and inbound.thread_id is None
    unaddressed = normalize(event(channel_type="channel"), ME, Remembered())
    assert unaddressed is not None and not unaddressed.mentioned


def test_a_thread_reply_is_keyed_by_its_thread_and_addressed_where_the_bot_is_in_it() -> None:
    threads = Remembered()
    reply = event(thread_ts="0.5", channel_type="channel")
    first = normalize(reply, ME, threads)
    assert first is not None and first.thread_id == "0.5" and not first.mentioned
    threads.add("C1", "0.5")
    again = normalize(reply, ME, threads)
    assert again is not None and again.mentioned
    under_the_bot = normalize(event(thread_ts="0.7", parent_user_id="U0BOT"), ME, Remembered())
    assert under_the_bot is not None and under_the_bot.mentioned
    parent = normalize(event(thread_ts="1.000001"), ME, Remembered())
    assert parent is not None and parent.thread_id is None


@pytest.mark.parametrize(
    "ignored",
    [
        event(user="U0BOT"),
        event(bot_id="B9"),
        event(subtype="message_changed"),
        event(subtype="channel_join"),
        event(type="reaction_added"),
        event(text=""),
    ],
    ids=["its own", "another bot", "an edit", "a join", "not a message", "empty"],
)
def test_what_is_not_a_person_writing_is_not_looked_at(ignored: dict[str, object]) -> None:
    assert normalize(ignored, ME, Remembered()) is None


@pytest.mark.parametrize(
    "broken", [None, [], event(user=5), event(ts=None), event(text=["x"]), event(files="x")]
)
def test_a_malformed_message_is_an_error_that_says_which_field(broken: object) -> None:
    with pytest.raises(NotAMessage):
        normalize(broken, ME, Remembered())


def test_files_become_attachments_and_withheld_ones_are_named_unsupported() -> None:
    files = [
        {
            "id": "F1",
            "name": "a.png",
            "mimetype": "image/png",
            "size": 10,
            "url_private_download": "https://f/a",
        },
        {
            "id": "F2",
            "name": "clip.m4a",
            "mimetype": "audio/mp4",
            "subtype": "slack_audio",
            "url_private": "https://f/b",
        },
        {"id": "F3", "name": "notes.pdf", "mimetype": "application/pdf", "url_private": "https://f/c"},
    ]
    inbound = normalize(
        event(text="", subtype="file_share", files=files, channel_type="im"), ME, Remembered()
    )
    assert inbound is not None and inbound.chat_type == "dm" and inbound.mentioned
    assert [(a.kind, a.name, a.ref, a.voice) for a in inbound.attachments] == [
        ("image", "a.png", "https://f/a", False),
        ("audio", "clip.m4a", "https://f/b", True),
        ("file", "notes.pdf", "https://f/c", False),
    ]
    gone = normalize(
        event(text="", subtype="file_share", files=[{"id": "F4", "mode": "tombstone"}]), ME, Remembered()
    )
    assert gone is not None and gone.unsupported == "file"
