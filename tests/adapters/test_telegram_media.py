"""Telegram with media: photos to vision and text-only models, size limits, voice, and send_file."""

from __future__ import annotations

import json
from pathlib import Path

from bridge.config import Settings
from bridge.config.media import SttSettings
from bridge.config.session import SendPolicySettings
from bridge.events import loads
from bridge.store.base import MessageRow
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, images_in
from devkit.fakes.telegram_api import MB, FakeTelegram
from tests.adapters.conftest import OWNER, RigFactory, TelegramRig

JPEG = b"\xff\xd8\xff\xe0" + b"\x01" * 200
OTHER_JPEG = b"\xff\xd8\xff\xe0" + b"\x02" * 200
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def vision(settings: Settings) -> None:
    settings.llm.vision = True


async def user_rows(r: TelegramRig, key: str = "main") -> list[MessageRow]:
    store = r.bridge.store
    session = await store.active_session(key)
    if session is None:
        return []  # nothing was ever stored in that chat
    return [row for row in await store.history(session.id, 50) if row.kind == "user"]


async def test_a_photo_reaches_a_vision_model_as_an_image_part_with_its_caption(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("A cat."))
    async with rig(fake_llm, configure=vision) as r:
        tg.dm(OWNER, None, photo=JPEG, caption="what is this?")
        [reply] = await r.sent_to(OWNER, 1)
        [asked] = await user_rows(r)
        main = await r.bridge.store.active_session("main")
        assert main is not None
        [answer] = [row for row in await r.bridge.store.history(main.id, 10) if row.kind == "assistant"]
        trace = await r.bridge.store.get_trace(answer.run_id or "")
        metrics = r.bridge.metrics.render().decode()
    assert reply["text"] == "A cat."
    assert images_in(fake_llm.requests[0]) == [("image/jpeg", JPEG)]
    parts = fake_llm.requests[0]["messages"][-1]["content"]
    assert parts[0]["text"].endswith("]\nwhat is this?") and parts[0]["text"].startswith("[image: photo-")
    [photo] = loads(asked.media)
    assert photo.sha256 is not None and len(tg.downloads) == 1
    assert 'bridge_attachments_total{kind="image",outcome="stored"} 1.0' in metrics
    # The trace keeps the request's shape, not the photo's bytes.
    assert trace is not None and "data:image/jpeg;base64,<" in trace and "/+AB" not in trace


async def test_a_photo_to_a_text_only_model_is_answered_by_caption_and_the_user_told_once(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("Looks like a question."), fake.text("Still can't see it."))
    async with rig(fake_llm) as r:
        tg.dm(OWNER, None, photo=JPEG, caption="what is this?")
        first = await r.sent_to(OWNER, 2)
        tg.dm(OWNER, None, photo=OTHER_JPEG, caption="and this?")
        messages = await r.sent_to(OWNER, 3)
    notices = [m["text"] for m in messages if "can't see images" in m["text"]]
    assert len(notices) == 1
    assert {m["text"] for m in first} >= {"Looks like a question."}
    sent = fake_llm.requests[0]["messages"][-1]["content"]
    # Named, never sent as an image part, and the caption is still what is answered.
    assert isinstance(sent, str) and sent.startswith("[image: photo-") and sent.endswith("what is this?")
    assert images_in(fake_llm.requests[1]) == []


