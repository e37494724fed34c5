"""The send policy and agent-to-agent messaging through the real Telegram adapter and the fake Bot API."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram import TelegramAdapter
from bridge.app import Bridge
from bridge.config.session import SessionSettings
from bridge.store.base import OutboxRow
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import GROUP, OWNER, TelegramRig, telegram_settings
from tests.fakes.a2a_model import AgentToAgentModel

MEMBER = 5  # a group member who is not an owner
FRIEND = 555  # in [telegram] allowed_users
STRANGER = 777  # allowed nowhere
DENIED = -100888  # a second allowed group, denied by the policy in some tests
GROUP_KEY = f"telegram:group:{GROUP}"
DENIED_KEY = f"telegram:group:{DENIED}"
MENTION = "@bridge_test_bot"
DENY_GROUPS = {"action": "deny", "match": {"surface": "telegram", "chat_type": "group"}}
DENY_GROUPS_REASON = "rule 1 (deny: surface=telegram, chat_type=group)"

BotFactory = Callable[..., Any]


@dataclass
class PolicyRig(TelegramRig):
    """A TelegramRig that also knows when the core has written to its store (an item queued, sent or
    held back: every outbox row is written by a store transaction)."""

    _handed_over: asyncio.Event = field(default_factory=asyncio.Event)

    def handed_over(self) -> None:
        self._handed_over.set()
        self._handed_over = asyncio.Event()

    async def held_back(self, key: str, text: str, within: float = 5.0) -> None:
        """Wait until the policy has stored `text` as suppressed in the session with this key."""
        try:
            async with asyncio.timeout(within):
                while True:
                    changed = self._handed_over
                    if text in [row.item.text for row in await suppressed(self, key)]:
                        return
                    await changed.wait()
        except TimeoutError:
            held = [row.item.text for row in await suppressed(self, key)]
            raise AssertionError(f"{text!r} not held back in {key} within {within} s; held: {held}") from None


def echo(body: dict[str, Any]) -> Reply:
    """A model that answers every turn with its last message, so concurrent sessions cannot mix up."""
    return fake.text(f"re: {body['messages'][-1]['content']}")


def policy(*rules: dict[str, Any], default: str = "allow") -> dict[str, Any]:
    return {"send_policy": {"default": default, "rules": list(rules)}}


@pytest.fixture
def bot(tmp_path: Path, tg: FakeTelegram) -> BotFactory:
    """Like the `rig` fixture, plus a [session] section: `async with bot(llm, session=..., **telegram)`."""

    @asynccontextmanager
    async def make(
        llm: FakeOpenAI, *, session: dict[str, Any] | None = None, **telegram: Any
    ) -> AsyncIterator[PolicyRig]:
        settings = telegram_settings(tmp_path, tg, llm, **telegram)
        if session is not None:
            settings = settings.model_copy(update={"session": SessionSettings.model_validate(session)})
        waits: list[float] = []

        async def no_wait(seconds: float) -> None:
            waits.append(seconds)

        adapter = TelegramAdapter(settings.telegram, sleep=no_wait)
        adapter.min_edit_interval_s = 0.01
        async with Bridge(settings) as bridge:
            rig = PolicyRig(bridge, adapter, tg, llm, waits)
            write = bridge.store._write

            async def write_and_tell(work: Any, *, slow: bool = False) -> Any:
                try:
                    return await write(work, slow=slow)
                finally:
                    rig.handed_over()

            bridge.store._write = write_and_tell  # type: ignore[method-assign]
            bridge.add_sender(adapter)
            await adapter.start(bridge.handle)
            try:
                yield rig
            finally:
                await adapter.stop()

    return make


def bot_calls_to(tg: FakeTelegram, chat_id: int) -> list[str]:
    """Every Bot API call aimed at the chat: messages, edits and chat actions (typing) alike."""
    return [method for method, params in tg.calls if params.get("chat_id") == chat_id]


def texts_in(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m["text"] for m in tg.messages_in(chat_id)]


async def suppressed(r: TelegramRig, key: str) -> list[OutboxRow]:
    session = await r.bridge.store.active_session(key)
    if session is None:
        return []
    return await r.bridge.store.outbox(session_id=session.id, state="suppressed")


async def answer_to(r: PolicyRig, chat_id: int, text: str, within: float = 5.0) -> str:
    """The owner sends a command in the group; return the bot's answer, the next message there."""
    before = len(r.tg.messages_in(chat_id))
    r.tg.group(chat_id, OWNER, text)
    sent = await r.sent_to(chat_id, before + 1, within=within)
    return str(sent[before]["text"])


