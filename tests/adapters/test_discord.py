"""The real discord.py client against the fake Discord: DMs, channels, threads, output and faults."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route as DiscordRoute

from adapters.discord import DiscordAdapter
from bridge.errors import AdapterStartError, IntakeUnavailable
from bridge.events import Outbound, Route
from bridge.store.base import OutboxItem
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from tests.adapters.conftest import (
    CHANNEL,
    GUILD,
    MEMBER,
    OTHER_CHANNEL,
    OTHER_GUILD,
    THREAD,
    RigFactory,
    discord_settings,
)
from tests.adapters.conftest import (
    DISCORD_OWNER as OWNER,
)
from tests.fakes.discord_api import FakeDiscord

CORE = ["load_tool_group", "get_current_time", "search_history", "save_memory"]


@pytest.fixture
def rig(discord_rig: RigFactory) -> RigFactory:
    return discord_rig


def mention(dc: FakeDiscord) -> str:
    return f"<@{dc.bot_id}>"


async def test_a_dm_from_the_owner_is_answered_as_a_reply_that_pings_no_one(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    # Slow enough (over a second) to show typing.
    fake_llm.push(fake.delay(1.2, fake.text("Hello @everyone and <@&123>")))
    async with rig(fake_llm) as r:
        asked = dc.dm(OWNER, "hi bot")
        [reply] = await r.bot_sent(asked["channel_id"], 1)
        main = await r.bridge.store.active_session("main")
    assert reply["content"] == "Hello @everyone and <@&123>"
    assert reply["_request"]["allowed_mentions"]["parse"] == []
    assert reply["_request"]["allowed_mentions"].get("replied_user", False) is False
    assert str(reply["_request"]["message_reference"]["message_id"]) == asked["id"]
    assert reply["_request"]["nonce"] and reply["_request"]["enforce_nonce"] is True
    assert main is not None and main.surface == "discord"
    assert dc.typing


async def test_groups_loaded_in_turn_one_are_used_directly_in_turn_two_and_clear_resets(
    rig: Callable[..., Any], dc: FakeDiscord
) -> None:
    model = HistoryTrustingModel()
    async with FakeOpenAI(model) as llm, rig(llm) as r:
        first = dc.dm(OWNER, "show my sessions")
        channel = first["channel_id"]
        await r.bot_sent(channel, 2)
        dc.dm(OWNER, "show my sessions again")
        await r.bot_sent(channel, 4)
        turn2 = next(
            i
            for i, b in enumerate(llm.requests)
            if b["messages"][-1].get("content") == "show my sessions again"
        )
        assert {"sessions_list", "sessions_history"} <= set(llm.tool_names(turn2))
        assert model.seen_errors == []
        dc.dm(OWNER, "/clear")
        await r.bot_sent(channel, 5)
        dc.dm(OWNER, "hello")
        await r.bot_sent(channel, 6)
        hello = next(i for i, b in enumerate(llm.requests) if b["messages"][-1].get("content") == "hello")
        assert llm.tool_names(hello) == CORE
    assert "Started a new session" in r.bot_messages(channel)[4]["content"]


async def test_activity_is_edited_in_place_and_the_reply_is_separate(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is now."))
    async with rig(fake_llm) as r:
        asked = dc.dm(OWNER, "time?")
        activity, reply = await r.bot_sent(asked["channel_id"], 2)
        await dc.wait_for(lambda: "✓" in r.bot_messages(asked["channel_id"])[0]["content"])
    assert r.bot_messages(asked["channel_id"])[0]["content"] == "⚙ get_current_time() ✓"
    assert "message_reference" not in activity["_request"] or not activity["_request"]["message_reference"]
    assert reply["content"] == "It is now."


async def test_in_guild_channels_only_mentions_replies_and_commands_are_answered(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("first"), fake.text("second"))
    async with rig(fake_llm) as r:
        dc.post(CHANNEL, MEMBER, "just chatting", guild_id=GUILD)
        dc.post(
            OTHER_CHANNEL, MEMBER, f"{mention(dc)} not allowed here", guild_id=OTHER_GUILD, mentions_bot=True
        )
        dc.post(CHANNEL, MEMBER, f"{mention(dc)} what is up?", guild_id=GUILD, mentions_bot=True)
        [first] = await r.bot_sent(CHANNEL, 1)
        dc.post(CHANNEL, MEMBER, "and you?", guild_id=GUILD, reply_to=first["id"])
        await r.bot_sent(CHANNEL, 2)
        dc.post(CHANNEL, MEMBER, "/status", guild_id=GUILD)
        sent = await r.bot_sent(CHANNEL, 3)
        session = await r.bridge.store.active_session(f"discord:channel:{CHANNEL}")
    assert [m["content"] for m in sent[:2]] == ["first", "second"]
    assert sent[2]["content"].startswith("Session: ")
    assert fake_llm.requests[0]["messages"][-1]["content"] == "what is up?"
    assert r.bot_messages(OTHER_CHANNEL) == []
    assert session is not None and session.chat_type == "channel"


async def test_a_thread_is_its_own_session_and_records_its_parent_channel(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("in the thread"))
    async with rig(fake_llm, require_mention=False, allowed_guilds=[], allowed_channels=[str(CHANNEL)]) as r:
        dc.post(THREAD, MEMBER, "thread question", guild_id=GUILD)
        [reply] = await r.bot_sent(THREAD, 1)
        session = await r.bridge.store.active_session(f"discord:channel:{THREAD}")
    assert reply["content"] == "in the thread"
    assert session is not None and session.parent_id == str(CHANNEL)


async def test_long_replies_are_split_under_2000_characters_with_code_fences_intact(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    code = "\n".join(f"print({i})  # a line of code" for i in range(150))
    fake_llm.push(fake.text("Here:\n\n```python\n" + code + "\n```\n\nDone."))
    async with rig(fake_llm) as r:
        asked = dc.dm(OWNER, "code please")
        await dc.wait_for(lambda: any("Done." in m["content"] for m in r.bot_messages(asked["channel_id"])))
        chunks = r.bot_messages(asked["channel_id"])
    assert len(chunks) >= 3
    assert all(len(c["content"]) <= 2000 for c in chunks)
    assert all(c["content"].count("```") % 2 == 0 for c in chunks)
    joined = "".join(c["content"] for c in chunks)
    assert all(f"print({i})" in joined for i in range(150))


async def test_a_429_bucket_is_respected_and_a_dropped_send_is_retried_without_duplicates(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("after the limit"), fake.text("after the drop"))
    async with rig(fake_llm) as r:
        channel = dc.dm_channel(OWNER)["id"]
        key = "POST /channels/{id}/messages"
        dc.fail_next(key, "429", retry_after=0.3)
        dc.dm(OWNER, "one")
        await r.bot_sent(channel, 1)
        creates = [
            q
            for q in dc.requests
            if q["key"].startswith("POST /channels/") and q["path"].endswith("/messages")
        ]
        assert len(creates) == 2 and creates[1]["at"] - creates[0]["at"] >= 0.27
        dc.fail_next(key, "drop")
        dc.dm(OWNER, "two")
        await r.bot_sent(channel, 2)
    assert [m["content"] for m in r.bot_messages(channel)] == ["after the limit", "after the drop"]
    assert r.waits  # the drop was retried by the adapter (with the same nonce)


async def test_a_gateway_reconnect_mid_conversation_resumes_and_loses_nothing(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("before"), fake.text("after"))
    async with rig(fake_llm) as r:
        channel = dc.dm(OWNER, "first")["channel_id"]
        await r.bot_sent(channel, 1)
        dc.reconnect()
        await dc.wait_for(lambda: dc.resume_count >= 1)
        dc.dm(OWNER, "second")
        await r.bot_sent(channel, 2)
    assert [m["content"] for m in r.bot_messages(channel)] == ["before", "after"]
    assert dc.identify_count == 1


async def test_a_bad_token_is_one_clear_error(tmp_path: Path, dc: FakeDiscord, fake_llm: FakeOpenAI) -> None:
    settings = discord_settings(tmp_path, dc, fake_llm, token="WRONG.TOKEN")

    async def ignore(_: object) -> None:
        return None

    adapter = DiscordAdapter(settings.discord)
    with pytest.raises(AdapterStartError, match="rejected the bot token"):
        await adapter.start(ignore)  # type: ignore[arg-type]
    await asyncio.sleep(0)


async def test_other_people_s_dms_get_their_own_session_when_allowed_and_a_refusal_otherwise(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("hi member"))
    async with rig(fake_llm, allowed_users=[str(MEMBER)]) as r:
        asked = dc.dm(MEMBER, "hello")
        [reply] = await r.bot_sent(asked["channel_id"], 1)
        stranger = dc.dm(9999, "me too?")
        [refusal] = await r.bot_sent(stranger["channel_id"], 1)
        member_session = await r.bridge.store.active_session(f"discord:dm:{MEMBER}")
    assert reply["content"] == "hi member"
    assert "9999" in refusal["content"]
    assert member_session is not None
    assert len(fake_llm.requests) == 1


async def test_with_pairing_a_stranger_gets_a_code_and_once_approved_is_told_in_their_dm_channel(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("welcome, member"))
    async with rig(fake_llm, dm_policy="pairing") as r:
        asked = dc.dm(MEMBER, "hello")
        [given] = await r.bot_sent(asked["channel_id"], 1)
        code = given["content"].split("approve the code ")[1].split(" ")[0]
        assert fake_llm.requests == []
        owner = dc.dm(OWNER, f"/pair {code}")
        [approved] = await r.bot_sent(owner["channel_id"], 1)
        assert approved["content"].startswith(f"Approved discord user {MEMBER} ")
        # Told in the DM channel they wrote from (on Discord, not their user id).
        told = await r.bot_sent(asked["channel_id"], 2)
        assert told[1]["content"] == "You're approved: you can talk to this bot now."
        again = dc.dm(MEMBER, "hello again")
        answered = await r.bot_sent(again["channel_id"], 3)
    assert answered[2]["content"] == "welcome, member"
    assert len(fake_llm.requests) == 1


async def test_bots_and_system_messages_are_ignored(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("only the human"))
    async with rig(fake_llm, require_mention=False) as r:
        dc.post(CHANNEL, 8888, "beep boop", guild_id=GUILD, author_bot=True)
        dc.post(CHANNEL, MEMBER, "joined the server", guild_id=GUILD, message_type=7)  # a join notice
        dc.post(CHANNEL, MEMBER, "a human speaks", guild_id=GUILD)
        await r.bot_sent(CHANNEL, 1)
    assert len(fake_llm.requests) == 1
    assert fake_llm.requests[0]["messages"][-1]["content"] == "a human speaks"


async def test_a_server_error_on_send_is_retried_into_exactly_one_message(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("survived a 500"))
    async with rig(fake_llm) as r:
        dc.fail_next("POST /channels/{id}/messages", "500")
        asked = dc.dm(OWNER, "hi")
        [reply] = await r.bot_sent(asked["channel_id"], 1, within=10)
    assert reply["content"] == "survived a 500"
    assert len(r.bot_messages(asked["channel_id"])) == 1


async def test_a_message_delivered_again_after_a_restart_is_not_answered_again(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("once"))
    seen: list[Any] = []
    async with rig(fake_llm) as r:
        handle = r.bridge.handle

        async def recording(inbound: Any) -> Any:
            seen.append(inbound)
            return await handle(inbound)

        r.adapter._handler = recording
        asked = dc.dm(OWNER, "question")
        await r.bot_sent(asked["channel_id"], 1)
    # A new process on the same database, handed the same Discord message again.
    async with rig(fake_llm) as r:
        assert await r.bridge.handle(seen[0]) is None
    assert len(fake_llm.requests) == 1


async def test_a_missing_message_content_intent_is_named_with_where_to_enable_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llm: FakeOpenAI
) -> None:
    monkeypatch.setattr(DiscordRoute, "BASE", DiscordRoute.BASE)
    monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", DiscordWebSocket.DEFAULT_GATEWAY)
    async with FakeDiscord(allowed_privileged_intents=0) as strict:
        settings = discord_settings(tmp_path, strict, fake_llm)

        async def ignore(_: object) -> None:
            return None

        adapter = DiscordAdapter(settings.discord, client_options={"guild_ready_timeout": 0.05})
        with pytest.raises(AdapterStartError, match="Message Content Intent"):
            await adapter.start(ignore)  # type: ignore[arg-type]


async def test_a_chunk_in_flight_at_a_crash_is_sent_again_with_its_stored_nonce_and_posted_once(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    route = Route("discord", str(CHANNEL))
    async with rig(fake_llm) as r:
        # Discord took part 0 just before the crash, so its row still says `sending`; part 1 never went.
        first_id = await r.adapter.send(Outbound(route, "reply", "part 0", nonce="nonce-part-0"))
        common = OutboxItem("reply", "discord", str(CHANNEL), "", "pending", parts=2)
        await r.bridge.store.add_outbox(
            replace(common, text="part 0", state="sending", part=0, nonce="nonce-part-0"),
            replace(common, text="part 1", part=1, nonce="nonce-part-1"),
        )
    # Even where a Telegram send in doubt would be dropped, Discord's nonce makes the resend safe.
    async with rig(fake_llm) as r:
        r.bridge.delivery.resend_uncertain = False
        await r.bridge.recover()
        rows_ = await r.bridge.store.outbox()
    assert [m["content"] for m in r.bot_messages(CHANNEL)] == ["part 0", "part 1"]
    assert [(row.item.state, row.item.part) for row in rows_] == [("sent", 0), ("sent", 1)]
    assert rows_[0].platform_msg_id == first_id


async def test_a_message_the_store_cannot_take_yet_is_offered_again_and_answered_once(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("stored at the third try"))
    async with rig(fake_llm) as r:
        handle = r.bridge.handle
        refusals = [IntakeUnavailable("database is locked")] * 2

        async def locked_at_first(inbound: Any) -> Any:
            if refusals:
                raise refusals.pop()
            return await handle(inbound)

        r.adapter._handler = locked_at_first
        asked = dc.dm(OWNER, "hello")
        [reply] = await r.bot_sent(asked["channel_id"], 1)
    assert reply["content"] == "stored at the third try"
    first, second = r.waits  # the usual back-off: 0.5 s, then 1 s, each less up to a quarter of jitter
    assert 0.375 <= first <= 0.5 and 0.75 <= second <= 1.0
    assert len(fake_llm.requests) == 1


async def test_connected_for_sending_only_it_sends_edits_and_types_without_a_gateway_session(
    tmp_path: Path, dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    """A worker that answers chats while another one holds the gateway: REST only, then the gateway
    once it takes the connection over."""
    settings = discord_settings(tmp_path, dc, fake_llm)
    adapter = DiscordAdapter(settings.discord)
    channel = dc.dm_channel(OWNER)
    await adapter.start_sending()
    try:
        route = Route("discord", str(channel["id"]))
        sent = await adapter.send(Outbound(route, "reply", "from a worker that does not listen"))
        assert sent is not None
        await adapter.edit(route, sent, "edited without a gateway")
        await adapter.typing(route)
        assert dc.identify_count == 0
        assert [m["content"] for m in dc.created] == ["edited without a gateway"]

        async def ignore(_: object) -> None:
            return None

        await adapter.start(ignore)  # type: ignore[arg-type]
        assert dc.identify_count == 1
    finally:
        await adapter.stop()


async def test_a_channel_discord_refuses_is_one_warning_and_the_reply_is_marked_failed(
    rig: Callable[..., Any], dc: FakeDiscord, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.text("nobody will read this"), fake.text("read this"))
    # Sent whole, not streamed into a draft: the reply is the one send the fault refuses.
    async with rig(fake_llm, configure=lambda settings: setattr(settings.llm, "stream", False)) as r:
        dc.fail_next("POST /channels/{id}/messages", "403")
        asked = dc.dm(OWNER, "hi")
        channel = asked["channel_id"]

        async def failed() -> list[Any]:
            rows = await r.bridge.store.outbox(state="failed")
            return [row for row in rows if row.item.kind == "reply"]

        deadline = asyncio.get_running_loop().time() + 10
        while not await failed():
            assert asyncio.get_running_loop().time() < deadline, "the refused reply was never marked failed"
            await asyncio.sleep(0.05)
        [row] = await failed()
        assert "Missing Access" in (row.item.reason or "")
        dc.dm(OWNER, "and now?")
        [reply] = await r.bot_sent(channel, 1, within=10)
    assert reply["content"] == "read this"
    refused = [rec for rec in caplog.records if "refused" in rec.getMessage()]
    assert [rec.levelno for rec in refused] == [30]
    assert f"row {row.id} " in refused[0].getMessage()
    assert [rec for rec in caplog.records if rec.levelno >= 40 or rec.exc_info] == []