async def test_only_the_newest_images_go_as_parts_and_older_ones_by_name(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    def one_image(settings: Settings) -> None:
        settings.llm.vision = True
        settings.media.history_images = 1

    fake_llm.push(fake.text("first"), fake.text("second"))
    async with rig(fake_llm, configure=one_image) as r:
        tg.dm(OWNER, None, photo=JPEG, caption="one")
        await r.sent_to(OWNER, 1)
        tg.dm(OWNER, None, photo=PNG, caption="two")
        await r.sent_to(OWNER, 2)
    second = fake_llm.requests[1]
    assert images_in(second) == [("image/png", PNG)]
    older = next(m for m in second["messages"] if m["role"] == "user")["content"]
    assert isinstance(older, str) and older.startswith("[image: photo-")


async def test_an_oversized_file_is_refused_with_a_reply_and_never_downloaded(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    async with rig(fake_llm, configure=vision) as r:
        tg.dm(OWNER, None, document=("scan.png", "image/png", PNG), file_size=30 * MB)
        [notice] = await r.sent_to(OWNER, 1)
        assert await user_rows(r) == []
        metrics = r.bridge.metrics.render().decode()
    assert "scan.png is 30 MB" in notice["text"] and "up to 20 MB" in notice["text"]
    assert 'bridge_attachments_total{kind="image",outcome="refused"} 1.0' in metrics
    assert tg.downloads == [] and fake_llm.requests == []


async def test_a_file_over_the_configured_limit_is_refused_after_its_caption_is_kept(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    def small(settings: Settings) -> None:
        settings.llm.vision = True
        settings.media.max_bytes = 100

    fake_llm.push(fake.text("About your caption..."))
    async with rig(fake_llm, configure=small) as r:
        tg.dm(OWNER, None, photo=JPEG, caption="is this sharp?")
        messages = await r.sent_to(OWNER, 2)
    assert any(
        m["text"].endswith("is 204 bytes; I can take files up to 100 bytes, so I left it out.")
        for m in messages
    )
    assert images_in(fake_llm.requests[0]) == []
    assert "(too large" in fake_llm.requests[0]["messages"][-1]["content"]


async def test_a_voice_note_is_transcribed_stored_as_the_users_text_and_answered(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    def stt(settings: Settings) -> None:
        settings.stt = SttSettings(base_url=fake_llm.base_url, model="whisper-test", language="en")

    fake_llm.push_transcript("what's the weather tomorrow")
    fake_llm.push(fake.text("Sunny."))
    async with rig(fake_llm, configure=stt) as r:
        tg.dm(OWNER, None, voice=b"OggS" + b"\x00" * 300)
        [reply] = await r.sent_to(OWNER, 1)
        [asked] = await user_rows(r)
    assert reply["text"] == "Sunny."
    assert asked.content == "what's the weather tomorrow"
    [voice] = loads(asked.media)
    assert voice.transcribed and voice.voice
    call = fake_llm.last_transcription
    assert (
        call["model"] == "whisper-test"
        and call["language"] == "en"
        and (call["filename"] or "").endswith(".ogg")
    )
    sent = fake_llm.requests[0]["messages"][-1]["content"]
    assert sent == "[voice message, transcribed]\nwhat's the weather tomorrow"


async def test_a_failed_transcription_tells_the_user_and_keeps_the_message(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    def stt(settings: Settings) -> None:
        settings.stt = SttSettings(base_url=fake_llm.base_url)

    fake_llm.push_transcript(fake.http_error(400, "bad audio"))
    fake_llm.push(fake.text("Sorry, I couldn't hear that."))
    async with rig(fake_llm, configure=stt) as r:
        tg.dm(OWNER, None, voice=b"OggS" + b"\x00" * 300)
        messages = await r.sent_to(OWNER, 2)
        [asked] = await user_rows(r)
    assert any("couldn't transcribe your voice message" in m["text"] for m in messages)
    [voice] = loads(asked.media)
    assert voice.problem is not None and "not transcribed" in voice.problem


async def test_voice_without_stt_is_answered_with_a_notice_and_nothing_is_stored(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    async with rig(fake_llm) as r:
        tg.dm(OWNER, None, voice=b"OggS" + b"\x00" * 300)
        [notice] = await r.sent_to(OWNER, 1)
        assert await user_rows(r) == []
    assert "Voice messages aren't set up" in notice["text"]
    assert tg.downloads == [] and fake_llm.requests == [] and fake_llm.transcriptions == []


def files_turn(fake_llm: FakeOpenAI, path: str, caption: str | None = None) -> None:
    arguments = {"path": path} if caption is None else {"path": path, "caption": caption}
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "files"}),
        fake.tool_call("send_file", arguments),
        fake.text("Done."),
    )


async def test_send_file_sends_a_document_and_an_image_as_a_photo(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("buy milk\n")
    (workspace / "chart.png").write_bytes(PNG)
    files_turn(fake_llm, "notes.txt", "Your notes")
    fake_llm.push(fake.tool_call("send_file", {"path": "chart.png"}), fake.text("And the chart."))
    async with rig(fake_llm) as r:
        tg.dm(OWNER, "send my notes")
        await r.sent_to(OWNER, 3)
        tg.dm(OWNER, "and the chart")
        await r.sent_to(OWNER, 5)
    document, photo = tg.sent_files
    assert (document["method"], document["filename"], document["data"]) == (
        "senddocument",
        "notes.txt",
        b"buy milk\n",
    )
    assert document["caption"] == "Your notes"
    assert (photo["method"], photo["data"]) == ("sendphoto", PNG)
    assert json.loads(fake_llm.requests[2]["messages"][-1]["content"])["status"] == "sent"


async def test_send_file_in_a_chat_the_send_policy_silences_is_suppressed(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    def deny(settings: Settings) -> None:
        settings.session.send_policy = SendPolicySettings(default="deny")

    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "secret.txt").write_text("x")
    files_turn(fake_llm, "secret.txt")
    async with rig(fake_llm, configure=deny) as r:
        tg.dm(OWNER, "send the file")
        await fake_llm.wait_for_requests(3)
        await r.settled()
        rows = await r.bridge.store.outbox()
    assert tg.sent_files == [] and tg.messages_in(OWNER) == []
    assert "suppressed" in fake_llm.requests[2]["messages"][-1]["content"]
    assert rows and all(row.item.state == "suppressed" for row in rows)
    assert any(row.item.text == "📎 secret.txt" for row in rows)


async def test_send_file_outside_the_workspace_or_missing_is_an_error_for_the_model(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "files"}),
        fake.tool_call("send_file", {"path": "../bridge.db"}),
        fake.tool_call("send_file", {"path": "nope.txt"}),
        fake.text("Couldn't."),
    )
    async with rig(fake_llm) as r:
        tg.dm(OWNER, "send the database")
        await r.sent_to(OWNER, 2)
    assert "outside_workspace" in fake_llm.requests[2]["messages"][-1]["content"]
    assert "not_found" in fake_llm.requests[3]["messages"][-1]["content"]
    assert tg.sent_files == []


async def test_a_download_the_network_drops_once_is_retried_and_the_photo_still_seen(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("Got it."))
    async with rig(fake_llm, configure=vision) as r:
        tg.fail_next("file", "502")
        tg.dm(OWNER, None, photo=JPEG, caption="and now?")
        [reply] = await r.sent_to(OWNER, 1)
    assert reply["text"] == "Got it." and images_in(fake_llm.requests[0]) == [("image/jpeg", JPEG)]


async def test_a_photo_telegram_no_longer_has_is_named_and_the_user_told(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("I couldn't open it."))
    async with rig(fake_llm, configure=vision) as r:
        tg.dm(OWNER, None, photo=True, caption="see?")  # sizes with no file behind them
        messages = await r.sent_to(OWNER, 2)
        [asked] = await user_rows(r)
    assert any(m["text"].startswith("⚠️ I couldn't fetch photo-") for m in messages)
    [photo] = loads(asked.media)
    assert photo.problem is not None and photo.sha256 is None
    assert "Telegram refused it" in fake_llm.requests[0]["messages"][-1]["content"]


async def test_stop_while_a_download_hangs_ends_the_run_as_cancelled_and_the_chat_goes_on(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("Still here."))
    async with rig(fake_llm, configure=vision) as r:
        tg.fail_next("file", "hang")
        tg.dm(OWNER, None, photo=JPEG, caption="look")
        # The file's own request, not only getFile: a /stop before it arrives would leave the hang
        # queued for the next run's download.
        await tg.wait_for(lambda: bool(tg.download_requests))
        tg.dm(OWNER, "/stop")
        await r.sent_to(OWNER, 1)
        tg.dm(OWNER, "hello?")
        messages = await r.sent_to(OWNER, 2)
        runs = await r.bridge.store.list_runs(session_key="main", limit=5)
    assert "stopped" in messages[0]["text"].lower() and messages[-1]["text"] == "Still here."
    assert sorted(run.status for run, _ in runs) == ["cancelled", "ok"]


async def test_a_redelivered_oversized_file_is_not_refused_twice(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("hi"))
    async with rig(fake_llm, configure=vision) as r:
        tg.dm(OWNER, None, document=("scan.png", "image/png", PNG), file_size=30 * MB)
        await r.sent_to(OWNER, 1)
        tg.redeliver_all()  # as after a crash before Telegram had the offset
        tg.dm(OWNER, "still there?")
        messages = await r.sent_to(OWNER, 2)
    assert [m["text"] for m in messages][1:] == ["hi"]
    assert sum("scan.png is 30 MB" in m["text"] for m in messages) == 1