# -- shadow mode (deny) ---------------------------------------------------------------------------


async def test_a_denied_group_is_read_and_answered_in_history_but_nothing_reaches_telegram(
    bot: BotFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
    async with bot(fake_llm, session=policy(DENY_GROUPS)) as r:
        tg.group(GROUP, MEMBER, f"{MENTION} what time is it?")
        await r.held_back(GROUP_KEY, "It is noon.")
        group = await r.bridge.store.active_session(GROUP_KEY)
        assert group is not None
        history = await r.bridge.store.history(group.id, 100)
        rows = await suppressed(r, GROUP_KEY)
        status = await answer_to(r, GROUP, "/status")
    # The model was called with the member's words, and the whole turn is in the group's history...
    assert fake_llm.requests[0]["messages"][-1]["content"] == "what time is it?"
    assert [m.kind for m in history] == ["user", "tool_call", "tool_result", "assistant"]
    # ...but the only thing the bot ever sent to the group is the owner's /status answer: no reply,
    # no activity message or edit, not even a typing indicator.
    assert bot_calls_to(tg, GROUP) == ["sendmessage"]
    assert [(row.item.kind, row.item.text) for row in rows] == [
        ("activity", "⚙ get_current_time() …"),
        ("reply", "It is noon."),
    ]
    assert {row.item.reason for row in rows} == {DENY_GROUPS_REASON}
    # Owners' commands bypass the policy, and /status tells them what the policy held back.
    assert f"Send policy: off, decided by {DENY_GROUPS_REASON}; shadow mode" in status
    assert "Suppressed by the send policy: 2" in status.splitlines()


async def test_a_non_owners_commands_in_a_denied_group_are_suppressed_and_counted(
    bot: BotFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("held back"))
    deny_one = {"action": "deny", "match": {"key_prefix": DENIED_KEY}}
    async with bot(fake_llm, session=policy(deny_one), allowed_chats=[str(GROUP), str(DENIED)]) as r:
        tg.group(GROUP, MEMBER, "/send off")
        [refusal] = await r.sent_to(GROUP, 1)
        tg.group(DENIED, MEMBER, f"{MENTION} hello")
        await r.held_back(DENIED_KEY, "held back")
        tg.group(DENIED, MEMBER, "/send on")
        tg.group(DENIED, MEMBER, "/help")
        # Updates are handled in order: once the owner's /status is answered, both were handled.
        status = await answer_to(r, DENIED, "/status")
        rows = await suppressed(r, DENIED_KEY)
        denied = await r.bridge.store.active_session(DENIED_KEY)
    # In an allowed group the refusal is sent; in the denied one it is held back like any answer.
    assert refusal["text"] == "Only an owner of this bot can change where it may speak."
    assert texts_in(tg, DENIED) == [status]
    assert [row.item.text for row in rows][:2] == [
        "held back",
        "Only an owner of this bot can change where it may speak.",
    ]
    assert rows[2].item.text.startswith("Commands:")
    assert {row.item.reason for row in rows} == {f"rule 1 (deny: key_prefix={DENIED_KEY})"}
    assert denied is not None and denied.send_policy is None
    assert "Suppressed by the send policy: 3" in status.splitlines()
    assert f"Send policy: off, decided by rule 1 (deny: key_prefix={DENIED_KEY})" in status


async def test_status_counts_suppressed_answers_in_a_denied_group_that_had_no_session_yet(
    bot: BotFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    """The config promises that what the policy held back "is stored as suppressed, and /status counts
    it". A member's command answered in a denied group before anything made a session there is stored
    without a session id, so the owner's /status (which creates the session) reports 0."""
    deny_one = {"action": "deny", "match": {"key_prefix": DENIED_KEY}}
    async with bot(fake_llm, session=policy(deny_one), allowed_chats=[str(DENIED)]) as r:
        tg.group(DENIED, MEMBER, "/help")
        status = await answer_to(r, DENIED, "/status")
        held_back = [
            row
            for row in await r.bridge.store.outbox(state="suppressed")
            if row.item.session_key == DENIED_KEY
        ]
    assert [row.item.text[:9] for row in held_back] == ["Commands:"]
    assert texts_in(tg, DENIED) == [status]
    assert "Suppressed by the send policy: 1" in status.splitlines(), status


async def test_a_deny_rule_on_one_topic_silences_only_that_topic(bot: BotFactory, tg: FakeTelegram) -> None:
    topic_key = f"{GROUP_KEY}:topic:77"
    deny_topic = {"action": "deny", "match": {"key_prefix": topic_key}}
    async with FakeOpenAI(echo) as llm, bot(llm, session=policy(deny_topic), require_mention=False) as r:
        tg.group(GROUP, MEMBER, "in the topic", message_thread_id=77, is_topic_message=True)
        tg.group(GROUP, MEMBER, "in general", message_thread_id=1, is_topic_message=True)
        [general] = await r.sent_to(GROUP, 1)
        await r.held_back(topic_key, "re: in the topic")
    assert general["text"] == "re: in general" and general["message_thread_id"] is None
    assert texts_in(tg, GROUP) == ["re: in general"]
    assert not any(a["message_thread_id"] == 77 for a in tg.chat_actions)


async def test_send_off_in_a_topic_silences_only_that_topic(bot: BotFactory, tg: FakeTelegram) -> None:
    topic_key = f"{GROUP_KEY}:topic:77"
    in_topic: dict[str, Any] = {"message_thread_id": 77, "is_topic_message": True}
    async with FakeOpenAI(echo) as llm, bot(llm, require_mention=False) as r:
        tg.group(GROUP, OWNER, "/send off", **in_topic)
        [off] = await r.sent_to(GROUP, 1, thread_id=77)
        tg.group(GROUP, MEMBER, "topic question", **in_topic)
        tg.group(GROUP, MEMBER, "general question")
        await r.sent_to(GROUP, 2)
        await r.held_back(topic_key, "re: topic question")
        general = await r.bridge.store.active_session(GROUP_KEY)
    assert off["text"].startswith("Send policy for this session: off, decided by session override")
    assert [m["text"] for m in tg.messages_in(GROUP, thread_id=77)] == [off["text"]]
    assert texts_in(tg, GROUP)[-1] == "re: general question"
    assert general is not None and general.send_policy is None


# -- ignore ---------------------------------------------------------------------------------------


async def test_an_ignored_group_is_not_read_but_the_owners_send_on_is_answered_and_wins(
    bot: BotFactory, tg: FakeTelegram
) -> None:
    ignore_group = {"action": "ignore", "match": {"key_prefix": GROUP_KEY}}
    async with FakeOpenAI(echo) as llm, bot(llm, session=policy(ignore_group)) as r:
        tg.group(GROUP, MEMBER, f"{MENTION} is anyone there?")
        tg.group(GROUP, OWNER, f"{MENTION} not even for me?")
        # Handled in order: when the owner's /send is answered, both messages above were handled.
        answer = await answer_to(r, GROUP, "/send on")
        group = await r.bridge.store.active_session(GROUP_KEY)
        assert group is not None
        stored_while_ignored = await r.bridge.store.count_messages(group.id)
        requests_while_ignored = len(llm.requests)
        tg.group(GROUP, MEMBER, f"{MENTION} and now?")
        sent = await r.sent_to(GROUP, 2)
    assert stored_while_ignored == 0 and requests_while_ignored == 0
    assert answer.startswith("Send policy for this session: on, decided by session override (/send on)")
    # The session override beats even an ignore rule.
    assert sent[1]["text"] == "re: and now?"


# -- default deny ---------------------------------------------------------------------------------


async def test_default_deny_with_main_allowed_speaks_only_in_the_owners_dm(
    bot: BotFactory, tg: FakeTelegram
) -> None:
    only_main = policy({"action": "allow", "match": {"key_prefix": "main"}}, default="deny")
    async with FakeOpenAI(echo) as llm, bot(llm, session=only_main, allowed_users=[str(FRIEND)]) as r:
        tg.dm(FRIEND, "hello from a friend")
        tg.dm(STRANGER, "hello from a stranger")
        tg.dm(OWNER, "hello from the owner")
        [owner_reply] = await r.sent_to(OWNER, 1)
        friend_key = f"telegram:dm:{FRIEND}"
        await r.held_back(friend_key, "re: hello from a friend")
        stranger_rows = [
            row
            for row in await r.bridge.store.outbox(state="suppressed")
            if row.item.session_key == f"telegram:dm:{STRANGER}"
        ]
        friend_rows = await suppressed(r, friend_key)
    assert owner_reply["text"] == "re: hello from the owner"
    assert bot_calls_to(tg, FRIEND) == [] and bot_calls_to(tg, STRANGER) == []
    # The friend's DM is read and answered in history (shadow mode); the model never saw the stranger.
    assert sorted(b["messages"][-1]["content"] for b in llm.requests) == [
        "hello from a friend",
        "hello from the owner",
    ]
    assert {row.item.reason for row in friend_rows} == {"default (deny)"}
    # Even the refusal to the stranger is held back.
    assert [row.item.kind for row in stranger_rows] == ["notice"]
    assert str(STRANGER) in stranger_rows[0].item.text


# -- /send ----------------------------------------------------------------------------------------


async def test_send_off_silences_an_allowed_group_and_inherit_returns_to_the_config(
    bot: BotFactory, tg: FakeTelegram
) -> None:
    async with FakeOpenAI(echo) as llm, bot(llm) as r:
        tg.group(GROUP, MEMBER, f"{MENTION} one")
        await r.sent_to(GROUP, 1)
        off = await answer_to(r, GROUP, "/send@bridge_test_bot off")
        calls_after_off = len(bot_calls_to(tg, GROUP))
        tg.group(GROUP, MEMBER, f"{MENTION} two")
        await r.held_back(GROUP_KEY, "re: two")
        calls_while_off = bot_calls_to(tg, GROUP)[calls_after_off:]
        inherit = await answer_to(r, GROUP, "/send inherit")
        tg.group(GROUP, MEMBER, f"{MENTION} three")
        sent = await r.sent_to(GROUP, 4)
        rows = await suppressed(r, GROUP_KEY)
    assert off == (
        "Send policy for this session: off, decided by session override (/send off); shadow mode: "
        "the bot reads and answers in its history but sends nothing here."
    )
    assert calls_while_off == []  # no reply and no typing while off
    assert any(b["messages"][-1]["content"] == "two" for b in llm.requests)
    assert [row.item.reason for row in rows] == ["session override (/send off)"]
    assert inherit == "Send policy for this session: on, decided by default (allow); the bot speaks here."
    assert [m["text"] for m in sent] == ["re: one", off, inherit, "re: three"]


async def test_only_an_owner_may_change_the_send_policy(bot: BotFactory, tg: FakeTelegram) -> None:
    async with FakeOpenAI(echo) as llm, bot(llm) as r:
        tg.group(GROUP, MEMBER, "/send off")
        [refusal] = await r.sent_to(GROUP, 1)
        tg.group(GROUP, MEMBER, f"{MENTION} still there?")
        sent = await r.sent_to(GROUP, 2)
        group = await r.bridge.store.active_session(GROUP_KEY)
    assert refusal["text"] == "Only an owner of this bot can change where it may speak."
    assert sent[1]["text"] == "re: still there?"
    assert group is not None and group.send_policy is None


async def test_send_on_overrides_a_deny_rule_and_survives_clear(bot: BotFactory, tg: FakeTelegram) -> None:
    async with FakeOpenAI(echo) as llm, bot(llm, session=policy(DENY_GROUPS)) as r:
        on = await answer_to(r, GROUP, "/send on")
        tg.group(GROUP, MEMBER, f"{MENTION} before clear")
        await r.sent_to(GROUP, 2)
        cleared = await answer_to(r, GROUP, "/clear")
        tg.group(GROUP, MEMBER, f"{MENTION} after clear")
        await r.sent_to(GROUP, 4)
        status = await answer_to(r, GROUP, "/status")
        back = await answer_to(r, GROUP, "/send inherit")
        tg.group(GROUP, MEMBER, f"{MENTION} silenced again")
        await r.held_back(GROUP_KEY, "re: silenced again")
    assert (
        on == "Send policy for this session: on, decided by session override (/send on); the bot speaks here."
    )
    assert cleared.startswith("Started a new session")
    assert texts_in(tg, GROUP)[1] == "re: before clear" and texts_in(tg, GROUP)[3] == "re: after clear"
    assert "Send policy: on, decided by session override (/send on); the bot speaks here." in status
    assert back.startswith(f"Send policy for this session: off, decided by {DENY_GROUPS_REASON}")
    assert "re: silenced again" not in texts_in(tg, GROUP)


# -- agent to agent -------------------------------------------------------------------------------


def a2a(key: str = GROUP_KEY, **kwargs: Any) -> tuple[AgentToAgentModel, FakeOpenAI]:
    args = {"session_key": key, "message": "status?", "timeout_seconds": 10, **kwargs.pop("send", {})}
    script = AgentToAgentModel(send_args=args, **kwargs)
    return script, FakeOpenAI(script)


async def open_group_session(r: PolicyRig, thread_id: int | None = None) -> None:
    """A member mentions the bot in the group (or a topic of it), so the group has a session."""
    topic: dict[str, Any] = {"message_thread_id": thread_id, "is_topic_message": True} if thread_id else {}
    r.tg.group(GROUP, MEMBER, f"{MENTION} hello bot", **topic)


async def ask_the_other_chat(r: PolicyRig) -> str:
    """The owner asks main's agent to message the group's; wait for the relay and the whole exchange."""
    r.tg.dm(OWNER, "ask the other chat")

    def relayed() -> str | None:
        # The relay streams in edits: its last piece is the result's closing brace.
        return next((t for t in texts_in(r.tg, OWNER) if t.startswith("Relayed: ") and t.endswith("}")), None)

    await r.tg.wait_for(lambda: relayed() is not None, 20)
    await asyncio.wait_for(r.bridge.a2a.idle(), 20)
    return relayed() or ""


async def test_main_messages_a_group_and_the_announce_is_posted_there_once(
    bot: BotFactory, tg: FakeTelegram
) -> None:
    script, llm = a2a(announce="News from main: all quiet.")
    async with llm, bot(llm) as r:
        await open_group_session(r)
        await r.sent_to(GROUP, 1)
        relayed = await ask_the_other_chat(r)
        group = await r.bridge.store.active_session(GROUP_KEY)
        assert group is not None
        injected = [m for m in await r.bridge.store.history(group.id, 100) if m.via_session]
    result = json.loads(script.seen["send_result"][0])
    assert result["status"] == "ok" and result["reply"] == "All quiet here."
    assert "All quiet here." in relayed
    # The group's own reply went back to main's agent; the group hears only the announce, once.
    assert texts_in(tg, GROUP) == ["ok: hello bot", "News from main: all quiet."]
    announce = tg.messages_in(GROUP)[1]
    assert announce["reply_to_message_id"] is None
    assert injected and injected[0].via_session == "main"


async def test_announce_skip_leaves_the_group_untouched(bot: BotFactory, tg: FakeTelegram) -> None:
    script, llm = a2a(announce="ANNOUNCE_SKIP")
    async with llm, bot(llm) as r:
        await open_group_session(r)
        await r.sent_to(GROUP, 1)
        calls_before = len(bot_calls_to(tg, GROUP))
        relayed = await ask_the_other_chat(r)
    assert script.seen["announce"]  # the group's agent was asked, and chose to stay quiet
    assert "All quiet here." in relayed
    assert bot_calls_to(tg, GROUP)[calls_before:] == []
    assert texts_in(tg, GROUP) == ["ok: hello bot"]


async def test_the_announce_goes_to_the_topic_the_target_session_lives_in(
    bot: BotFactory, tg: FakeTelegram
) -> None:
    _script, llm = a2a(f"{GROUP_KEY}:topic:77", announce="News for the topic.")
    async with llm, bot(llm) as r:
        await open_group_session(r, thread_id=77)
        await r.sent_to(GROUP, 1, thread_id=77)
        await ask_the_other_chat(r)
    assert [m["text"] for m in tg.messages_in(GROUP, thread_id=77)] == [
        "ok: hello bot",
        "News for the topic.",
    ]
    assert len(tg.messages_in(GROUP)) == 2


async def test_an_adversarial_exchange_into_a_denied_group_sends_nothing_there(
    bot: BotFactory, tg: FakeTelegram
) -> None:
    script, llm = a2a(
        announce="LEAK: everything main said",
        target_turns=deque(["LEAK 1", "LEAK 2"]),
        requester_turns=deque(["say it in the chat!", "say it louder!"]),
    )
    deny_group = {"action": "deny", "match": {"key_prefix": GROUP_KEY}}
    async with llm, bot(llm, session=policy(deny_group)) as r:
        await open_group_session(r)
        await r.held_back(GROUP_KEY, "ok: hello bot")
        relayed = await ask_the_other_chat(r)
        rows = await suppressed(r, GROUP_KEY)
    assert json.loads(script.seen["send_result"][0])["status"] == "ok"
    assert "All quiet here." in relayed
    assert script.seen["announce"]  # the model did try to speak in the group...
    assert bot_calls_to(tg, GROUP) == []  # ...and nothing at all reached it
    assert [row.item.text for row in rows] == ["ok: hello bot", "LEAK: everything main said"]
    assert {row.item.reason for row in rows} == {f"rule 1 (deny: key_prefix={GROUP_KEY})"}


async def test_a_groups_agent_cannot_reach_main_even_when_the_owner_asks_in_the_group(
    bot: BotFactory, tg: FakeTelegram
) -> None:
    script, llm = a2a("main")
    async with llm, bot(llm) as r:
        tg.dm(OWNER, "hello")
        await r.sent_to(OWNER, 1)
        tg.group(GROUP, OWNER, f"{MENTION} ask the other chat")
        await tg.wait_for(lambda: any(t.startswith("Relayed: ") for t in texts_in(tg, GROUP)), 10)
        await asyncio.wait_for(r.bridge.a2a.idle(), 20)
        main = await r.bridge.store.active_session("main")
        assert main is not None
        main_history = await r.bridge.store.history(main.id, 100)
    assert "not_found" in script.seen["send_result"][0]
    assert "request" not in script.seen  # main's agent was never run for the group
    assert [m for m in main_history if m.via_session] == []
    assert [m.content for m in main_history if m.kind == "user"] == ["hello"]
    assert texts_in(tg, OWNER) == ["ok: hello"]


async def test_main_cannot_message_an_ignored_group(bot: BotFactory, tg: FakeTelegram) -> None:
    script, llm = a2a()
    ignore_group = {"action": "ignore", "match": {"key_prefix": GROUP_KEY}}
    async with llm, bot(llm, session=policy(ignore_group)) as r:
        await answer_to(r, GROUP, "/status")  # the owner's command makes the group's session
        relayed = await ask_the_other_chat(r)
        group = await r.bridge.store.active_session(GROUP_KEY)
        assert group is not None
        group_history = await r.bridge.store.history(group.id, 100)
    result = json.loads(script.seen["send_result"][0])
    assert result["status"] == "error" and "ignores" in result["error"]
    assert "ignores" in relayed
    assert "request" not in script.seen and group_history == []
    assert len(texts_in(tg, GROUP)) == 1  # only the /status answer
