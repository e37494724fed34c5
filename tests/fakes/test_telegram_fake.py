"""FakeTelegram driven by the real python-telegram-bot: Bot calls, faults and Application polling."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx
import pytest
from telegram import Bot, BotCommand, File, Message, MessageEntity, ReplyParameters, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, RetryAfter
from telegram.ext import Application, ContextTypes, MessageHandler, filters

from devkit.fakes.telegram_api import FakeTelegram

CHAT = 4242
GROUP = -100123


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # RetryAfter.retry_after as a timedelta, no warning
    async with FakeTelegram() as server:
        yield server


def make_bot(fake: FakeTelegram, token: str | None = None) -> Bot:
    return Bot(
        token or fake.token, base_url=f"{fake.api_base}/bot", base_file_url=f"{fake.api_base}/file/bot"
    )


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with make_bot(fake) as started:
        yield started


@contextlib.asynccontextmanager
async def running_app(
    fake: FakeTelegram, received: asyncio.Queue[Update], poll_timeout: int = 1
) -> AsyncIterator[Any]:
    """A real Application polling the fake; every message or edited message lands in `received`."""
    app = (
        Application.builder()
        .token(fake.token)
        .base_url(f"{fake.api_base}/bot")
        .base_file_url(f"{fake.api_base}/file/bot")
        .build()
    )

    async def on_message(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        await received.put(update)

    app.add_handler(MessageHandler(filters.ALL, on_message))
    await app.initialize()
    await app.start()
    assert app.updater is not None
    await app.updater.start_polling(poll_interval=0, timeout=poll_timeout)
    try:
        yield app
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()


async def take(received: asyncio.Queue[Update], n: int, within: float = 3.0) -> list[Update]:
    """The next n updates the handler saw; TimeoutError if they do not come within `within` s."""
    async with asyncio.timeout(within):
        return [await received.get() for _ in range(n)]


# -- Bot methods ------------------------------------------------------------------------------


async def test_get_me_returns_the_fake_bot(fake: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert (me.id, me.username, me.is_bot) == (123456, "bridge_test_bot", True)
    assert fake.methods().count("getme") == 2  # initialize() calls getMe too


async def test_a_wrong_token_raises_invalid_token(fake: FakeTelegram) -> None:
    wrong = make_bot(fake, "123456:WRONG-TOKEN")
    with pytest.raises(InvalidToken):
        await wrong.initialize()
    await wrong.shutdown()
    assert fake.calls == [("getme", {})]


async def test_send_message_with_html_round_trips(fake: FakeTelegram, bot: Bot) -> None:
    raw = '<b>Hi</b> &amp; <i>there</i> <a href="https://x.example/?a=1&amp;b=2">link</a> &#x1F600;&lt;'
    message = await bot.send_message(CHAT, raw, parse_mode=ParseMode.HTML)
    assert message.text == "Hi & there link 😀<"
    assert message.from_user is not None and message.from_user.id == fake.bot_id
    assert message.parse_entities() == {
        MessageEntity("bold", 0, 2): "Hi",
        MessageEntity("italic", 5, 5): "there",
        MessageEntity("text_link", 11, 4, url="https://x.example/?a=1&b=2"): "link",
    }
    [sent] = fake.sent
    assert sent["text"] == "Hi & there link 😀<" and sent["raw_text"] == raw and sent["parse_mode"] == "HTML"
    assert (sent["chat_id"], sent["message_id"]) == (CHAT, message.message_id)

    second = await bot.send_message(CHAT, "plain <b> stays", disable_notification=True)
    assert second.message_id == message.message_id + 1 and second.text == "plain <b> stays"
    assert fake.sent[1]["disable_notification"] is True and fake.sent[1]["parse_mode"] is None


@pytest.mark.parametrize(
    "raw",
    [
        "<b>never closed",
        "<div>x</div>",
        "<b><i>x</b></i>",
        "a < b",
        "x</b>",
        "line<br/>break",
        "AT&T",
        "&nbsp;",
        '<span class="nope">x</span>',
    ],
)
async def test_bad_html_is_rejected_like_telegram(fake: FakeTelegram, bot: Bot, raw: str) -> None:
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(CHAT, raw, parse_mode=ParseMode.HTML)
    assert fake.sent == []


async def test_allowed_html_tags_parse(bot: Bot) -> None:
    raw = (
        "<strong>a</strong><em>b</em><u>c</u><ins>d</ins><s>e</s><strike>f</strike><del>g</del>"
        '<code>h</code><pre><code class="language-python">i</code></pre><tg-spoiler>j</tg-spoiler>'
        '<span class="tg-spoiler">k</span><blockquote>l</blockquote><blockquote expandable>m</blockquote>'
        '<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji>&quot;&gt;'
    )
    message = await bot.send_message(CHAT, raw, parse_mode=ParseMode.HTML)
    assert message.text == 'abcdefghijklm👍">'
    assert [e.type for e in message.entities] == [
        "bold",
        "italic",
        "underline",
        "underline",
        "strikethrough",
        "strikethrough",
        "strikethrough",
        "code",
        "pre",
        "spoiler",
        "spoiler",
        "blockquote",
        "expandable_blockquote",
        "custom_emoji",
    ]
    assert message.entities[8].language == "python"


async def test_length_is_counted_in_utf16_units_of_the_visible_text(fake: FakeTelegram, bot: Bot) -> None:
    await bot.send_message(CHAT, "😀" * 2048)  # 4096 UTF-16 code units: the limit
    with pytest.raises(BadRequest, match=r"(?i)message is too long"):
        await bot.send_message(CHAT, "😀" * 2048 + "a")
    await bot.send_message(CHAT, "<b>" + "&amp;" * 4096 + "</b>", parse_mode=ParseMode.HTML)
    with pytest.raises(BadRequest, match=r"(?i)too long"):
        await bot.send_message(CHAT, "&lt;" * 4097, parse_mode=ParseMode.HTML)
    assert [len(m["text"]) for m in fake.sent] == [2048, 4096]


async def test_empty_text_is_rejected(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match=r"(?i)message text is empty"):
        await bot.send_message(CHAT, "  \n ")
    with pytest.raises(BadRequest, match=r"(?i)message text is empty"):
        await bot.send_message(CHAT, "<b> </b>", parse_mode=ParseMode.HTML)
    assert fake.sent == []


async def test_edit_message_text(fake: FakeTelegram, bot: Bot) -> None:
    message = await bot.send_message(CHAT, "draft")
    edited = await bot.edit_message_text("<b>final</b>", CHAT, message.message_id, parse_mode="HTML")
    assert isinstance(edited, Message) and edited.text == "final" and edited.edit_date is not None
    assert fake.edits == [
        {
            "chat_id": CHAT,
            "message_id": message.message_id,
            "text": "final",
            "raw_text": "<b>final</b>",
            "parse_mode": "HTML",
            "entities": [{"type": "bold", "offset": 0, "length": 5}],
        }
    ]
    [current] = fake.messages_in(CHAT)
    assert current["text"] == "final" and current["edit_count"] == 1
    assert fake.sent[0]["text"] == "draft"  # sent keeps what was first sent

    with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
        await bot.edit_message_text("<b>final</b>  ", CHAT, message.message_id, parse_mode="HTML")
    await bot.edit_message_text("final", CHAT, message.message_id)  # same text, formatting dropped
    with pytest.raises(BadRequest, match=r"(?i)message to edit not found"):
        await bot.edit_message_text("x", CHAT, 999)
    with pytest.raises(BadRequest, match=r"(?i)message_too_long"):
        await bot.edit_message_text("x" * 4097, CHAT, message.message_id)
    user_message = fake.dm(CHAT, "mine")
    with pytest.raises(BadRequest, match=r"(?i)can't be edited"):
        await bot.edit_message_text("yours", CHAT, user_message["message_id"])
    assert len(fake.edits) == 2


async def test_threads_and_replies(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match=r"(?i)message thread not found"):
        await bot.send_message(GROUP, "hi", message_thread_id=1)
    question = fake.group(GROUP, 7, "question", message_thread_id=5, is_topic_message=True)
    answer = await bot.send_message(
        GROUP, "answer", message_thread_id=5, reply_parameters=ReplyParameters(question["message_id"])
    )
    assert answer.message_thread_id == 5 and answer.reply_to_message is not None
    assert answer.reply_to_message.text == "question" and answer.chat.type == "supergroup"
    await bot.send_message(GROUP, "elsewhere", reply_to_message_id=question["message_id"])
    with pytest.raises(BadRequest, match=r"(?i)message to be replied not found"):
        await bot.send_message(GROUP, "orphan", reply_parameters=ReplyParameters(999))
    await bot.send_message(
        GROUP, "anyway", reply_parameters=ReplyParameters(999, allow_sending_without_reply=True)
    )

    assert [m["text"] for m in fake.messages_in(GROUP, 5)] == ["answer"]
    assert [m["text"] for m in fake.messages_in(GROUP)] == ["answer", "elsewhere", "anyway"]
    assert [m["reply_to_message_id"] for m in fake.sent] == [question["message_id"]] * 2 + [None]
    assert [m["message_id"] for m in fake.sent] == [2, 3, 4]  # one counter per chat, users included


async def test_commands_chat_actions_webhook_and_logout(fake: FakeTelegram, bot: Bot) -> None:
    await bot.set_my_commands([BotCommand("new", "Start over"), BotCommand("help", "Show help")])
    assert fake.commands == [
        [{"command": "new", "description": "Start over"}, {"command": "help", "description": "Show help"}]
    ]
    assert [c.command for c in await bot.get_my_commands()] == ["new", "help"]
    with pytest.raises(BadRequest, match=r"(?i)bot_command_invalid"):
        await bot.set_my_commands([BotCommand("Bad-Name", "x")])
    assert await bot.delete_my_commands()
    assert await bot.get_my_commands() == () and len(fake.commands) == 1

    await bot.send_chat_action(GROUP, ChatAction.TYPING, message_thread_id=5)
    assert fake.chat_actions == [{"chat_id": GROUP, "action": "typing", "message_thread_id": 5}]

    assert await bot.set_webhook("https://bridge.example/hook", max_connections=5)
    assert fake.webhook is not None and fake.webhook["url"] == "https://bridge.example/hook"
    info = await bot.get_webhook_info()
    assert info.url == "https://bridge.example/hook" and info.max_connections == 5
    with pytest.raises(Conflict, match=r"(?i)webhook is active"):
        await bot.get_updates()
    assert await bot.delete_webhook()
    assert fake.webhook is None and (await bot.get_webhook_info()).url == ""
    assert await bot.log_out() and await bot.close()


async def test_get_updates_confirms_through_offset(fake: FakeTelegram, bot: Bot) -> None:
    first, second, third = (fake.dm(CHAT, text) for text in ("one", "two", "three"))
    updates = await bot.get_updates()
    assert [u.message.text for u in updates if u.message] == ["one", "two", "three"]
    ids = [u.update_id for u in updates]
    assert ids == sorted(ids) and [m["message_id"] for m in (first, second, third)] == [1, 2, 3]

    assert [u.update_id for u in await bot.get_updates(offset=ids[1], limit=1)] == [ids[1]]
    assert [u.update_id for u in await bot.get_updates()] == ids[1:]  # ids[0] is gone for good
    fake.push_edited(third, "three!")
    assert [u.update_id for u in await bot.get_updates(allowed_updates=["edited_message"])] == [ids[2] + 1]
    assert len(await bot.get_updates(allowed_updates=[])) == 3  # [] restores the default set

    assert await bot.delete_webhook(drop_pending_updates=True)
    assert await bot.get_updates() == () and fake.pending_updates == []
    fake.redeliver_all()
    assert len(await bot.get_updates()) == 4


# -- faults -----------------------------------------------------------------------------------


async def test_429_raises_retry_after_and_sends_nothing(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("sendMessage", "429", retry_after=1)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(CHAT, "hi")
    assert caught.value.retry_after == dtm.timedelta(seconds=1)
    assert fake.sent == [] and fake.calls[-1][0] == "sendmessage"
    await bot.send_message(CHAT, "hi")  # only the next call fails
    assert [m["text"] for m in fake.sent] == ["hi"]


@pytest.mark.parametrize("kind", ["502", "drop"])
async def test_502_and_dropped_connections_raise_network_error(
    fake: FakeTelegram, bot: Bot, kind: Literal["502", "drop"]
) -> None:
    fake.fail_next("SENDMESSAGE", kind, times=2)
    for _ in range(2):
        with pytest.raises(NetworkError) as caught:
            await bot.send_message(CHAT, "hi")
        # PTB raises the NetworkError base class itself here, not TimedOut or a subclass.
        assert type(caught.value) is NetworkError
        assert ("Bad Gateway (502)" if kind == "502" else "RemoteProtocolError") in str(caught.value)
    assert fake.sent == [] and fake.methods()[-2:] == ["sendmessage", "sendmessage"]
    await bot.send_message(CHAT, "through")
    assert [m["text"] for m in fake.sent] == ["through"]


async def test_injected_400(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("editMessageText", "400", description="Bad Request: message can't be edited")
    message = await bot.send_message(CHAT, "a")
    with pytest.raises(BadRequest, match="Message can't be edited"):
        await bot.edit_message_text("b", CHAT, message.message_id)
    assert fake.edits == []


# -- the wire, checked with raw HTTP ----------------------------------------------------------


async def test_wire_format(fake: FakeTelegram) -> None:
    base = f"{fake.api_base}/bot{fake.token}"
    async with httpx.AsyncClient(trust_env=False) as client:
        as_json = await client.post(
            f"{base}/SendMessage",
            json={
                "chat_id": CHAT,
                "text": "json",
                "reply_parameters": '{"message_id": 5, "allow_sending_without_reply": true}',
            },
        )
        assert as_json.headers["content-type"] == "application/json"
        assert as_json.json()["ok"] is True and as_json.json()["result"]["text"] == "json"
        as_form = await client.post(
            f"{base}/sendmessage",
            data={
                "chat_id": str(CHAT),
                "text": "123",
                "entities": '[{"type": "bold", "offset": 0, "length": 3}]',
            },
        )
        assert as_form.json()["result"]["entities"] == [{"type": "bold", "offset": 0, "length": 3}]
        as_multipart = await client.post(
            f"{base}/sendMessage",
            data={"chat_id": str(CHAT), "text": "multi"},
            files={"doc": ("a.txt", b"abc")},
        )
        assert as_multipart.json()["result"]["text"] == "multi"
        assert fake.calls[0][1]["reply_parameters"] == {"message_id": 5, "allow_sending_without_reply": True}
        assert fake.calls[1][1] == {
            "chat_id": CHAT,
            "text": "123",
            "entities": [{"type": "bold", "offset": 0, "length": 3}],
        }
        assert fake.calls[2][1]["doc"] == {
            "filename": "a.txt",
            "content_type": "text/plain",
            "size": 3,
            "data": b"abc",
        }
        assert [m["text"] for m in fake.sent] == ["json", "123", "multi"]

        unknown = await client.post(f"{base}/frobnicate")
        assert (unknown.status_code, unknown.json()) == (
            404,
            {"ok": False, "error_code": 404, "description": "Not Found"},
        )
        wrong = await client.post(f"{fake.api_base}/bot1:nope/sendMessage", json={"chat_id": 1, "text": "x"})
        assert (wrong.status_code, wrong.json()) == (
            401,
            {"ok": False, "error_code": 401, "description": "Unauthorized"},
        )
        fake.fail_next("getMe", "429", retry_after=3)
        limited = await client.get(f"{base}/getMe")
        assert limited.status_code == 429 and limited.headers["content-type"] == "application/json"
        assert limited.json() == {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 3",
            "parameters": {"retry_after": 3},
        }
    assert len(fake.sent) == 3


async def test_stop_ends_an_open_long_poll_promptly(fake: FakeTelegram) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        poll = asyncio.create_task(
            client.post(f"{fake.api_base}/bot{fake.token}/getUpdates", data={"timeout": "30"})
        )
        await fake.wait_for(lambda: fake.open_polls == 1)
        async with asyncio.timeout(3):
            await fake.stop()
            response = await poll
    assert response.json() == {"ok": True, "result": []}


async def test_wait_for_times_out_with_a_helpful_message(fake: FakeTelegram) -> None:
    with pytest.raises(TimeoutError, match=r"fake\.sent"):
        await fake.wait_for(lambda: bool(fake.sent), timeout=0.05)


# -- a real Application polling ---------------------------------------------------------------


async def test_application_receives_pushed_messages_in_order(fake: FakeTelegram) -> None:
    received: asyncio.Queue[Update] = asyncio.Queue()
    fake.dm(CHAT, "first")
    fake.group(GROUP, CHAT, "/start@bridge_test_bot now", username="alice")
    async with running_app(fake, received):
        first, second = await take(received, 2)
        assert first.message is not None and first.message.text == "first"
        assert second.message is not None and second.message.chat.type == "supergroup"
        assert second.message.parse_entities(["bot_command"]) == {
            MessageEntity("bot_command", 0, 22): "/start@bridge_test_bot"
        }
        await fake.wait_for(lambda: fake.open_polls >= 1)
        fake.dm(CHAT, "third")
        [third] = await take(received, 1)
        assert third.message is not None and third.message.text == "third"
    assert [u.update_id for u in (first, second, third)] == [1, 2, 3]
    assert fake.pending_updates == []  # the updater confirmed them on stop


async def test_a_message_pushed_during_a_long_poll_arrives_promptly(fake: FakeTelegram) -> None:
    received: asyncio.Queue[Update] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    async with running_app(fake, received, poll_timeout=30):
        await fake.wait_for(lambda: fake.open_polls >= 1)
        pushed_at = loop.time()
        fake.dm(CHAT, "now")
        [update] = await take(received, 1, within=2.0)
        assert loop.time() - pushed_at < 2.0  # the poll woke; it did not wait out its 30 s
        assert update.message is not None and update.message.text == "now"
    started = loop.time()
    await fake.stop()
    assert loop.time() - started < 2.0


async def test_updates_are_redelivered_after_a_crash(fake: FakeTelegram) -> None:
    received: asyncio.Queue[Update] = asyncio.Queue()
    fake.dm(CHAT, "one")
    fake.dm(CHAT, "two")
    async with running_app(fake, received):
        first_run = await take(received, 2)
    async with running_app(fake, received):  # confirmed on stop: nothing old comes back
        fake.dm(CHAT, "three")
        second_run = await take(received, 1)
    fake.redeliver_all()
    async with running_app(fake, received):
        third_run = await take(received, 3)
    assert [u.message.text for u in first_run + second_run if u.message] == ["one", "two", "three"]
    assert [u.update_id for u in third_run] == [u.update_id for u in first_run + second_run]
    assert received.empty()


async def test_edited_messages_arrive_as_edited_message_updates(fake: FakeTelegram) -> None:
    received: asyncio.Queue[Update] = asyncio.Queue()
    async with running_app(fake, received):
        original = fake.dm(CHAT, "helo")
        [new] = await take(received, 1)
        fake.push_edited(original, "hello")
        [edit] = await take(received, 1)
    assert new.message is not None and new.edited_message is None
    assert edit.edited_message is not None and edit.message is None
    assert (edit.edited_message.message_id, edit.edited_message.text) == (original["message_id"], "hello")
    assert edit.edited_message.edit_date is not None


async def test_mention_entities_use_utf16_offsets(fake: FakeTelegram, bot: Bot) -> None:
    pushed = fake.group(GROUP, 7, "😀 hi @bridge_test_bot and @bob_2!")
    assert pushed["entities"] == [
        {"type": "mention", "offset": 6, "length": 16},
        {"type": "mention", "offset": 27, "length": 6},
    ]
    message = Message.de_json(pushed, bot)
    assert list(message.parse_entities(["mention"]).values()) == ["@bridge_test_bot", "@bob_2"]
    plain = fake.dm(CHAT, "mail a@b.example")
    assert "entities" not in plain


async def test_pushed_media_replies_and_bots_parse_in_ptb(fake: FakeTelegram, bot: Bot) -> None:
    question = fake.dm(CHAT, "look")
    photo = fake.dm(CHAT, None, photo=True, caption="/see @bob", reply_to_message=question)
    sticker = fake.group(GROUP, 9, None, sticker=True, from_bot=True, username="other_bot")
    as_photo, as_sticker = Message.de_json(photo, bot), Message.de_json(sticker, bot)
    assert as_photo.photo and as_photo.caption == "/see @bob"
    assert [e.type for e in as_photo.caption_entities] == ["bot_command", "mention"]
    assert as_photo.reply_to_message is not None and as_photo.reply_to_message.text == "look"
    assert as_sticker.sticker is not None and as_sticker.from_user is not None and as_sticker.from_user.is_bot
    assert as_sticker.chat.title and as_sticker.text is None


# -- files: downloads and uploads -------------------------------------------------------------

JPEG = b"\xff\xd8\xff\xe0fake-jpeg-bytes"
OGG = b"OggS\x00fake-opus"


async def test_pushed_media_downloads_through_get_file(fake: FakeTelegram, bot: Bot) -> None:
    fake.dm(CHAT, None, photo=JPEG, caption="see")
    fake.dm(CHAT, None, document=("notes.txt", "text/plain", b"hello notes"))
    fake.group(GROUP, 7, None, voice=OGG, duration=4)
    fake.dm(CHAT, None, audio=("song.mp3", "audio/mpeg", b"ID3 song"))
    photo, document, voice, audio = [u.message for u in await bot.get_updates() if u.message]

    assert len(photo.photo) == 2 and photo.caption == "see"
    small, large = photo.photo
    assert (small.width, large.width) == (90, 800) and large.file_size == len(JPEG)
    for size in (large, small):
        assert await (await size.get_file()).download_as_bytearray() == bytearray(JPEG)

    assert document.document is not None
    assert (document.document.file_name, document.document.mime_type) == ("notes.txt", "text/plain")
    assert document.document.file_size == len(b"hello notes")
    file = await bot.get_file(document.document.file_id)
    assert file.file_size == 11 and file.file_path is not None
    assert file.file_path.startswith(f"{fake.api_base}/file/bot{fake.token}/documents/")
    assert file.file_path.endswith(".txt")
    assert await file.download_as_bytearray() == bytearray(b"hello notes")

    assert voice.voice is not None and voice.voice.mime_type == "audio/ogg"
    assert voice.voice.duration == dtm.timedelta(seconds=4) and voice.voice.file_size == len(OGG)
    assert bytes(await (await voice.voice.get_file()).download_as_bytearray()) == OGG

    assert audio.audio is not None and audio.audio.file_name == "song.mp3"
    assert audio.audio.mime_type == "audio/mpeg"
    assert bytes(await (await audio.audio.get_file()).download_as_bytearray()) == b"ID3 song"

    assert len(fake.downloads) == 5 and fake.downloads[2].startswith("documents/")
    assert fake.methods().count("getfile") == 5


async def test_an_application_downloads_a_pushed_document(fake: FakeTelegram) -> None:
    received: asyncio.Queue[Update] = asyncio.Queue()
    async with running_app(fake, received):
        fake.dm(CHAT, None, document=("a.bin", "application/octet-stream", bytes(range(256))))
        [update] = await take(received, 1)
        assert update.message is not None and update.message.document is not None
        file = await update.message.document.get_file()
        assert await file.download_as_bytearray() == bytearray(range(256))
    assert file.file_path == f"{fake.api_base}/file/bot{fake.token}/{fake.downloads[0]}"
    assert len(fake.downloads) == 1


async def test_get_file_refuses_big_and_unknown_files(fake: FakeTelegram, bot: Bot) -> None:
    big = fake.dm(CHAT, None, document=("big.zip", "application/zip", b"PK"), file_size=30 * 1024 * 1024)
    assert big["document"]["file_size"] == 30 * 1024 * 1024
    with pytest.raises(BadRequest, match=r"(?i)^file is too big$"):
        await bot.get_file(big["document"]["file_id"])
    large_photo = fake.dm(CHAT, None, photo=JPEG, file_size=21 * 1024 * 1024)["photo"]
    assert [size["file_size"] for size in large_photo] == [len(JPEG), 21 * 1024 * 1024]
    with pytest.raises(BadRequest, match=r"(?i)file is too big"):
        await bot.get_file(large_photo[-1]["file_id"])
    thumbnail = await bot.get_file(large_photo[0]["file_id"])
    assert await thumbnail.download_as_bytearray() == bytearray(JPEG)

    at_limit = fake.register_file(b"x", file_size=20 * 1024 * 1024)  # exactly 20 MB is still allowed
    assert (await bot.get_file(at_limit)).file_size == 20 * 1024 * 1024
    with pytest.raises(BadRequest, match=r"(?i)^invalid file_id$"):
        await bot.get_file("no-such-file")
    legacy = fake.dm(CHAT, None, photo=True)  # photo=True: sizes with no file behind them
    with pytest.raises(BadRequest, match=r"(?i)invalid file_id"):
        await bot.get_file(legacy["photo"][-1]["file_id"])
    assert [f"{fake.api_base}/file/bot{fake.token}/{path}" for path in fake.downloads] == [
        thumbnail.file_path
    ]

    with pytest.raises(ValueError, match="one media"):
        fake.dm(CHAT, None, photo=JPEG, voice=OGG)
    with pytest.raises(ValueError, match="file_size"):
        fake.dm(CHAT, "text", file_size=5)


async def test_the_file_route_checks_the_token_and_takes_faults(fake: FakeTelegram, bot: Bot) -> None:
    file_id = fake.register_file(b"secret", file_name="s.txt")
    file = await bot.get_file(file_id)
    assert file.file_path is not None
    path = file.file_path.split(f"/file/bot{fake.token}/", 1)[1]

    wrong = File(file.file_id, file.file_unique_id, file_path=f"{fake.api_base}/file/bot1:WRONG/{path}")
    wrong.set_bot(bot)
    with pytest.raises(InvalidToken, match="Not Found"):
        await wrong.download_as_bytearray()
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.get(f"{fake.api_base}/file/botnot-a-token/{path}")
        assert (response.status_code, response.json()) == (
            404,
            {"ok": False, "error_code": 404, "description": "Not Found"},
        )
        missing = await client.get(f"{fake.api_base}/file/bot{fake.token}/documents/nope.txt")
        assert missing.status_code == 404
        served = await client.get(f"{fake.api_base}/file/bot{fake.token}/{path}")
        assert served.content == b"secret"
        assert served.headers["content-type"] == "application/octet-stream"
    assert fake.downloads == [path]

    fake.fail_next("file", "502")
    with pytest.raises(NetworkError, match="Bad Gateway"):
        await file.download_as_bytearray()
    assert await file.download_as_bytearray() == bytearray(b"secret")
    assert fake.downloads == [path, path]


async def test_send_photo_and_document_round_trip(fake: FakeTelegram, bot: Bot) -> None:
    question = fake.group(GROUP, 7, "question", message_thread_id=5, is_topic_message=True)
    photo = await bot.send_photo(
        GROUP,
        JPEG,
        caption="<b>Look</b> here",
        parse_mode=ParseMode.HTML,
        message_thread_id=5,
        reply_parameters=ReplyParameters(question["message_id"]),
        disable_notification=True,
    )
    assert photo.caption == "Look here" and photo.text is None
    assert photo.parse_caption_entities() == {MessageEntity("bold", 0, 4): "Look"}
    assert len(photo.photo) == 2 and photo.photo[-1].file_size == len(JPEG)
    assert photo.message_thread_id == 5 and photo.reply_to_message is not None
    assert await (await photo.photo[-1].get_file()).download_as_bytearray() == bytearray(JPEG)

    document = await bot.send_document(CHAT, b"%PDF-1.4 report", filename="report.pdf", caption="the report")
    assert document.document is not None and document.caption == "the report"
    assert (document.document.file_name, document.document.mime_type) == ("report.pdf", "application/pdf")
    assert await (await document.document.get_file()).download_as_bytearray() == bytearray(b"%PDF-1.4 report")
    voice = await bot.send_voice(CHAT, OGG, duration=3)
    assert voice.voice is not None and voice.voice.duration == dtm.timedelta(seconds=3)
    audio = await bot.send_audio(CHAT, b"ID3", filename="a.mp3")
    assert audio.audio is not None and audio.audio.file_name == "a.mp3" and audio.caption is None

    again = await bot.send_document(CHAT, document.document.file_id)  # by file_id: nothing uploaded
    assert again.document is not None and again.document.file_id == document.document.file_id
    by_url = await bot.send_photo(CHAT, "https://pics.example/cat.jpg?size=big")
    assert len(by_url.photo) == 1

    assert [(f["method"], f["source"], f["filename"], f["data"]) for f in fake.sent_files] == [
        ("sendphoto", "upload", "application.octet-stream", JPEG),
        ("senddocument", "upload", "report.pdf", b"%PDF-1.4 report"),
        ("sendvoice", "upload", "application.octet-stream", OGG),
        ("sendaudio", "upload", "a.mp3", b"ID3"),
        ("senddocument", "file_id", "report.pdf", b"%PDF-1.4 report"),
        ("sendphoto", "url", "cat.jpg", b""),
    ]
    first = fake.sent_files[0]
    assert (first["chat_id"], first["message_id"], first["caption"]) == (GROUP, photo.message_id, "Look here")
    assert first["file_id"] == photo.photo[-1].file_id and first["content_type"] == "application/octet-stream"
    assert fake.sent_files[1]["content_type"] == "application/pdf"
    assert fake.sent_files[-1]["url"] == "https://pics.example/cat.jpg?size=big"

    [record] = fake.messages_in(GROUP, 5)
    assert record["media"] == "photo" and record["text"] == "Look here"
    assert record["raw_text"] == "<b>Look</b> here" and record["parse_mode"] == "HTML"
    assert record["entities"] == [{"type": "bold", "offset": 0, "length": 4}]
    assert record["reply_to_message_id"] == question["message_id"] and record["disable_notification"]
    assert record["file_id"] == photo.photo[-1].file_id
    assert [(m["media"], m["text"]) for m in fake.messages_in(CHAT)] == [
        ("document", "the report"),
        ("voice", ""),
        ("audio", ""),
        ("document", ""),
        ("photo", ""),
    ]
    await bot.send_message(CHAT, "plain")
    assert fake.sent[-1]["media"] is None and fake.sent[-1]["file_id"] is None


async def test_uploads_are_refused_like_telegram(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match=r"(?i)^photo_save_file_invalid$"):
        await bot.send_photo(CHAT, b"\xff" * (10 * 1024 * 1024 + 1))
    await bot.send_document(CHAT, b"\0" * (10 * 1024 * 1024 + 1), filename="fine.bin")  # 10 MB+: a file
    with pytest.raises(NetworkError, match=r"^Request Entity Too Large$"):
        await bot.send_document(CHAT, b"\0" * (50 * 1024 * 1024 + 1), filename="huge.bin")
    assert fake.calls[-1] == ("senddocument", {})

    with pytest.raises(BadRequest, match=r"(?i)message caption is too long"):
        await bot.send_photo(CHAT, JPEG, caption="😀" * 512 + "a")
    await bot.send_photo(CHAT, JPEG, caption="<i>" + "😀" * 512 + "</i>", parse_mode=ParseMode.HTML)
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_photo(CHAT, JPEG, caption="<b>open", parse_mode=ParseMode.HTML)
    with pytest.raises(BadRequest, match=r"(?i)file must be non-empty"):
        await bot.send_document(CHAT, b"", filename="empty.txt")
    with pytest.raises(BadRequest, match=r"(?i)wrong file identifier/http url specified"):
        await bot.send_document(CHAT, "no-such-file-id")
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.post(f"{fake.api_base}/bot{fake.token}/sendPhoto", data={"chat_id": CHAT})
        assert response.json()["description"] == "Bad Request: there is no photo in the request"
        attached = await client.post(
            f"{fake.api_base}/bot{fake.token}/sendDocument",
            data={"chat_id": str(CHAT), "document": "attach://part"},
            files={"part": ("x.txt", b"attached")},
        )
        assert attached.json()["result"]["document"]["file_name"] == "x.txt"
    assert [f["filename"] for f in fake.sent_files] == ["fine.bin", "application.octet-stream", "x.txt"]


async def test_media_messages_edit_their_caption_not_text(fake: FakeTelegram, bot: Bot) -> None:
    photo = await bot.send_photo(CHAT, JPEG, caption="draft")
    with pytest.raises(BadRequest, match=r"(?i)there is no text in the message to edit"):
        await bot.edit_message_text("text", CHAT, photo.message_id)
    edited = await bot.edit_message_caption(CHAT, photo.message_id, caption="<i>final</i>", parse_mode="HTML")
    assert isinstance(edited, Message) and edited.caption == "final" and edited.photo
    with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
        await bot.edit_message_caption(CHAT, photo.message_id, caption="<i>final</i>", parse_mode="HTML")
    [current] = fake.messages_in(CHAT)
    assert (current["text"], current["edit_count"], current["media"]) == ("final", 1, "photo")
    assert fake.edits[-1]["media"] == "photo" and fake.edits[-1]["raw_text"] == "<i>final</i>"
    removed = await bot.edit_message_caption(CHAT, photo.message_id)
    assert isinstance(removed, Message) and removed.caption is None

    text = await bot.send_message(CHAT, "words")
    with pytest.raises(BadRequest, match=r"(?i)there is no caption in the message to edit"):
        await bot.edit_message_caption(CHAT, text.message_id, caption="x")
    mine = fake.dm(CHAT, None, photo=JPEG)
    with pytest.raises(BadRequest, match=r"(?i)message can't be edited"):
        await bot.edit_message_text("x", CHAT, mine["message_id"])
    assert len(fake.edits) == 2
