"""The real TelegramAdapter (PTB's Bot) against the fake Bot API: DMs, groups, topics, output, faults."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge.errors import AdapterStartError
from bridge.events import Outbound, Route
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import GROUP, OWNER, RigFactory, telegram_settings

CORE = ["load_tool_group", "get_current_time", "search_history", "save_memory"]
STRANGER = 777


async def test_a_dm_from_the_owner_is_answered_as_a_reply_in_the_main_session(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("Hello **there**"))
    async with rig(fake_llm) as r:
        asked = tg.dm(OWNER, "hi bot")
        [reply] = await r.sent_to(OWNER, 1)
        main = await r.bridge.store.active_session("main")
    assert (
        reply["text"] == "Hello there"
        and reply["parse_mode"] == "HTML"
        and "<b>there</b>" in reply["raw_text"]
    )
    assert reply["reply_to_message_id"] == asked["message_id"]
    assert main is not None and main.surface == "telegram"
    assert fake_llm.requests[0]["messages"][-1]["content"] == "hi bot"


async def test_commands_are_registered_and_a_quick_answer_shows_no_typing(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("done"))
    async with rig(fake_llm) as r:
        tg.dm(OWNER, "hi")
        await r.sent_to(OWNER, 1)
    assert [c["command"] for c in tg.commands[-1]] == [
        "clear",
        "new",
        "status",
        "stop",
        "retry",
        "compact",
        "send",
        "model",
        "agent",
        "voice",
        "pair",
        "tasks",
        "help",
    ]
    # Typing shows only for an answer still coming a second in (tests/adapters/test_telegram_typing.py).
    assert tg.chat_actions == []


async def test_groups_loaded_in_turn_one_are_used_directly_in_turn_two(
    rig: RigFactory, tg: FakeTelegram
) -> None:
    model = HistoryTrustingModel()
    async with FakeOpenAI(model) as llm, rig(llm) as r:
        tg.dm(OWNER, "show my sessions")
        await r.sent_to(OWNER, 2)  # activity + reply
        tg.dm(OWNER, "show my sessions again")
        await r.sent_to(OWNER, 4)
        turn2 = r.requests_with_user_text("show my sessions again")[0]
        assert {"sessions_list", "sessions_history"} <= set(llm.tool_names(turn2))
        assert model.seen_errors == []
        tg.dm(OWNER, "/clear")
        await r.sent_to(OWNER, 5)
        tg.dm(OWNER, "hello")
        await r.sent_to(OWNER, 6)
        assert llm.tool_names(r.requests_with_user_text("hello")[0]) == CORE
    assert "Started a new session" in tg.messages_in(OWNER)[4]["text"]


async def test_activity_is_edited_in_place_and_the_reply_is_a_separate_message(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "sessions"}),
        fake.tool_call("sessions_list", {}),
        fake.text("One session."),
    )
    async with rig(fake_llm) as r:
        asked = tg.dm(OWNER, "my sessions?")
        await r.sent_to(OWNER, 2)
        # The activity message finishes on its own after the reply went out: wait for its last edit.
        await tg.wait_for(lambda: "sessions_list() ✓" in tg.messages_in(OWNER)[0]["text"])
        activity, reply = tg.messages_in(OWNER)
    assert activity["text"] == "⚙ load_tool_group(group_name=sessions) ✓\n⚙ sessions_list() ✓"
    assert activity["reply_to_message_id"] is None and activity["edit_count"] >= 1
    assert reply["text"] == "One session." and reply["reply_to_message_id"] == asked["message_id"]


async def test_in_groups_only_mentions_replies_and_addressed_commands_are_answered(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("first answer"), fake.text("second answer"))
    async with rig(fake_llm) as r:
        tg.group(GROUP, 5, "just chatting")
        tg.group(GROUP, 5, "/status@some_other_bot")
        tg.group(GROUP, 5, "@bridge_test_bot what is up?")
        [first] = await r.sent_to(GROUP, 1)
        tg.group(GROUP, 6, "and you?", reply_to_message=first)
        await r.sent_to(GROUP, 2)
        tg.group(GROUP, 5, "/status@bridge_test_bot")
        sent = await r.sent_to(GROUP, 3)
        session = await r.bridge.store.active_session(f"telegram:group:{GROUP}")
    assert [m["text"] for m in sent[:2]] == ["first answer", "second answer"]
    assert sent[2]["text"].startswith("Session: ")
    # The bot's own mention never reaches the model; unaddressed chatter never reaches it at all.
    assert fake_llm.requests[0]["messages"][-1]["content"] == "what is up?"
    assert [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "user"] == [
        "what is up?",
        "and you?",
    ]
    assert session is not None


async def test_require_mention_off_answers_every_group_message(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("heard you"))
    async with rig(fake_llm, require_mention=False) as r:
        tg.group(GROUP, 5, "no mention here")
        [reply] = await r.sent_to(GROUP, 1)
    assert reply["text"] == "heard you"


async def test_topics_are_their_own_sessions_and_replies_stay_in_them(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("in the topic"), fake.text("in general"))
    async with rig(fake_llm, require_mention=False) as r:
        tg.group(GROUP, 5, "topic question", message_thread_id=77, is_topic_message=True)
        [topic_reply] = await r.sent_to(GROUP, 1, thread_id=77)
        tg.group(GROUP, 5, "general question", message_thread_id=1, is_topic_message=True)
        await r.sent_to(GROUP, 2)
        topic = await r.bridge.store.active_session(f"telegram:group:{GROUP}:topic:77")
        general = await r.bridge.store.active_session(f"telegram:group:{GROUP}")
    general_reply = tg.messages_in(GROUP)[-1]
    assert topic_reply["text"] == "in the topic" and topic_reply["message_thread_id"] == 77
    assert general_reply["text"] == "in general" and general_reply["message_thread_id"] is None
    assert topic is not None and general is not None and topic.id != general.id
    assert all(params.get("message_thread_id") != 1 for method, params in tg.calls)


async def test_a_long_reply_is_split_under_the_limit_without_breaking_code_fences(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    code = "\n".join(f"line_{i} = {i}  # some code" for i in range(400))
    long_reply = "Intro paragraph.\n\n```python\n" + code + "\n```\n\nOutro 😀 " + "word " * 300
    fake_llm.push(fake.text(long_reply))
    async with rig(fake_llm) as r:
        tg.dm(OWNER, "give me a lot")

        def split() -> bool:
            # The answer streams into a draft first, whose tail shows "Outro" too: wait for the chunks,
            # the draft edited into the first.
            chunks = tg.messages_in(OWNER)
            if len(chunks) < 3:
                return False
            return chunks[0]["text"].startswith("Intro") and "Outro" in chunks[-1]["text"]

        await r.tg.wait_for(split)
        chunks = tg.messages_in(OWNER)
    assert len(chunks) >= 3
    assert all(c["parse_mode"] == "HTML" for c in chunks)
    # Each chunk with code opens and closes its own block.
    for chunk in chunks:
        assert chunk["raw_text"].count("<pre>") == chunk["raw_text"].count("</pre>")
    joined = "".join(c["text"] for c in chunks)
    assert all(f"line_{i} = {i}" in joined for i in range(400))
    # Only the first chunk replies to the question.
    assert [c["reply_to_message_id"] is not None for c in chunks] == [True] + [False] * (len(chunks) - 1)


async def test_markup_telegram_refuses_is_resent_once_as_plain_text(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("**bold** answer"))
    async with rig(fake_llm, stream=False) as r:
        tg.fail_next("sendMessage", "400", description="Bad Request: can't parse entities: unclosed tag")
        tg.dm(OWNER, "hi")
        [reply] = await r.sent_to(OWNER, 1)
        await asyncio.sleep(0)  # let any (wrong) duplicate send surface before counting
    assert reply["text"] == "**bold** answer" and reply["parse_mode"] is None
    assert len(tg.messages_in(OWNER)) == 1


async def test_markup_telegram_refuses_in_the_edit_of_a_draft_is_edited_again_as_plain_text(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("**bold** answer"))
    async with rig(fake_llm) as r:
        tg.fail_next("editMessageText", "400", description="Bad Request: can't parse entities: unclosed tag")
        tg.dm(OWNER, "hi")
        [reply] = await r.sent_to(OWNER, 1)
    assert reply["text"] == "**bold** answer" and reply["parse_mode"] is None
    assert len(tg.messages_in(OWNER)) == 1


@pytest.mark.parametrize("kind", ["429", "502", "drop"])
async def test_rate_limits_and_gateway_errors_are_retried_without_duplicates(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, kind: str
) -> None:
    fake_llm.push(fake.text("delivered once"))
    async with rig(fake_llm) as r:
        tg.fail_next("sendMessage", kind, times=2, retry_after=3)  # type: ignore[arg-type]
        tg.dm(OWNER, "hi")
        [reply] = await r.sent_to(OWNER, 1)
    assert reply["text"] == "delivered once"
    attempts = [c for c in tg.calls if c[0] == "sendmessage"]
    assert len(attempts) == 3 and len(tg.messages_in(OWNER)) == 1
    if kind == "429":
        assert r.waits[:2] == [3.0, 3.0]


async def test_a_restart_does_not_answer_already_handled_messages_again(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("answered"), fake.text("new one"))
    async with rig(fake_llm) as r:
        tg.dm(OWNER, "question")
        await r.sent_to(OWNER, 1)
    tg.redeliver_all()  # as if the bot died before confirming the update
    async with rig(fake_llm) as r:
        tg.dm(OWNER, "another question")
        await r.sent_to(OWNER, 2)
    assert [m["text"] for m in tg.messages_in(OWNER)] == ["answered", "new one"]
    assert len(fake_llm.requests) == 2


async def test_a_stranger_gets_one_short_refusal(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    async with rig(fake_llm) as r:
        tg.dm(STRANGER, "hello?")
        [refusal] = await r.sent_to(STRANGER, 1)
        tg.dm(STRANGER, "hello??")
        tg.dm(OWNER, "/help")
        await r.sent_to(OWNER, 1)
    assert str(STRANGER) in refusal["text"] and "allowed" in refusal["text"]
    assert len(tg.messages_in(STRANGER)) == 1
    assert fake_llm.requests == []


async def test_allowed_users_may_talk_in_their_own_session(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("hi friend"))
    async with rig(fake_llm, allowed_users=[STRANGER]) as r:
        tg.dm(STRANGER, "hello")
        await r.sent_to(STRANGER, 1)
        session = await r.bridge.store.active_session(f"telegram:dm:{STRANGER}")
    assert session is not None


async def test_media_it_cannot_open_gets_a_polite_reply(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    async with rig(fake_llm) as r:
        tg.dm(OWNER, None, sticker=True)
        [notice] = await r.sent_to(OWNER, 1)
    assert "sticker" in notice["text"] and "I read text and photos" in notice["text"]
    assert fake_llm.requests == []


async def test_edits_and_messages_from_bots_are_ignored(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("only this"))
    async with rig(fake_llm) as r:
        first = tg.dm(OWNER, "original", from_bot=True)
        tg.push_edited(first, "edited")
        tg.dm(OWNER, "real one")
        await r.sent_to(OWNER, 1)
    assert len(fake_llm.requests) == 1
    assert fake_llm.requests[0]["messages"][-1]["content"] == "real one"


async def test_a_bad_token_is_one_clear_error(
    tmp_path: object, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    from pathlib import Path

    from adapters.telegram import TelegramAdapter

    settings = telegram_settings(Path(str(tmp_path)), tg, fake_llm, token="999:WRONG")
    adapter = TelegramAdapter(settings.telegram)

    async def ignore(_: object) -> None:
        return None

    with pytest.raises(AdapterStartError, match="rejected the bot token"):
        await adapter.start(ignore)  # type: ignore[arg-type]
    assert [m for m, _ in tg.calls] == ["getme"]


async def test_a_draft_edited_into_a_reply_gets_the_replys_formatting(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    async with rig(fake_llm) as r:
        route = Route("telegram", str(OWNER))
        draft = await r.adapter.send(Outbound(route, "draft", "Hello **the"))
        assert draft is not None
        await r.adapter.edit_reply(route, draft, "Hello **there**, `x` is set.")
        # The same text again is not an error (Telegram says "not modified").
        await r.adapter.edit_reply(route, draft, "Hello **there**, `x` is set.")
    [message] = tg.messages_in(OWNER)
    assert message["text"] == "Hello there, x is set."
    assert message["parse_mode"] == "HTML" and "<b>there</b>" in message["raw_text"]


async def test_an_answer_streams_into_one_message_edited_at_the_platforms_rate(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    answer = "A long answer that arrives a few characters at a time, **formatted** once it is whole."
    fake_llm.push(fake.paced(fake.text(answer), 0.04))
    async with rig(fake_llm) as r:
        r.adapter.min_edit_interval_s = 0.3
        started = time.monotonic()
        tg.dm(OWNER, "tell me")
        [message] = await r.sent_to(OWNER, 1)
        took = time.monotonic() - started
        main = await r.bridge.store.active_session("main")
        assert main is not None
        stored = await r.bridge.store.history(main.id, 10)
    # One message: the draft, edited as the text grew, then into the formatted reply.
    assert (
        message["text"]
        == "A long answer that arrives a few characters at a time, formatted once it is whole."
    )
    assert message["parse_mode"] == "HTML" and "<b>formatted</b>" in message["raw_text"]
    assert stored[-1].content == answer
    edits = [e for e in tg.edits if e["message_id"] == message["message_id"]]
    # At least one edit while it streamed, and never more than the rate allows (plus the reply's).
    assert 2 <= len(edits) <= took / 0.3 + 2
    assert [c for c in tg.methods() if c == "sendmessage"] == ["sendmessage"]


def test_the_adapter_loads_without_cryptography_which_others_can_still_import() -> None:
    """PTB loads cryptography only for Telegram Passport, which Bridge never uses: a worker does not
    carry it (8 MB of its resident size), and the MCP SDK's JWT support can import it all the same."""
    code = (
        "import sys\n"
        "import adapters.telegram, telegram, telegram.ext\n"
        "assert not [m for m in sys.modules if m.startswith('cryptography')], 'loaded'\n"
        "from cryptography.hazmat.primitives import hashes\n"
        "print(hashes.SHA256.name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parent.parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "sha256", done.stderr[-2000:]
