"""FakeDiscord driven by the real discord.py Client: login, gateway, messages, faults and RESUME."""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import discord
import pytest

from tests.fakes.discord_api import FakeDiscord, Upload

GUILD = 900_000_000_000_000_001
GENERAL = 900_000_000_000_000_011
RANDOM = 900_000_000_000_000_012
THREAD = 900_000_000_000_000_021
ALICE = 800_000_000_000_000_001


@dataclass
class Running:
    """A connected discord.Client and what it has seen."""

    client: discord.Client
    ready: asyncio.Event
    resumed: asyncio.Event
    task: asyncio.Task[None] | None = None
    messages: asyncio.Queue[discord.Message] = field(default_factory=asyncio.Queue)
    own: list[discord.Message] = field(default_factory=list)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.patch_discord(monkeypatch)
        server.add_guild(GUILD, "Bridge HQ", channels=[(GENERAL, "general"), (RANDOM, "random")])
        server.add_thread(THREAD, GENERAL, GUILD, "a thread")
        server.user(ALICE, "alice")
        yield server


def make_client() -> discord.Client:
    intents = discord.Intents.default()
    intents.message_content = True
    return discord.Client(intents=intents, guild_ready_timeout=0.05)


@contextlib.asynccontextmanager
async def running(fake: FakeDiscord) -> AsyncIterator[Running]:
    client = make_client()
    ready, resumed = asyncio.Event(), asyncio.Event()
    state = Running(client=client, ready=ready, resumed=resumed)

    @client.event
    async def on_ready() -> None:
        ready.set()

    @client.event
    async def on_resumed() -> None:
        resumed.set()

    @client.event
    async def on_message(message: discord.Message) -> None:
        if client.user is not None and message.author.id == client.user.id:
            state.own.append(message)  # Discord echoes the bot's own messages; a bot ignores them
            return
        await state.messages.put(message)

    await client.login(fake.token)
    task = state.task = asyncio.create_task(client.connect(reconnect=True))
    try:
        async with asyncio.timeout(5):
            await ready.wait()
        yield state
    finally:
        async with asyncio.timeout(5):
            await client.close()
            await task  # connect() returns once close() has run


async def next_message(state: Running, timeout: float = 5.0) -> discord.Message:  # noqa: ASYNC109
    async with asyncio.timeout(timeout):
        return await state.messages.get()


async def test_ready_sees_guild_channels_and_thread(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        client = state.client
        assert client.user is not None
        assert client.user.id == fake.bot_id
        assert client.user.name == "bridge_bot"
        guild = client.get_guild(GUILD)
        assert guild is not None
        assert guild.name == "Bridge HQ"
        general = guild.get_channel(GENERAL)
        assert isinstance(general, discord.TextChannel)
        assert general.name == "general"
        assert general.permissions_for(guild.me).send_messages
        thread = guild.get_thread(THREAD)
        assert thread is not None
        assert thread.parent_id == GENERAL
        assert fake.identify_count == 1
        assert fake.gateway_connects[0]["compress"] == "zlib-stream"  # frames are zlib-stream
        assert fake.intents is not None
        assert fake.intents & discord.Intents.message_content.flag


async def test_message_create_reaches_on_message(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        fake.post(GENERAL, ALICE, f"<@{fake.bot_id}> hello there")
        message = await next_message(state)
        assert message.content == f"<@{fake.bot_id}> hello there"
        assert message.author.id == ALICE
        assert message.author.name == "alice"
        assert message.guild is not None and message.guild.id == GUILD
        assert message.channel.id == GENERAL
        assert state.client.user in message.mentions

        in_thread = fake.post(THREAD, ALICE, "inside")
        message = await next_message(state)
        assert isinstance(message.channel, discord.Thread)
        assert in_thread["guild_id"] == str(GUILD)

        dm = fake.dm(ALICE, "psst")
        message = await next_message(state)
        assert message.guild is None
        assert isinstance(message.channel, discord.DMChannel)
        assert message.content == "psst"
        assert message.channel.id == int(dm["channel_id"])


async def test_reply_carries_reference(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        first = fake.post(GENERAL, ALICE, "first")
        await next_message(state)
        fake.post(GENERAL, ALICE, "second", reply_to=first["id"])
        reply = await next_message(state)
        assert reply.reference is not None
        assert reply.reference.message_id == int(first["id"])
        assert reply.type is discord.MessageType.reply


async def test_send_edit_and_typing(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        channel = state.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        async with channel.typing():
            sent = await channel.send("hi", allowed_mentions=discord.AllowedMentions.none(), nonce=1234)
        assert fake.typing == [str(GENERAL)]
        assert sent.content == "hi"
        assert sent.author.id == fake.bot_id
        [created] = fake.created
        assert created["content"] == "hi"
        assert created["_request"]["allowed_mentions"] == {"parse": []}
        assert created["_request"]["nonce"] == "1234"  # discord.py sends nonces as strings

        await sent.edit(content="hi, edited")
        assert fake.created[0]["content"] == "hi, edited"
        assert fake.edits[0]["content"] == "hi, edited"
        assert fake.messages_in(GENERAL)[-1]["content"] == "hi, edited"

        await fake.wait_for(lambda: len(state.own) == 1)  # the echo of its own message
        assert state.messages.empty()


async def test_enforce_nonce_returns_existing_message(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        route = discord.http.Route("POST", "/channels/{channel_id}/messages", channel_id=GENERAL)
        payload = {"content": "once", "nonce": "abc", "enforce_nonce": True}
        first = await state.client.http.request(route, json=payload)
        second = await state.client.http.request(route, json=payload)
        assert first["id"] == second["id"]
        assert len(fake.created) == 1


async def test_too_long_content_is_invalid_form_body(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        channel = state.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.HTTPException) as caught:
            await channel.send("x" * 2001)
        assert caught.value.status == 400
        assert caught.value.code == 50035
        assert fake.created == []


async def test_429_is_retried_after_retry_after(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        channel = state.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        fake.fail_next("POST /channels/{id}/messages", "429", retry_after=0.2)
        await channel.send("after the limit")
        attempts = fake.requests_to("POST /channels/{id}/messages")
        assert [a.get("fault") for a in attempts] == ["429", None]
        assert attempts[1]["at"] - attempts[0]["at"] >= 0.2 * 0.9
        assert [m["content"] for m in fake.created] == ["after the limit"]


async def test_reconnect_resumes_and_keeps_receiving(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        fake.post(GENERAL, ALICE, "before")
        assert (await next_message(state)).content == "before"
        fake.reconnect()
        await fake.wait_for(lambda: fake.resume_count == 1)
        async with asyncio.timeout(5):
            await state.resumed.wait()
        fake.post(GENERAL, ALICE, "after")
        assert (await next_message(state)).content == "after"
        assert fake.identify_count == 1


async def test_events_missed_while_dropped_are_replayed(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        fake.drop_gateway()
        fake.post(GENERAL, ALICE, "while away")  # logged in the session, replayed on RESUME
        assert (await next_message(state)).content == "while away"
        assert fake.resume_count == 1
        assert fake.identify_count == 1


async def test_wrong_token_is_login_failure(fake: FakeDiscord) -> None:
    client = make_client()
    try:
        with pytest.raises(discord.LoginFailure):
            await client.login("not-the-token")
    finally:
        await client.close()


async def test_close_and_stop_are_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    server = FakeDiscord()
    await server.start()
    server.patch_discord(monkeypatch)
    server.add_guild(GUILD, "Bridge HQ", channels=[(GENERAL, "general")])
    async with running(server):
        started = loop.time()
    assert loop.time() - started < 1.0
    started = loop.time()
    await server.stop()
    assert loop.time() - started < 1.0


async def test_dropped_create_raises_and_creates_nothing(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        channel = state.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        fake.fail_next("POST /channels/{channel_id}/messages", "drop")
        with pytest.raises(aiohttp.ClientError):
            await channel.send("lost")
        assert fake.created == []
        await channel.send("next one works")
        assert [m["content"] for m in fake.created] == ["next one works"]


async def test_edit_unknown_message_is_not_found(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        channel = state.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.NotFound) as caught:
            await channel.get_partial_message(123).edit(content="nope")
        assert caught.value.code == 10008


async def test_fetch_channel_and_open_dm(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        thread = await state.client.fetch_channel(THREAD)
        assert isinstance(thread, discord.Thread)
        assert thread.parent_id == GENERAL
        user = await state.client.fetch_user(ALICE)
        dm = await user.create_dm()
        await dm.send("hello alice")
        assert fake.created[-1]["channel_id"] == fake.dm_channel(ALICE)["id"]
        assert "guild_id" not in fake.created[-1]


async def test_gateway_rejects_a_wrong_token_with_4004(fake: FakeDiscord) -> None:
    client = make_client()
    await client.login(fake.token)
    client.http.token = "stale-token"  # REST login passed; IDENTIFY then carries the wrong token
    with pytest.raises(discord.ConnectionClosed) as caught:
        async with asyncio.timeout(5):
            await client.connect(reconnect=True)
    assert caught.value.code == 4004
    await client.close()


def png(width: int, height: int) -> bytes:
    """A PNG signature and IHDR chunk: enough for anything that reads the image's size."""
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))


def text_channel(state: Running) -> discord.TextChannel:
    channel = state.client.get_channel(GENERAL)
    assert isinstance(channel, discord.TextChannel)
    return channel


async def test_image_attachment_arrives_and_downloads(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        image = png(32, 16)
        posted = fake.post(GENERAL, ALICE, attachments=[Upload("cat.png", "image/png", image)])
        message = await next_message(state)
        assert message.content == ""
        [attachment] = message.attachments
        assert attachment.id == int(posted["attachments"][0]["id"])
        assert attachment.filename == "cat.png"
        assert attachment.content_type == "image/png"
        assert attachment.size == len(image)
        assert (attachment.width, attachment.height) == (32, 16)
        assert attachment.url.startswith(f"{fake.origin}/attachments/{GENERAL}/{attachment.id}/cat.png?")
        assert attachment.proxy_url
        assert not attachment.is_voice_message()
        assert not message.flags.voice
        assert fake.downloads == []

        assert await attachment.read() == image
        [download] = fake.downloads
        assert download["attachment_id"] == str(attachment.id)
        assert download["status"] == 200
        assert fake.files_of(message.id) == [("cat.png", "image/png", image)]


async def test_cdn_wants_the_signed_url_and_takes_faults(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        fake.dm(ALICE, "see file", attachments=[("notes.txt", "text/plain", b"hello")])
        message = await next_message(state)
        [attachment] = message.attachments
        async with aiohttp.ClientSession() as session:
            async with session.get(attachment.url.split("?")[0]) as response:
                assert response.status == 404
                assert await response.text() == "This content is no longer available."
            async with session.get(attachment.url) as response:
                assert response.status == 200
                assert response.headers["Content-Type"] == "text/plain"
                assert await response.read() == b"hello"
        fake.fail_next("GET /attachments/{}/{}/{}", "503")
        with pytest.raises(discord.HTTPException) as caught:
            await attachment.read()
        assert caught.value.status == 503
        assert [d["status"] for d in fake.downloads] == [404, 200, 503]


async def test_advertised_size_needs_no_allocation(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        big = 30 * 1024 * 1024
        fake.post(GENERAL, ALICE, "huge", attachments=[Upload("movie.mp4", "video/mp4", b"", size=big)])
        message = await next_message(state)
        assert message.attachments[0].size == big
        assert fake.downloads == []  # a bot that checks size first never fetches it

        fake.post(
            GENERAL, ALICE, "padded", attachments=[Upload("a.bin", "application/zip", b"PK", size=200_000)]
        )
        served = await (await next_message(state)).attachments[0].read()
        assert len(served) == 200_000
        assert served.startswith(b"PK")
        assert served[2:] == bytes(200_000 - 2)


async def test_voice_message_is_flagged(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        ogg = b"OggS" + bytes(100)
        posted = fake.dm(ALICE, attachments=[Upload("voice-message.ogg", "audio/ogg", ogg, voice=True)])
        message = await next_message(state)
        assert posted["flags"] == 1 << 13
        assert message.flags.voice
        [attachment] = message.attachments
        assert attachment.is_voice_message()
        assert attachment.content_type == "audio/ogg"
        assert attachment.duration == 2.5
        assert attachment.waveform
        assert await attachment.read() == ogg


async def test_sent_file_round_trips(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        data = b"col1,col2\n1,2\n"
        sent = await text_channel(state).send(
            "the report", file=discord.File(io.BytesIO(data), "my report.csv")
        )
        [attachment] = sent.attachments
        assert attachment.filename == "my_report.csv"  # Discord turns spaces into underscores
        assert attachment.content_type == "text/csv; charset=utf-8"
        assert attachment.size == len(data)
        assert await attachment.read() == data
        assert fake.files_of(sent.id) == [("my_report.csv", "text/csv; charset=utf-8", data)]
        [request] = fake.requests_to("POST /channels/{id}/messages")
        assert request["json"]["content"] == "the report"
        assert request["files"] == [
            {
                "name": "files[0]",
                "filename": "my report.csv",
                "content_type": "application/octet-stream",
                "size": 14,
            }
        ]

        image = png(8, 8)
        files = [discord.File(io.BytesIO(image), "a.png"), discord.File(io.BytesIO(b"x"), "b.bin")]
        sent = await text_channel(state).send(files=files)
        assert [(a.filename, a.width) for a in sent.attachments] == [("a.png", 8), ("b.bin", None)]
        assert [f[2] for f in fake.files_of(sent.id)] == [image, b"x"]


async def test_upload_over_the_limit_is_413(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        channel = text_channel(state)
        too_big = discord.File(io.BytesIO(bytes(10 * 1024 * 1024 + 1)), "big.bin")
        with pytest.raises(discord.HTTPException) as caught:
            await channel.send(file=too_big)
        assert caught.value.status == 413
        assert caught.value.code == 40005
        assert fake.created == []

        fake.upload_limit = 1000
        halves = [
            discord.File(io.BytesIO(bytes(500)), "a.bin"),
            discord.File(io.BytesIO(bytes(500)), "b.bin"),
        ]
        await channel.send(files=halves)  # exactly the limit in total
        with pytest.raises(discord.HTTPException) as caught:
            await channel.send(files=[discord.File(io.BytesIO(bytes(600)), n) for n in ("a.bin", "b.bin")])
        assert caught.value.status == 413
        assert len(fake.created) == 1


async def test_edit_keeps_or_replaces_attachments(fake: FakeDiscord) -> None:
    async with running(fake) as state:
        sent = await text_channel(state).send("v1", file=discord.File(io.BytesIO(b"one"), "one.txt"))
        edited = await sent.edit(content="v2")
        assert [a.filename for a in edited.attachments] == ["one.txt"]
        assert fake.created[0]["content"] == "v2"

        edited = await edited.edit(
            attachments=[*edited.attachments, discord.File(io.BytesIO(b"two"), "two.txt")]
        )
        assert [a.filename for a in edited.attachments] == ["one.txt", "two.txt"]
        assert [f[2] for f in fake.files_of(sent.id)] == [b"one", b"two"]

        edited = await edited.edit(attachments=[])
        assert edited.attachments == []
        assert fake.files_of(sent.id) == []
